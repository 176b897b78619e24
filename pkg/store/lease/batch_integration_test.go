//go:build integration

package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

// One AcquireMany decides each entry as Acquire would, in order: a done
// execution, a stale one, one held by another delivery, and fresh ones —
// two of them of the same job, which get increasing fences.
func TestAcquireManyDecidesEachEntryInOrder(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	done := ex("job-a", "exec-done", 1, 1)
	mustAcquire(t, s, done, "w/0")
	if err := s.MarkDone(ctx, done, "w/0", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishVersion(ctx, "job-b", 5); err != nil {
		t.Fatal(err)
	}
	held := ex("job-c", "exec-held", 1, 1)
	mustAcquire(t, s, held, "other/1")

	batch := []lease.Acquisition{
		{Execution: done, Holder: "w/1", TTL: time.Minute},
		{Execution: ex("job-b", "exec-stale", 1, 4), Holder: "w/2", TTL: time.Minute},
		{Execution: held, Holder: "w/3", TTL: time.Minute},
		{Execution: ex("job-d", "exec-1", 1, 1), Holder: "w/4", TTL: time.Minute},
		{Execution: ex("job-d", "exec-2", 1, 1), Holder: "w/5", TTL: time.Minute},
	}
	res, err := s.AcquireMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []lease.Outcome{lease.AlreadyDone, lease.Stale, lease.Held, lease.Acquired, lease.Acquired}
	for i, r := range res {
		if r.Outcome != want[i] {
			t.Errorf("entry %d (%s): %v, want %v", i, batch[i].Execution.ExecutionID, r.Outcome, want[i])
		}
	}
	if res[1].CurrentVersion != 5 {
		t.Errorf("stale entry: current version %d, want 5", res[1].CurrentVersion)
	}
	if res[2].HeldFor <= 0 || res[2].HeldFor > 10*time.Second {
		t.Errorf("held entry: held for %s, want the other lease's remaining time", res[2].HeldFor)
	}
	if !(res[3].Fence > 0 && res[4].Fence > res[3].Fence) {
		t.Errorf("fences of one job in one batch: %d then %d, want increasing", res[3].Fence, res[4].Fence)
	}
	// The batch took real leases: another delivery is held off.
	again, err := s.Acquire(ctx, batch[3].Execution, "w/6", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if again.Outcome != lease.Held {
		t.Errorf("after the batch, another holder gets %v, want held", again.Outcome)
	}
}

// A lease taken ahead with a TTL reaching past the instant is still held
// when the instant comes; it is the caller's TTL that decides.
func TestAcquireManyTTLPerEntry(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	short, long := ex("job-e", "exec-short", 1, 1), ex("job-e", "exec-long", 1, 1)
	if _, err := s.AcquireMany(ctx, []lease.Acquisition{
		{Execution: short, Holder: "w/1", TTL: 50 * time.Millisecond},
		{Execution: long, Holder: "w/2", TTL: time.Minute},
	}); err != nil {
		t.Fatal(err)
	}
	pShort := rdb.PTTL(ctx, s.Keys(short.JobID, short.ExecutionID).Lease).Val()
	pLong := rdb.PTTL(ctx, s.Keys(long.JobID, long.ExecutionID).Lease).Val()
	if pShort > 50*time.Millisecond || pLong < 50*time.Second {
		t.Errorf("lease TTLs %s and %s, want ≤50ms and ≈1m", pShort, pLong)
	}
}

// FinishMany writes each entry's marker as the single calls do: a success
// rejects every attempt, a failed attempt only itself, a pending retry
// keeps the running marker; every lease is released.
func TestFinishManyMarksAndReleases(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	ok := ex("job-f", "exec-ok", 1, 1)
	dead := ex("job-g", "exec-dead", 2, 1)
	retry := lease.Execution{JobID: "job-h", ExecutionID: "exec-retry", Attempt: 1, Version: 1, Overlap: lease.OverlapSkip}
	res, err := s.AcquireMany(ctx, []lease.Acquisition{
		{Execution: ok, Holder: "w/1", TTL: time.Minute},
		{Execution: dead, Holder: "w/2", TTL: time.Minute},
		{Execution: retry, Holder: "w/3", TTL: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Outcome != lease.Acquired {
			t.Fatalf("entry %d: %v", i, r.Outcome)
		}
	}
	if err := s.FinishMany(ctx, []lease.Finish{
		{Execution: ok, Holder: "w/1", TTL: time.Hour, Mark: lease.FinishDone},
		{Execution: dead, Holder: "w/2", TTL: time.Hour, Mark: lease.FinishAttempt},
		{Execution: retry, Holder: "w/3", TTL: time.Hour, Mark: lease.FinishRetryPending, KeepRunning: time.Minute},
	}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []lease.Execution{ok, dead, retry} {
		if n := rdb.Exists(ctx, s.Keys(e.JobID, e.ExecutionID).Lease).Val(); n != 0 {
			t.Errorf("%s: lease still held after FinishMany", e.ExecutionID)
		}
	}
	check := func(e lease.Execution, want lease.Outcome) {
		t.Helper()
		r, err := s.Acquire(ctx, e, "w/9", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != want {
			t.Errorf("%s attempt %d: %v, want %v", e.ExecutionID, e.Attempt, r.Outcome, want)
		}
	}
	check(lease.Execution{JobID: ok.JobID, ExecutionID: ok.ExecutionID, Attempt: 3, Version: 1}, lease.AlreadyDone)
	check(dead, lease.AlreadyDone)
	check(lease.Execution{JobID: dead.JobID, ExecutionID: dead.ExecutionID, Attempt: 3, Version: 1}, lease.Acquired)
	if pttl := rdb.PTTL(ctx, s.Keys(retry.JobID, "").Running).Val(); pttl < 50*time.Second {
		t.Errorf("retry pending: running marker PTTL %s, want kept ≈1m", pttl)
	}
}

// A bad entry fails the whole batch before anything reaches Redis.
func TestAcquireManyRejectsABadEntryWhole(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	good := ex("job-i", "exec-good", 1, 1)
	_, err := s.AcquireMany(ctx, []lease.Acquisition{
		{Execution: good, Holder: "w/1", TTL: time.Minute},
		{Execution: ex("job-i", "", 1, 1), Holder: "w/2", TTL: time.Minute},
	})
	if err == nil {
		t.Fatal("want an error for an entry without an execution id")
	}
	if n := rdb.Exists(ctx, s.Keys(good.JobID, good.ExecutionID).Lease).Val(); n != 0 {
		t.Error("the good entry's lease was taken although the batch failed")
	}
}

// A raised version is announced on the versions channel, once; publishing
// an older one announces nothing.
func TestPublishVersionAnnouncesRaises(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, s.VersionsChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	for _, v := range []int64{3, 2, 3, 4} {
		if err := s.PublishVersion(ctx, "job-v", v); err != nil {
			t.Fatal(err)
		}
	}
	var got []int64
	for range 2 {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, v, ok := lease.Version(m.Payload)
		if !ok || id != "job-v" {
			t.Fatalf("message %q", m.Payload)
		}
		got = append(got, v)
	}
	if len(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("announced %v, want [3 4]", got)
	}
	select {
	case m := <-sub.Channel():
		t.Fatalf("unexpected announcement %q", m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}
