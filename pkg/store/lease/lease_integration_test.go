//go:build integration

package lease_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// newStore gives the test its own key prefix on the shared test Redis;
// testinfra deletes the prefix's keys afterwards (never FLUSHALL: other
// tests share the server).
func newStore(t *testing.T) (*lease.Store, *redis.Client, string) {
	t.Helper()
	rdb, prefix := testinfra.Redis(t)
	return lease.New(rdb, lease.WithPrefix(prefix)), rdb, prefix
}

// deletePrefix simulates Redis losing the data of this test.
func deletePrefix(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("del %s: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s*: %v", prefix, err)
	}
}

func ex(job, exec string, attempt int32, version int64) lease.Execution {
	return lease.Execution{JobID: job, ExecutionID: exec, Attempt: attempt, Version: version}
}

func mustAcquire(t *testing.T, s *lease.Store, e lease.Execution, holder string) int64 {
	t.Helper()
	res, err := s.Acquire(context.Background(), e, holder, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if res.Outcome != lease.Acquired {
		t.Fatalf("acquire %s by %s: %v, want acquired", e.ExecutionID, holder, res.Outcome)
	}
	return res.Fence
}

func TestAcquireFenceIncreasesPerJob(t *testing.T) {
	s, _, _ := newStore(t)
	var last int64
	for i := range 200 {
		f := mustAcquire(t, s, ex("job", "exec-"+strconv.Itoa(i), 1, 1), "h")
		if f <= last {
			t.Fatalf("fence %d after %d: not increasing", f, last)
		}
		last = f
	}
	// The fence is floored by Redis time in microseconds.
	if now := time.Now().UnixMicro(); last < now-int64(time.Hour/time.Microsecond) {
		t.Fatalf("fence %d is far below the clock %d", last, now)
	}
}

func TestSameHolderReacquires(t *testing.T) {
	s, _, _ := newStore(t)
	e := ex("job", "exec", 1, 1)
	f1 := mustAcquire(t, s, e, "h1")
	// A retried call after a lost reply: same holder, new (larger) fence.
	f2 := mustAcquire(t, s, e, "h1")
	if f2 <= f1 {
		t.Fatalf("re-acquire fence %d not above %d", f2, f1)
	}
	res, err := s.Acquire(context.Background(), e, "h2", time.Second)
	if err != nil || res.Outcome != lease.Held || res.HeldFor <= 0 || res.HeldFor > 10*time.Second {
		t.Fatalf("other holder: %+v, %v; want held with 0 < HeldFor <= 10s", res, err)
	}
}

func TestConcurrentAcquirersExactlyOneWins(t *testing.T) {
	s, _, _ := newStore(t)
	const n = 64
	e := ex("job", "exec", 1, 1)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		count = map[lease.Outcome]int{}
		errs  []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := s.Acquire(context.Background(), e, "holder-"+strconv.Itoa(i), 10*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			count[res.Outcome]++
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if count[lease.Acquired] != 1 || count[lease.Held] != n-1 {
		t.Fatalf("outcomes %v, want exactly one acquired and %d held", count, n-1)
	}
}

func TestDoneRejects(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	mustAcquire(t, s, e, "h1")
	if err := s.MarkDone(ctx, e, "h1", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []int32{1, 2, 5} {
		e := e
		e.Attempt = attempt
		res, err := s.Acquire(ctx, e, "h2", time.Second)
		if err != nil || res.Outcome != lease.AlreadyDone || res.Finished != lease.FinishedSucceeded {
			t.Fatalf("attempt %d after done: %+v, %v; want already_done, succeeded", attempt, res, err)
		}
	}
	// MarkDone released the lease: Release by the old holder finds nothing.
	if ok, err := s.Release(ctx, e, "h1"); err != nil || ok {
		t.Fatalf("release after done = %v, %v; want false", ok, err)
	}
}

func TestAttemptDoneRejectsOnlyThatAttempt(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	e1 := ex("job", "exec", 1, 1)
	mustAcquire(t, s, e1, "h1")
	if err := s.MarkAttemptDone(ctx, e1, "h1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Acquire(ctx, e1, "h2", time.Second); err != nil || res.Outcome != lease.AlreadyDone || res.Finished != lease.FinishedAttempt {
		t.Fatalf("redelivered attempt 1: %+v, %v; want already_done, the attempt ended", res, err)
	}
	e2 := ex("job", "exec", 2, 1)
	mustAcquire(t, s, e2, "h3") // the retry may fire: attempt 1's lease was released
	if err := s.MarkDone(ctx, e2, "h3", time.Hour); err != nil {
		t.Fatal(err)
	}
	// An older attempt finishing late must not downgrade "done".
	if err := s.MarkAttemptDone(ctx, e1, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.Acquire(ctx, ex("job", "exec", 3, 1), "h4", time.Second); res.Outcome != lease.AlreadyDone || res.Finished != lease.FinishedSucceeded {
		t.Fatalf("attempt 3 after done: %+v", res)
	}
}

func TestStaleVersionRejected(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	if err := s.PublishVersion(ctx, "job", 5); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, ex("job", "old", 1, 4), "h", time.Second)
	if err != nil || res.Outcome != lease.Stale || res.CurrentVersion != 5 {
		t.Fatalf("v4 after v5 published: %+v, %v; want stale, current 5", res, err)
	}
	mustAcquire(t, s, ex("job", "cur", 1, 5), "h")
	// PublishVersion only raises.
	if err := s.PublishVersion(ctx, "job", 3); err != nil {
		t.Fatal(err)
	}
	if v, _ := rdb.Get(ctx, s.Keys("job", "").Version).Int64(); v != 5 {
		t.Fatalf("stored version %d after publishing 3 over 5", v)
	}
	// A firing of a newer version than published raises it too: once a v6
	// firing exists, v5 firings are stale.
	mustAcquire(t, s, ex("job", "newer", 1, 6), "h")
	if res, _ := s.Acquire(ctx, ex("job", "cur2", 1, 5), "h", time.Second); res.Outcome != lease.Stale {
		t.Fatalf("v5 after a v6 firing: %v, want stale", res.Outcome)
	}
	// Other jobs are unaffected.
	mustAcquire(t, s, ex("other", "x", 1, 1), "h")
}

func TestRenew(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	if _, err := s.Acquire(ctx, e, "h1", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, e, "h1", time.Minute); err != nil {
		t.Fatalf("renew while holding: %v", err)
	}
	if ttl := rdb.PTTL(ctx, s.Keys("job", "exec").Lease).Val(); ttl < 30*time.Second {
		t.Fatalf("PTTL %s after renewing to a minute", ttl)
	}
	if err := s.Renew(ctx, e, "h2", time.Minute); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("renew by non-holder: %v, want ErrFenced", err)
	}
}

func TestRenewAfterExpiryFails(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	f1 := mustAcquireTTL(t, s, e, "h1", 20*time.Millisecond)
	key := s.Keys("job", "exec").Lease
	waitFor(t, func() bool { return rdb.Exists(ctx, key).Val() == 0 })
	if err := s.Renew(ctx, e, "h1", time.Minute); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew after expiry: %v, want ErrLost", err)
	}
	// Someone else takes it with a larger fence; the old holder is fenced.
	f2 := mustAcquire(t, s, e, "h2")
	if f2 <= f1 {
		t.Fatalf("fence %d not above the expired holder's %d", f2, f1)
	}
	if err := s.Renew(ctx, e, "h1", time.Minute); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("renew by the expired holder after a takeover: %v, want ErrFenced", err)
	}
	if ok, _ := s.Release(ctx, e, "h1"); ok {
		t.Fatal("the expired holder released the new holder's lease")
	}
	if ok, _ := s.Release(ctx, e, "h2"); !ok {
		t.Fatal("the holder could not release")
	}
}

// Redis losing its data (a restart without persistence, a failover to an
// empty replica) must not let a fence go backwards: it is floored by Redis
// time in microseconds.
func TestFenceMonotonicAcrossDataLoss(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	var last int64
	for i := range 500 {
		last = mustAcquire(t, s, ex("job", "a"+strconv.Itoa(i), 1, 1), "h")
	}
	deletePrefix(t, rdb, prefix) // the loss: lease, done, version and fence keys gone
	if n := rdb.Exists(ctx, s.Keys("job", "").Fence).Val(); n != 0 {
		t.Fatal("fence key survived the simulated loss")
	}
	f := mustAcquire(t, s, ex("job", "after-loss", 1, 1), "h")
	if f <= last {
		t.Fatalf("fence after data loss %d <= last before %d", f, last)
	}
	for i := range 100 {
		g := mustAcquire(t, s, ex("job", "b"+strconv.Itoa(i), 1, 1), "h")
		if g <= f {
			t.Fatalf("fence %d after %d", g, f)
		}
		f = g
	}
}

// A counter that has run ahead of the clock (more than one acquisition per
// microsecond, or a clock stepped back) keeps counting rather than
// following the clock down.
func TestFenceCounterAheadOfClock(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := context.Background()
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := rdb.Set(ctx, s.Keys("job", "").Fence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if f := mustAcquire(t, s, ex("job", "e", 1, 1), "h"); f != ahead+1 {
		t.Fatalf("fence %d, want %d", f, ahead+1)
	}
}

func TestInvalidArguments(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"no job":     func() error { _, err := s.Acquire(ctx, ex("", "e", 1, 1), "h", time.Second); return err },
		"no holder":  func() error { _, err := s.Acquire(ctx, ex("j", "e", 1, 1), "", time.Second); return err },
		"zero ttl":   func() error { _, err := s.Acquire(ctx, ex("j", "e", 1, 1), "h", 0); return err },
		"attempt 0":  func() error { _, err := s.Acquire(ctx, ex("j", "e", 0, 1), "h", time.Second); return err },
		"done ttl 0": func() error { return s.MarkDone(ctx, ex("j", "e", 1, 1), "h", 0) },
		"publish":    func() error { return s.PublishVersion(ctx, "", 1) },
	} {
		if call() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func mustAcquireTTL(t *testing.T, s *lease.Store, e lease.Execution, holder string, ttl time.Duration) int64 {
	t.Helper()
	res, err := s.Acquire(context.Background(), e, holder, ttl)
	if err != nil || res.Outcome != lease.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	return res.Fence
}

// waitFor polls cond until it holds (the lease expiring is Redis's doing,
// not an event this test can wait on).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		<-tick.C
	}
}
