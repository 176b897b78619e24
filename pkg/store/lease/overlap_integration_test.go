//go:build integration

package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

func exo(job, exec string, attempt int32, o lease.Overlap) lease.Execution {
	return lease.Execution{JobID: job, ExecutionID: exec, Attempt: attempt, Version: 1, Overlap: o, FirstAttempt: 1}
}

func acquire(t *testing.T, s *lease.Store, e lease.Execution, holder string) lease.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), e, holder, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire %s: %v", e.ExecutionID, err)
	}
	return res
}

// SKIP: while one execution of the job runs, a new one is skipped, and its
// redeliveries are dropped as done (the skip is decided once). The running
// marker goes when the execution finishes, and then the next slot runs.
func TestOverlapSkip(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	a := exo("job", "a", 1, lease.OverlapSkip)
	if r := acquire(t, s, a, "h1"); r.Outcome != lease.Acquired {
		t.Fatalf("a: %v", r.Outcome)
	}
	if got := rdb.ZRange(ctx, s.Keys("job", "").Running, 0, -1).Val(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("running set %q, want [a]", got)
	}
	b := exo("job", "b", 1, lease.OverlapSkip)
	if r := acquire(t, s, b, "h2"); r.Outcome != lease.Overlapping || r.Running != "a" {
		t.Fatalf("b while a runs: %+v, want overlapping (running a)", r)
	}
	// Renewal keeps the marker as long as the lease.
	if err := s.Renew(ctx, a, "h1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, s.Keys("job", "").Running).Val(); ttl < 30*time.Second {
		t.Fatalf("running marker PTTL %s after renewing to a minute", ttl)
	}
	if err := s.MarkDone(ctx, a, "h1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, s.Keys("job", "").Running).Val(); n != 0 {
		t.Fatal("running marker survived the execution's end")
	}
	if r := acquire(t, s, b, "h3"); r.Outcome != lease.AlreadyDone || r.Finished != lease.FinishedSkipped {
		t.Fatalf("redelivered skipped b: %+v, want already_done, skipped", r)
	}
	if r := acquire(t, s, exo("job", "c", 1, lease.OverlapSkip), "h4"); r.Outcome != lease.Acquired {
		t.Fatalf("c after a finished: %v", r.Outcome)
	}
	// Other jobs and ALLOW jobs are unaffected.
	if r := acquire(t, s, exo("other", "x", 1, lease.OverlapSkip), "h5"); r.Outcome != lease.Acquired {
		t.Fatalf("other job: %v", r.Outcome)
	}
	if r := acquire(t, s, exo("job", "d", 1, lease.OverlapAllow), "h6"); r.Outcome != lease.Acquired {
		t.Fatalf("ALLOW firing while c runs: %v", r.Outcome)
	}
}

// BUFFER_ONE: one new execution waits behind the running one (asking again
// keeps its place), a third is skipped; when the running one ends the
// buffered one runs and frees the buffer.
func TestOverlapBufferOne(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	a, b, c := exo("job", "a", 1, lease.OverlapBufferOne), exo("job", "b", 1, lease.OverlapBufferOne), exo("job", "c", 1, lease.OverlapBufferOne)
	acquire(t, s, a, "h1")
	r := acquire(t, s, b, "h2")
	if r.Outcome != lease.Waiting || r.Running != "a" || r.HeldFor <= 0 || r.HeldFor > 10*time.Second {
		t.Fatalf("b: %+v, want waiting behind a", r)
	}
	if r := acquire(t, s, b, "h2-again"); r.Outcome != lease.Waiting {
		t.Fatalf("b asking again: %v, want waiting (it keeps the buffer)", r.Outcome)
	}
	if r := acquire(t, s, c, "h3"); r.Outcome != lease.Overlapping {
		t.Fatalf("c: %v, want overlapping (the buffer is taken)", r.Outcome)
	}
	if err := s.MarkAttemptDone(ctx, a, "h1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, b, "h2"); r.Outcome != lease.Acquired {
		t.Fatalf("b after a: %v", r.Outcome)
	}
	if n := rdb.Exists(ctx, s.Keys("job", "").Buffered).Val(); n != 0 {
		t.Fatal("the buffer still names b after b started")
	}
	if r := acquire(t, s, exo("job", "d", 1, lease.OverlapBufferOne), "h4"); r.Outcome != lease.Waiting {
		t.Fatalf("d while b runs: %v, want waiting", r.Outcome)
	}
}

// A retry keeps the job "running" through its backoff: a new slot is
// skipped meanwhile, and the retry itself is never skipped — if another
// execution holds the marker, it waits.
func TestRetryKeepsTheRunningMarker(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	a1 := exo("job", "a", 1, lease.OverlapSkip)
	acquire(t, s, a1, "h1")
	if err := s.MarkRetryPending(ctx, a1, "h1", time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, s.Keys("job", "").Running).Val(); ttl < 30*time.Second {
		t.Fatalf("running marker PTTL %s during the backoff", ttl)
	}
	if r := acquire(t, s, exo("job", "b", 1, lease.OverlapSkip), "h2"); r.Outcome != lease.Overlapping {
		t.Fatalf("new slot during a's backoff: %v, want overlapping", r.Outcome)
	}
	a2 := exo("job", "a", 2, lease.OverlapSkip)
	if r := acquire(t, s, a2, "h3"); r.Outcome != lease.Acquired {
		t.Fatalf("a's retry: %v", r.Outcome)
	}
	if err := s.MarkDone(ctx, a2, "h3", time.Hour); err != nil {
		t.Fatal(err)
	}
	// Another execution took the marker (a's expired): a's retry waits.
	acquire(t, s, exo("job", "c", 1, lease.OverlapSkip), "h4")
	r := acquire(t, s, exo("job", "e", 3, lease.OverlapSkip), "h5")
	if r.Outcome != lease.Waiting || r.Running != "c" {
		t.Fatalf("retry of e while c runs: %+v, want waiting", r)
	}
}

// The marker expires with the lease when its worker dies.
func TestRunningMarkerExpiresWithTheLease(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	a := exo("job", "a", 1, lease.OverlapSkip)
	if res, err := s.Acquire(ctx, a, "dead-worker", 50*time.Millisecond); err != nil || res.Outcome != lease.Acquired {
		t.Fatalf("%+v %v", res, err)
	}
	waitFor(t, func() bool { return rdb.Exists(ctx, s.Keys("job", "").Running).Val() == 0 })
	if r := acquire(t, s, exo("job", "b", 1, lease.OverlapSkip), "h2"); r.Outcome != lease.Acquired {
		t.Fatalf("b after a's worker died: %v", r.Outcome)
	}
}

// An attempt acquired more than the maximum number of times is poison: the
// lease is still taken (the caller dead-letters it under it). The same
// holder asking again is not a new delivery.
func TestPoisonAfterMaxDeliveries(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMaxDeliveries(3))
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	for i := range 3 {
		holder := "crashing-" + string(rune('a'+i))
		r := acquire(t, s, e, holder)
		if r.Outcome != lease.Acquired || r.Deliveries != int64(i+1) {
			t.Fatalf("delivery %d: %+v", i+1, r)
		}
		if i == 0 {
			if again := acquire(t, s, e, holder); again.Outcome != lease.Acquired || again.Deliveries != 0 {
				t.Fatalf("same holder again: %+v, want acquired without counting", again)
			}
		}
		// The worker dies: its lease goes.
		if ok, err := s.Release(ctx, e, holder); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	r := acquire(t, s, e, "fourth")
	if r.Outcome != lease.Poison || r.Deliveries != 4 || r.Fence == 0 {
		t.Fatalf("fourth delivery: %+v, want poison with a fence", r)
	}
	if held := acquire(t, s, e, "fifth"); held.Outcome != lease.Held {
		t.Fatalf("poison's lease not held: %v", held.Outcome)
	}
	// The next attempt (a re-drive) counts afresh.
	if err := s.MarkAttemptDone(ctx, e, "fourth", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, ex("job", "exec", 2, 1), "redrive"); r.Outcome != lease.Acquired || r.Deliveries != 1 {
		t.Fatalf("attempt 2: %+v", r)
	}
}
