//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"
)

func everySecond(n int) []jobPlan {
	var plans []jobPlan
	for i := range n {
		plans = append(plans, jobPlan{name: fmt.Sprintf("sec-%03d", i), cron: "* * * * * *", priority: priorities[i%len(priorities)]})
	}
	return plans
}

// leader returns the prefetcher whose metrics say it leads, or nil.
func leader(t *testing.T, ps ...*proc) *proc {
	for _, pr := range ps {
		if !pr.Alive() {
			continue
		}
		if v, ok := metric(t, pr, "sundial_prefetcher_leader"); ok && v == 1 {
			return pr
		}
	}
	return nil
}

// TestPrefetcherLeaderKilled kills -9 the prefetcher leader while a standby
// runs. The window is short (5 s) so the standby must stage most of the
// run's slots itself: no slot may be lost or doubled.
func TestPrefetcherLeaderKilled(t *testing.T) {
	p := newPlatform(t)
	pf1 := p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1", "--window", "5s")
	pf2 := p.start("prefetcher-2", "prefetcher", "--node-id", "pf-2", "--window", "5s")
	p.start("worker-1", "worker", "--worker-id", "w1")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(30 * time.Second)
	want, _ := p.register(t, everySecond(40), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	old := leader(t, pf1, pf2)
	if old == nil {
		t.Fatal("no prefetcher says it leads")
	}
	standby := pf1
	if old == pf1 {
		standby = pf2
	}
	old.kill(t)
	killed := time.Now()
	deadline := killed.Add(20 * time.Second)
	for leader(t, standby) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not take over within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	takeover := time.Since(killed)
	t.Logf("standby %s leads %s after the kill -9 (target: within 5s)", standby.Name, takeover.Round(time.Millisecond))

	awaitDeliveries(t, s, want, end.Add(60*time.Second))
	checkDeliveries(t, s, want, false, true)
	got, _ := s.snapshot()
	// Firings due right after the kill were already in Kafka: the leader's
	// death must not make them late.
	inKafka := func(d delivery) bool {
		return d.scheduled.After(killed) && d.scheduled.Before(killed.Add(4*time.Second))
	}
	t.Logf("lateness of slots staged before the kill and due in the 4s after it: %s", lateness(got, inKafka))
	t.Logf("lateness of all slots: %s", lateness(got, nil))
}

// TestWorkerKilled kills -9 one of two workers mid-run: its firings are
// delivered by the other, none is lost, and redeliveries of executions it
// had finished are dropped before the target.
func TestWorkerKilled(t *testing.T) {
	p := newPlatform(t)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	w1 := p.start("worker-1", "worker", "--worker-id", "w1", "--session-timeout", "6s")
	p.start("worker-2", "worker", "--worker-id", "w2", "--session-timeout", "6s")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(25 * time.Second)
	want, _ := p.register(t, everySecond(60), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	killed := time.Now()
	w1.kill(t)

	awaitDeliveries(t, s, want, end.Add(90*time.Second))
	// The surviving worker fires the dead one's backlog at once, out of
	// slot order, so only fence uniqueness is checked.
	dups := checkDeliveries(t, s, want, true, false)
	// Only attempts in flight at the instant of the kill can reach the
	// target twice (the second after their lease expires); every execution
	// the dead worker finished is refused by its done marker. The kill
	// lands on the second the herd of 60 fires, and the worker sends a
	// herd's requests together (their leases were taken ahead), so up to
	// that herd may be in flight — and nothing due earlier or later.
	if dups > 60 {
		t.Errorf("%d raw duplicate deliveries after one worker's kill; only the attempts in flight may repeat", dups)
	}
	for id, ds := range s.ByExecution() {
		if len(ds) > 1 && (ds[0].Scheduled.Before(killed.Add(-2*time.Second)) || ds[0].Scheduled.After(killed.Add(time.Second))) {
			t.Errorf("execution %s of slot %s arrived %d times, but it was not in flight at the kill (%s)",
				id, ds[0].Scheduled.Format(time.TimeOnly), len(ds), killed.Format("15:04:05.000"))
		}
	}
	got, _ := s.snapshot()
	t.Logf("lateness of all slots: %s", lateness(got, nil))
}
