//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/app"
	"github.com/sundialhq/sundial/services/worker/internal/target"
)

const stCancelled = sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED

// cancelNotice is the notice the sink got at /cancel for exec.
func (e *env) cancelNotice(exec string, within time.Duration) (target.CancelBody, callback) {
	e.t.Helper()
	var body target.CancelBody
	var got callback
	eventually(e.t, within, "the cancel notice of "+exec, func() bool {
		for _, c := range e.sink.cancelsSnapshot() {
			var b target.CancelBody
			if json.Unmarshal(c.body, &b) == nil && b.ExecutionID == exec {
				body, got = b, c
				return true
			}
		}
		return false
	})
	if got.sigErr != nil || got.header.Get(firing.HeaderEvent) != firing.EventCancelled || got.header.Get(firing.HeaderIdempotencyKey) != exec+":cancelled" {
		e.t.Errorf("cancel notice of %s: signature %v, headers %v", exec, got.sigErr, got.header)
	}
	return body, got
}

// overlapWaits is how often the workers held a firing of the policy back
// behind a running execution of its job.
func (e *env) overlapWaits(w1, w2 *app.Worker, policy string) float64 {
	return testutil.ToFloat64(w1.Metrics.OverlapWaits.WithLabelValues(policy)) + testutil.ToFloat64(w2.Metrics.OverlapWaits.WithLabelValues(policy))
}

// overlapJob is n slots of a new job under policy, step apart from base,
// on the four priority topics in turn (so on different workers), with a
// cancel_url on the sink.
func (e *env) overlapJob(policy sundialv1.OverlapPolicy, concurrency int32, base time.Time, step time.Duration, n int) []*sundialv1.Firing {
	job := uuid.Must(uuid.NewV7())
	fs := make([]*sundialv1.Firing, 0, n)
	for i := range n {
		f := e.firing(job, base.Add(time.Duration(i)*step), priorities[i%4])
		f.Overlap, f.MaxConcurrency = policy, concurrency
		f.GetTarget().GetHttp().CancelUrl = e.sink.srv.URL + "/cancel"
		fs = append(fs, f)
	}
	return fs
}

// The overlap policies beyond BUFFER_ONE, and max_concurrency, across two
// workers against real Kafka, Redis, Postgres and Cassandra:
//   - BUFFER_ALL: every slot due while the first runs waits, and they run
//     one at a time in slot order once it ends;
//   - TERMINATE_OTHER: the next slot runs at once beside the slow first,
//     whose attempt is abandoned, recorded CANCELLED naming the policy and
//     the slot, and its target told at its cancel_url;
//   - CANCEL_OTHER: the next slot asks the first to cancel and runs only
//     once it has ended;
//   - max_concurrency 2 with a slow target: two at once, never three.
func TestOverlapPoliciesBeyondBufferOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	w1 := e.startInProcess(e.config("w1"))
	w2 := e.startInProcess(e.config("w2"))
	eventually(t, 60*time.Second, "16 partitions split between two workers", func() bool {
		a, b := testutil.ToFloat64(w1.Metrics.Assigned), testutil.ToFloat64(w2.Metrics.Assigned)
		return a > 0 && b > 0 && a+b == 16
	})
	base := time.Now().Add(4 * time.Second)
	all := e.overlapJob(sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL, 0, base, time.Second, 4)
	term := e.overlapJob(sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER, 0, base, 2*time.Second, 2)
	canc := e.overlapJob(sundialv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER, 0, base, 2*time.Second, 2)
	conc := e.overlapJob(sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL, 2, base, 100*time.Millisecond, 5)
	releaseAll, never := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(never) })
	e.sink.mu.Lock()
	e.sink.hold[all[0].GetExecutionId()] = releaseAll
	e.sink.hold[term[0].GetExecutionId()] = never
	e.sink.hold[canc[0].GetExecutionId()] = never
	e.sink.mu.Unlock()
	slow := make([]reply, 5)
	for i := range slow {
		slow[i] = reply{status: 200, delay: 1500 * time.Millisecond}
	}
	e.sink.setScript(conc[0].GetJobId(), slow...)
	var fs []*sundialv1.Firing
	for _, j := range [][]*sundialv1.Firing{all, term, canc, conc} {
		fs = append(fs, j...)
	}
	e.produce(fs, nil)

	// TERMINATE_OTHER: slot 1 runs while slot 0 is still at the target;
	// slot 0 is abandoned.
	r := e.waitRow(term[0].GetExecutionId(), 1, stCancelled, 60*time.Second)
	if want := "cancelled by overlap:terminate_other for " + term[1].GetExecutionId() + " during the attempt"; !strings.Contains(r.GetReason(), want) {
		t.Errorf("terminated slot reason %q, want %q", r.GetReason(), want)
	}
	e.waitRow(term[1].GetExecutionId(), 1, stSucceeded, 30*time.Second)
	if b, _ := e.cancelNotice(term[0].GetExecutionId(), 30*time.Second); b.CancelledBy != "overlap:terminate_other for "+term[1].GetExecutionId() || b.JobID != term[0].GetJobId() {
		t.Errorf("terminate notice %+v", b)
	}
	// "Did not wait" is the lease's answer, not the sink's overlap: slot 0
	// learns of its end at its next lease renewal, which may land in the
	// moment between slot 1 taking its lease and its request arriving.
	// CANCEL_OTHER below is the control: its slot 1 is held back.
	if n := e.overlapWaits(w1, w2, "TERMINATE_OTHER"); n != 0 {
		t.Errorf("TERMINATE_OTHER: slot 1 was held back behind slot 0 %v times, want 0 (the new one runs at once)", n)
	}

	// CANCEL_OTHER: slot 1 runs only after slot 0 ended.
	r = e.waitRow(canc[0].GetExecutionId(), 1, stCancelled, 60*time.Second)
	if want := "cancelled by overlap:cancel_other for " + canc[1].GetExecutionId(); !strings.Contains(r.GetReason(), want) {
		t.Errorf("cancelled slot reason %q, want %q", r.GetReason(), want)
	}
	ended := r.GetFinishedTime().AsTime()
	e.waitRow(canc[1].GetExecutionId(), 1, stSucceeded, 30*time.Second)
	e.cancelNotice(canc[0].GetExecutionId(), 30*time.Second)
	if p := e.sink.peakOf(canc[0].GetJobId()); p != 1 {
		t.Errorf("CANCEL_OTHER: %d requests at the target at once, want 1", p)
	}
	if n := e.overlapWaits(w1, w2, "CANCEL_OTHER"); n == 0 {
		t.Error("CANCEL_OTHER: slot 1 was never held back behind slot 0")
	}
	for _, a := range e.sink.ofJob(canc[0].GetJobId()) {
		if a.exec == canc[1].GetExecutionId() && a.received.Before(ended.Add(-100*time.Millisecond)) {
			t.Errorf("CANCEL_OTHER: slot 1 reached the target at %s, before slot 0 ended at %s", a.received, ended)
		}
	}

	// BUFFER_ALL: nothing of slots 1-3 ran while slot 0 held the job
	// (slot 3 was due a second before the cancel checks above ended, at
	// the earliest). Slot 0 is released 8 s after its instant, so slots 1
	// to 3 are all past the misfire threshold when they start: late by
	// their job's own overlap policy, not a misfire that RUN_ONCE (the
	// default) would shed as superseded.
	time.Sleep(time.Until(base.Add(8 * time.Second)))
	for _, f := range all[1:] {
		if got := e.rows(f.GetExecutionId()); len(got) != 0 {
			t.Fatalf("BUFFER_ALL: slot %s ran or was skipped while slot 0 ran: %v", f.GetExecutionId(), got)
		}
	}
	released := time.Now()
	close(releaseAll)
	for _, f := range all {
		e.waitRow(f.GetExecutionId(), 1, stSucceeded, 60*time.Second)
	}
	arr := e.sink.ofJob(all[0].GetJobId())
	if len(arr) != 4 {
		t.Fatalf("BUFFER_ALL: %d requests, want 4", len(arr))
	}
	for i, a := range arr {
		if a.exec != all[i].GetExecutionId() {
			t.Errorf("BUFFER_ALL: request %d was slot %s, want slot %d (%s)", i, a.exec, i, all[i].GetExecutionId())
		}
		if i > 0 && a.received.Before(released) {
			t.Errorf("BUFFER_ALL: slot %d ran at %s, before slot 0 ended at %s", i, a.received, released)
		}
	}

	// max_concurrency 2: all five ran, two at a time.
	for _, f := range conc {
		e.waitRow(f.GetExecutionId(), 1, stSucceeded, 60*time.Second)
	}
	if p := e.sink.peakOf(conc[0].GetJobId()); p != 2 {
		t.Errorf("max_concurrency 2: %d requests at the target at once, want 2", p)
	}
	e.sink.checkProblems(t)
}

// JobService.CancelExecution's request (lease.Store.Cancel, as the api
// makes it) reaches the worker running the attempt: it abandons the
// request, records CANCELLED naming the principal, tells the target, and
// no retry follows. An execution between attempts is cancelled too: its
// retry is recorded CANCELLED without being sent.
func TestCancelExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	w := e.startInProcess(e.config("w1"))
	e.startRelay() // publishes the staged retry
	eventually(t, 60*time.Second, "partitions assigned", func() bool { return testutil.ToFloat64(w.Metrics.Assigned) == 4 })
	leases := lease.New(e.rdb, lease.WithPrefix(e.redisPfx))
	ctx := context.Background()

	at := time.Now().Add(2 * time.Second)
	running := withRetry(e.firing(uuid.Must(uuid.NewV7()), at, sundialv1.Priority_PRIORITY_HIGH), 3, sundialv1.Backoff_BACKOFF_FIXED, time.Second, time.Second)
	running.GetTarget().GetHttp().CancelUrl = e.sink.srv.URL + "/cancel"
	pending := withRetry(e.firing(uuid.Must(uuid.NewV7()), at, sundialv1.Priority_PRIORITY_HIGH), 3, sundialv1.Backoff_BACKOFF_FIXED, 8*time.Second, 8*time.Second)
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	e.sink.mu.Lock()
	e.sink.hold[running.GetExecutionId()] = never
	e.sink.mu.Unlock()
	e.sink.setScript(pending.GetJobId(), reply{status: 503})
	e.produce([]*sundialv1.Firing{running, pending}, nil)

	eventually(t, 30*time.Second, "the running attempt at the target", func() bool { return len(e.sink.ofJob(running.GetJobId())) == 1 })
	st, who, err := leases.Cancel(ctx, running.GetJobId(), running.GetExecutionId(), "acme/alice")
	if err != nil || st != lease.CancelRunning || who != "acme/alice" {
		t.Fatalf("cancel: %v %q %v", st, who, err)
	}
	r := e.waitRow(running.GetExecutionId(), 1, stCancelled, 30*time.Second)
	if !strings.Contains(r.GetReason(), "cancelled by acme/alice during the attempt") || r.GetFenceToken() == 0 {
		t.Errorf("record %v", r)
	}
	if b, _ := e.cancelNotice(running.GetExecutionId(), 30*time.Second); b.CancelledBy != "acme/alice" || b.Attempt != 1 {
		t.Errorf("notice %+v", b)
	}

	e.waitRow(pending.GetExecutionId(), 1, stRetry, 30*time.Second)
	if st, _, err := leases.Cancel(ctx, pending.GetJobId(), pending.GetExecutionId(), "acme/bob"); err != nil || st != lease.CancelPending {
		t.Fatalf("cancel between attempts: %v %v", st, err)
	}
	r = e.waitRow(pending.GetExecutionId(), 2, stCancelled, 30*time.Second)
	if !strings.Contains(r.GetReason(), "cancelled by acme/bob before this attempt was sent") {
		t.Errorf("retry record %v", r)
	}

	// No retry of the cancelled running execution, and the pending one's
	// retry never reached the target.
	time.Sleep(3 * time.Second)
	if rows := e.rows(running.GetExecutionId()); len(rows) != 1 {
		t.Errorf("rows of the cancelled execution: %v", rows)
	}
	if n := len(e.sink.ofJob(pending.GetJobId())); n != 1 {
		t.Errorf("the pending execution reached the target %d times, want 1", n)
	}
	if st, _, _ := leases.Cancel(ctx, running.GetJobId(), running.GetExecutionId(), "acme/carol"); st != lease.CancelFinished {
		t.Errorf("cancel of a cancelled execution: %v", st)
	}
}
