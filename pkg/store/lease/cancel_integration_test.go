//go:build integration

package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

func exn(job, exec string, o lease.Overlap, n int32, order int64) lease.Execution {
	e := exo(job, exec, 1, o)
	e.MaxConcurrency, e.Order = n, order
	return e
}

// BUFFER_ALL: every slot that comes while one runs waits, up to
// MaxBuffered, and they start in slot order whatever order they ask in; a
// later slot asking first while there is room still waits behind the
// earlier one.
func TestOverlapBufferAllRunsInSlotOrder(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapBufferAll
	a := exn("job", "a", o, 0, 1)
	acquire(t, s, a, "ha")
	// c (slot 3) asks before b (slot 2).
	for _, e := range []lease.Execution{exn("job", "c", o, 0, 3), exn("job", "b", o, 0, 2), exn("job", "d", o, 0, 4)} {
		if r := acquire(t, s, e, "h"+e.ExecutionID); r.Outcome != lease.Waiting || r.Running != "a" {
			t.Fatalf("%s while a runs: %+v, want waiting behind a", e.ExecutionID, r)
		}
	}
	if got := rdb.ZRange(ctx, s.Keys("job", "").Buffered, 0, -1).Val(); len(got) != 3 || got[0] != "b" || got[1] != "c" || got[2] != "d" {
		t.Fatalf("queue %q, want [b c d]", got)
	}
	if err := s.MarkDone(ctx, a, "ha", time.Hour); err != nil {
		t.Fatal(err)
	}
	// c and d look first: the room is b's.
	for _, id := range []string{"c", "d"} {
		if r := acquire(t, s, exn("job", id, o, 0, 0), "h"+id); r.Outcome != lease.Waiting || r.Running != "b" || r.HeldFor != 0 {
			t.Fatalf("%s before b: %+v, want waiting behind b, look again at once", id, r)
		}
	}
	b := exn("job", "b", o, 0, 2)
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Acquired {
		t.Fatalf("b: %v", r.Outcome)
	}
	if err := s.MarkAttemptDone(ctx, b, "hb", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, exn("job", "d", o, 0, 4), "hd"); r.Outcome != lease.Waiting || r.Running != "c" {
		t.Fatalf("d before c: %+v", r)
	}
	if r := acquire(t, s, exn("job", "c", o, 0, 3), "hc"); r.Outcome != lease.Acquired {
		t.Fatalf("c after b: %v", r.Outcome)
	}
}

// The queue is bounded: beyond MaxBuffered a slot is skipped. A queued
// firing that stops asking leaves the queue after its deadline.
func TestOverlapBufferAllBound(t *testing.T) {
	s, _, _ := newStore(t)
	o := lease.OverlapBufferAll
	acquire(t, s, exn("job", "run", o, 0, 0), "h")
	for i := range lease.MaxBuffered {
		e := exn("job", "q"+string(rune('A'+i/26))+string(rune('a'+i%26)), o, 0, int64(i+1))
		if r := acquire(t, s, e, "h"+e.ExecutionID); r.Outcome != lease.Waiting {
			t.Fatalf("queued %d: %v", i, r.Outcome)
		}
	}
	if r := acquire(t, s, exn("job", "over", o, 0, 1000), "hover"); r.Outcome != lease.Overlapping {
		t.Fatalf("slot beyond the bound: %v, want overlapping (skipped)", r.Outcome)
	}
}

// A queued firing that never asks again does not block the queue past
// its deadline (twice the TTL past the running one's place).
func TestOverlapQueueForgetsFiringsThatStopAsking(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapBufferAll
	a := exn("job", "a", o, 0, 1)
	if r, err := s.Acquire(ctx, a, "ha", 100*time.Millisecond); err != nil || r.Outcome != lease.Acquired {
		t.Fatal(r, err)
	}
	if r, err := s.Acquire(ctx, exn("job", "gone", o, 0, 2), "hg", 100*time.Millisecond); err != nil || r.Outcome != lease.Waiting {
		t.Fatal(r, err)
	}
	if err := s.MarkDone(ctx, a, "ha", time.Hour); err != nil {
		t.Fatal(err)
	}
	c := exn("job", "c", o, 0, 3)
	if r := acquire(t, s, c, "hc"); r.Outcome != lease.Waiting {
		t.Fatalf("c while gone is queued: %v", r.Outcome)
	}
	waitFor(t, func() bool { return acquire(t, s, c, "hc").Outcome == lease.Acquired })
}

// max_concurrency N: N run at once, the N+1th meets the overlap policy.
func TestMaxConcurrency(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapSkip
	a, b := exn("job", "a", o, 2, 0), exn("job", "b", o, 2, 0)
	for _, e := range []lease.Execution{a, b} {
		if r := acquire(t, s, e, "h"+e.ExecutionID); r.Outcome != lease.Acquired {
			t.Fatalf("%s: %v", e.ExecutionID, r.Outcome)
		}
	}
	if r := acquire(t, s, exn("job", "c", o, 2, 0), "hc"); r.Outcome != lease.Overlapping {
		t.Fatalf("third of two: %v, want overlapping", r.Outcome)
	}
	if err := s.MarkDone(ctx, a, "ha", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, exn("job", "d", o, 2, 0), "hd"); r.Outcome != lease.Acquired {
		t.Fatalf("d once a ended: %v", r.Outcome)
	}
	// BUFFER_ALL with two: the third waits.
	q := lease.OverlapBufferAll
	acquire(t, s, exn("job2", "a", q, 2, 1), "x1")
	acquire(t, s, exn("job2", "b", q, 2, 2), "x2")
	if r := acquire(t, s, exn("job2", "c", q, 2, 3), "x3"); r.Outcome != lease.Waiting {
		t.Fatalf("third of two under BUFFER_ALL: %v, want waiting", r.Outcome)
	}
}

// TERMINATE_OTHER: the new execution runs at once; the running one's next
// renewal says it was cancelled, by whom, and its redeliveries and retries
// are Cancelled.
func TestOverlapTerminateOther(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapTerminateOther
	a, b := exn("job", "a", o, 0, 0), exn("job", "b", o, 0, 0)
	acquire(t, s, a, "ha")
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Acquired {
		t.Fatalf("b: %v, want acquired at once", r.Outcome)
	}
	if got := rdb.ZRange(ctx, s.Keys("job", "").Running, 0, -1).Val(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("running %q, want [b]", got)
	}
	err := s.Renew(ctx, a, "ha", 10*time.Second)
	var ce *lease.CancelledError
	if !errors.As(err, &ce) || !errors.Is(err, lease.ErrCancelled) || ce.By != "overlap:terminate_other for b" {
		t.Fatalf("a's renewal: %v, want cancelled by overlap:terminate_other for b", err)
	}
	if err := s.FinishMany(ctx, []lease.Finish{{Execution: a, Holder: "ha", TTL: time.Hour, Mark: lease.FinishCancelled}}); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, exo("job", "a", 2, o), "ha2"); r.Outcome != lease.AlreadyDone || r.Finished != lease.FinishedCancelled {
		t.Fatalf("a's retry: %+v, want already done (cancelled)", r)
	}
	// b's own renewal is untouched.
	if err := s.Renew(ctx, b, "hb", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// CANCEL_OTHER: the new execution asks the running one to cancel and
// waits; a second newcomer does not cancel another; once the cancelled one
// ends the new one runs. A cancelled execution no longer extends its place,
// so the wait is bounded by the TTL even if its worker never stops.
func TestOverlapCancelOther(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapCancelOther
	a, b := exn("job", "a", o, 0, 0), exn("job", "b", o, 0, 0)
	acquire(t, s, a, "ha")
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Waiting || r.Running != "a" || r.HeldFor > time.Second {
		t.Fatalf("b: %+v, want waiting for a (looking again within a second)", r)
	}
	if got := rdb.Get(ctx, s.Keys("job", "a").Cancel).Val(); got != "overlap:cancel_other for b" {
		t.Fatalf("a's cancel request %q", got)
	}
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Waiting {
		t.Fatalf("b again: %v", r.Outcome)
	}
	if err := s.Renew(ctx, a, "ha", 10*time.Second); !errors.Is(err, lease.ErrCancelled) {
		t.Fatalf("a's renewal: %v, want cancelled", err)
	}
	if err := s.FinishMany(ctx, []lease.Finish{{Execution: a, Holder: "ha", TTL: time.Hour, Mark: lease.FinishCancelled}}); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Acquired {
		t.Fatalf("b once a ended: %v", r.Outcome)
	}

	// A worker that never stops: the place ends with the TTL.
	c, d := exn("job2", "c", o, 0, 0), exn("job2", "d", o, 0, 0)
	if r, err := s.Acquire(ctx, c, "hc", 300*time.Millisecond); err != nil || r.Outcome != lease.Acquired {
		t.Fatal(r, err)
	}
	if r := acquire(t, s, d, "hd"); r.Outcome != lease.Waiting {
		t.Fatalf("d: %v", r.Outcome)
	}
	start := time.Now()
	for {
		_ = s.Renew(ctx, c, "hc", 300*time.Millisecond) // renews the lease, not the place
		if r := acquire(t, s, d, "hd"); r.Outcome == lease.Acquired {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("d still waits for a cancelled execution whose worker keeps renewing")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CANCEL_OTHER against an execution whose attempt ended after it was asked
// to cancel, with a retry staged (its place kept for the backoff): nothing
// of it is left to end, so the new execution runs at once.
func TestOverlapCancelOtherAfterTheAttemptEnded(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	o := lease.OverlapCancelOther
	a, b := exn("job", "a", o, 0, 0), exn("job", "b", o, 0, 0)
	acquire(t, s, a, "ha")
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Waiting {
		t.Fatalf("b: %v", r.Outcome)
	}
	// a's attempt failed before its worker saw the request; its retry is
	// staged for a minute.
	if err := s.MarkRetryPending(ctx, a, "ha", time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, b, "hb"); r.Outcome != lease.Acquired {
		t.Fatalf("b after a's attempt ended: %v, want acquired", r.Outcome)
	}
	if r := acquire(t, s, exo("job", "a", 2, o), "ha2"); r.Outcome != lease.Cancelled || r.CancelledBy != "overlap:cancel_other for b" {
		t.Fatalf("a's retry: %+v, want cancelled", r)
	}
}

// Cancel: a running attempt learns at its renewal; an execution between
// attempts leaves the job's running set at once and its next attempt is
// Cancelled; a finished one reports finished. The first to ask is named.
func TestCancel(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	a := exo("job", "a", 1, lease.OverlapAllow)
	acquire(t, s, a, "ha")
	st, who, err := s.Cancel(ctx, "job", "a", "user:alice")
	if err != nil || st != lease.CancelRunning || who != "user:alice" {
		t.Fatalf("cancel running: %v %q %v", st, who, err)
	}
	if _, who, _ := s.Cancel(ctx, "job", "a", "user:bob"); who != "user:alice" {
		t.Fatalf("second cancel renamed the first: %q", who)
	}
	var ce *lease.CancelledError
	if err := s.Renew(ctx, a, "ha", time.Second); !errors.As(err, &ce) || ce.By != "user:alice" {
		t.Fatalf("renewal: %v", err)
	}

	// Between attempts under SKIP: the job is free at once.
	r1 := exo("job2", "r", 1, lease.OverlapSkip)
	acquire(t, s, r1, "hr")
	if err := s.MarkRetryPending(ctx, r1, "hr", time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := s.Cancel(ctx, "job2", "r", "user:alice"); st != lease.CancelPending {
		t.Fatalf("cancel between attempts: %v", st)
	}
	if r := acquire(t, s, exo("job2", "new", 1, lease.OverlapSkip), "hn"); r.Outcome != lease.Acquired {
		t.Fatalf("new slot after the pending one was cancelled: %v", r.Outcome)
	}
	if r := acquire(t, s, exo("job2", "r", 2, lease.OverlapSkip), "hr2"); r.Outcome != lease.Cancelled || r.CancelledBy != "user:alice" {
		t.Fatalf("the retry: %+v, want cancelled by user:alice", r)
	}

	done := exo("job3", "ok", 1, lease.OverlapAllow)
	acquire(t, s, done, "hok")
	if err := s.MarkDone(ctx, done, "hok", time.Hour); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := s.Cancel(ctx, "job3", "ok", "user:alice"); st != lease.CancelFinished {
		t.Fatalf("cancel of a finished execution: %v", st)
	}
}

// A cancel request lives CancelTTL, not the markers' TTL: markers last
// the redelivery horizon (an hour by default), while a cancelled
// execution's next attempt may come a day later. With markers of a
// second, the request still stops a retry that comes after they expired.
func TestCancelOutlivesShortMarkers(t *testing.T) {
	_, rdb, prefix := newStore(t)
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMarkerTTL(time.Second))
	ctx := context.Background()
	r1 := exo("job", "r", 1, lease.OverlapAllow)
	acquire(t, s, r1, "h1")
	if err := s.MarkRetryPending(ctx, r1, "h1", time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Cancel(ctx, "job", "r", "user:alice"); err != nil || st != lease.CancelPending {
		t.Fatalf("cancel between attempts: %v %v", st, err)
	}
	k := s.Keys("job", "r")
	if ttl := rdb.PTTL(ctx, k.Cancel).Val(); ttl < lease.CancelTTL-time.Minute {
		t.Fatalf("the cancel request lives %s, want CancelTTL (%s)", ttl, lease.CancelTTL)
	}
	time.Sleep(1500 * time.Millisecond) // the markers expire
	if r := acquire(t, s, exo("job", "r", 2, lease.OverlapAllow), "h2"); r.Outcome != lease.Cancelled || r.CancelledBy != "user:alice" {
		t.Fatalf("the retry after the markers expired: %+v, want cancelled by user:alice", r)
	}
}
