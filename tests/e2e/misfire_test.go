//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ledgerOf lists every attempt of a job through the api.
func ledgerOf(t *testing.T, p *platform, jobID string) []*sundialv1.ExecutionAttempt {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	var out []*sundialv1.ExecutionAttempt
	token := ""
	for {
		resp, err := p.client().ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: jobID, PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("ListExecutions %s: %v", jobID, err)
		}
		out = append(out, resp.GetAttempts()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

// misfireSlots are a job's slots the ledger says were skipped by a misfire.
func misfireSlots(attempts []*sundialv1.ExecutionAttempt) map[time.Time]string {
	out := map[time.Time]string{}
	for _, a := range attempts {
		if a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED && strings.HasPrefix(a.GetReason(), "misfire:") {
			out[a.GetScheduledTime().AsTime().UTC()] = a.GetReason()
		}
	}
	return out
}

// TestPrefetcherOutageCatchUpAndResume stops the only prefetcher for longer
// than its window. When it is back: each policy replays the missed slots
// it should, as paced catch-up firings the target sees with
// Sundial-Catch-Up: true; every other slot of the outage is in the ledger
// as SKIPPED with a misfire reason; and a job paused before the outage and
// resumed after it fires from now on, with neither catch-up nor misfire,
// its history without a hole (the pause's slots recorded SKIPPED "paused").
func TestPrefetcherOutageCatchUpAndResume(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	pfArgs := []string{"--window", "2s", "--tick", "200ms", "--misfire-threshold", "1s", "--catch-up-rate", "4"}
	pf := p.start("prefetcher-1", "prefetcher", append([]string{"--node-id", "pf-1"}, pfArgs...)...)
	p.start("worker-1", "worker", "--worker-id", "w1")
	s := newSink(t, p)
	ctx := ctxT(t, 5*time.Minute)
	cl := p.client()

	type job struct {
		name string
		keep int // missed slots replayed
		id   string
	}
	create := func(name string, action sundialv1.MisfireAction, maxCatchUp int32) string {
		resp, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
			Name:     name,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}, Timezone: "UTC"},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: s.url()}}},
			Misfire:  &sundialv1.MisfirePolicy{Action: action, Grace: durationpb.New(time.Hour), MaxCatchUp: maxCatchUp},
		}, IdempotencyKey: name})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return resp.GetJob().GetId()
	}
	jobs := []*job{
		{name: "run-all-3", keep: 3},
		{name: "skip", keep: 0},
	}
	jobs[0].id = create(jobs[0].name, sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 3)
	jobs[1].id = create(jobs[1].name, sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, 0)
	for i := range 8 {
		j := &job{name: fmt.Sprintf("run-once-%d", i), keep: 1}
		j.id = create(j.name, sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, 0)
		jobs = append(jobs, j)
	}
	// Paused across the outage; RUN_ALL with a large cap, so treating the
	// pause as a misfire would show as a burst of catch-ups.
	resumed := create("resumed", sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 100)

	byJob := func() map[string][]delivery {
		got, _ := s.snapshot()
		out := map[string][]delivery{}
		for _, ds := range got {
			out[ds[0].jobID] = append(out[ds[0].jobID], ds[0])
		}
		for _, ds := range out {
			sort.Slice(ds, func(a, b int) bool { return ds[a].scheduled.Before(ds[b].scheduled) })
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("every job to fire", func() bool {
		got := byJob()
		for _, j := range jobs {
			if len(got[j.id]) < 2 {
				return false
			}
		}
		return len(got[resumed]) >= 2
	})
	if _, err := cl.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: resumed}); err != nil {
		t.Fatalf("pause: %v", err)
	}

	// The outage: the only prefetcher is stopped for 8 s, four windows.
	if err := pf.stop(t); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // the outage's length, not synchronisation
	restarted := time.Now()
	p.start("prefetcher-2", "prefetcher", append([]string{"--node-id", "pf-2"}, pfArgs...)...)
	if _, err := cl.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: resumed}); err != nil {
		t.Fatalf("resume: %v", err)
	}

	// Wait until every job fires past the outage again and its catch-ups
	// arrived.
	waitFor("catch-ups and firing after the outage", func() bool {
		got := byJob()
		for _, j := range jobs {
			ds := got[j.id]
			n := 0
			for _, d := range ds {
				if d.catchUp {
					n++
				}
			}
			if n < j.keep || len(ds) == 0 || !ds[len(ds)-1].received.After(restarted.Add(5*time.Second)) {
				return false
			}
		}
		ds := got[resumed]
		return len(ds) > 0 && ds[len(ds)-1].received.After(restarted.Add(5*time.Second))
	})

	got := byJob()
	var catchUps []delivery
	for _, j := range jobs {
		ds := got[j.id]
		// The outage is the longest stretch of slots that did not fire
		// (at least a few seconds; before and after, every second fires).
		var replayed []time.Time
		for _, d := range ds {
			if d.catchUp {
				replayed = append(replayed, d.scheduled)
				catchUps = append(catchUps, d)
			}
		}
		if len(replayed) != j.keep {
			t.Errorf("%s: %d catch-up firings, want %d", j.name, len(replayed), j.keep)
		}
		// Every slot from the first delivery to the last either fired
		// (once, as usual or as a catch-up) or is in the ledger as skipped
		// by the misfire, never both.
		var skipped map[time.Time]string
		first, last := ds[0].scheduled, ds[len(ds)-1].scheduled
		fired := map[time.Time]bool{}
		for _, d := range ds {
			fired[d.scheduled.UTC()] = true
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			skipped = misfireSlots(ledgerOf(t, p, j.id))
			if len(skipped) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // the drainer's next round
		}
		if len(skipped) == 0 {
			t.Errorf("%s: no misfire rows in the ledger", j.name)
			continue
		}
		var gap []time.Time
		for slot := first.UTC(); !slot.After(last); slot = slot.Add(time.Second) {
			why, wasSkipped := skipped[slot]
			switch {
			case fired[slot] && wasSkipped:
				t.Errorf("%s: slot %s fired and is recorded as skipped (%s)", j.name, slot, why)
			case !fired[slot] && !wasSkipped:
				t.Errorf("%s: slot %s neither fired nor is recorded as skipped", j.name, slot)
			case wasSkipped:
				gap = append(gap, slot)
			}
		}
		// The replayed slots are the most recent missed ones: right after
		// the skipped ones.
		if len(gap) > 0 && len(replayed) > 0 && !replayed[0].Equal(gap[len(gap)-1].Add(time.Second)) {
			t.Errorf("%s: replayed %v, but the last skipped slot is %s", j.name, replayed, gap[len(gap)-1])
		}
		t.Logf("%s: %d slots skipped (%s … %s), %d replayed", j.name, len(gap), gap[0].Format(time.TimeOnly), gap[len(gap)-1].Format(time.TimeOnly), len(replayed))
	}

	// Paced: 3 + 8 catch-ups at 4/s; the last cannot be released before
	// (n-1)/4 s after the recovery pass, which came after the restart.
	sort.Slice(catchUps, func(a, b int) bool { return catchUps[a].received.Before(catchUps[b].received) })
	n := len(catchUps)
	span := time.Duration(n-1) * time.Second / 4
	if lastAt := catchUps[n-1].received.Sub(restarted); lastAt < span {
		t.Errorf("the last of %d catch-ups arrived %s after the restart: faster than 4/s (at least %s)", n, lastAt, span)
	}
	t.Logf("%d catch-ups arrived from %s to %s after the restart (paced at 4/s: at least %s)", n,
		catchUps[0].received.Sub(restarted).Round(time.Millisecond), catchUps[n-1].received.Sub(restarted).Round(time.Millisecond), span)

	// Resumed: fires from now on, no catch-up, no misfire.
	for _, d := range got[resumed] {
		if d.catchUp {
			t.Errorf("resumed job: slot %s fired as a catch-up", d.scheduled)
		}
	}
	if m := misfireSlots(ledgerOf(t, p, resumed)); len(m) > 0 {
		t.Errorf("resumed job: %d slots recorded as misfires, e.g. %v", len(m), m)
	}

	// Its history has no hole: every slot from its first delivery to its
	// last fired or is in the ledger as SKIPPED — dropped by the pause
	// ("job paused"), found stale by a worker, or fallen in the pause and
	// recorded at the resume ("paused").
	ds := got[resumed]
	fired := map[time.Time]bool{}
	for _, d := range ds {
		fired[d.scheduled.UTC()] = true
	}
	var skipped map[time.Time]string
	pausedRows := func() int {
		n := 0
		for _, why := range skipped {
			if why == "paused" {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		skipped = skippedSlots(ledgerOf(t, p, resumed))
		if pausedRows() > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the drainer's next round
	}
	holes := 0
	for slot := ds[0].scheduled.UTC(); !slot.After(ds[len(ds)-1].scheduled.UTC()); slot = slot.Add(time.Second) {
		if _, ok := skipped[slot]; !ok && !fired[slot] {
			if holes++; holes <= 3 {
				t.Errorf("resumed job: slot %s neither fired nor is recorded as skipped", slot)
			}
		}
	}
	if n := pausedRows(); n == 0 || holes > 0 {
		t.Errorf("resumed job: %d slots recorded as paused, %d holes", n, holes)
	} else {
		t.Logf("resumed job: %d slots recorded as paused, no hole", n)
	}
}

// skippedSlots are a per-second job's slots the ledger says were skipped,
// and why: one row each, or a summary row (the api's for the firings of a
// changed job it dropped from the outbox, a worker's for those it dropped) ("N slots due from T1 to T2 dropped: …"), which
// stands for every second from T1 to T2.
func skippedSlots(attempts []*sundialv1.ExecutionAttempt) map[time.Time]string {
	out := map[time.Time]string{}
	for _, a := range attempts {
		if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED {
			continue
		}
		if first, last, ok := droppedRange(a.GetReason()); ok {
			for slot := first.Truncate(time.Second); !slot.After(last); slot = slot.Add(time.Second) {
				out[slot] = a.GetReason()
			}
			continue
		}
		out[a.GetScheduledTime().AsTime().UTC()] = a.GetReason()
	}
	return out
}

// droppedSlotsRE matches the reason of a worker's summary of a changed
// job's dropped firings.
var droppedSlotsRE = regexp.MustCompile(`^(\d+) slots? due from (\S+) to (\S+) dropped: job version`)

// droppedRange is the first and last instant a summary row of dropped
// firings stands for.
func droppedRange(reason string) (first, last time.Time, ok bool) {
	m := droppedSlotsRE.FindStringSubmatch(reason)
	if m == nil {
		return time.Time{}, time.Time{}, false
	}
	first, err1 := time.Parse(time.RFC3339Nano, m[2])
	last, err2 := time.Parse(time.RFC3339Nano, m[3])
	return first.UTC(), last.UTC(), err1 == nil && err2 == nil
}

// droppedCount is how many firings a summary row of dropped firings
// stands for (0 for any other row).
func droppedCount(reason string) int {
	m := droppedSlotsRE.FindStringSubmatch(reason)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
