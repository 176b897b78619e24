//go:build integration

package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The delivery count is what --max-deliveries judges, so only deliveries
// that may have started count: a holder taking its own lease again (after
// it ran out while the firing waited) is the same delivery, and a delivery
// that gives its lease back unstarted (its partition moved, its worker
// stopped, it was sent back to be prepared later) is uncounted.
func TestDeliveryCountingRules(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMaxDeliveries(2))
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	take := func(holder string, ttl time.Duration) lease.Result {
		t.Helper()
		r, err := s.Acquire(ctx, e, holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	count := func() int64 {
		t.Helper()
		n, _ := rdb.HGet(ctx, s.Keys("job", "exec").Deliveries, "1").Int64()
		return n
	}

	// One delivery whose lease runs out twice while it waits, taken again
	// by the same holder each time: one delivery.
	if r := take("w1/a", 30*time.Millisecond); r.Outcome != lease.Acquired || r.Deliveries != 1 {
		t.Fatalf("first take: %+v", r)
	}
	for range 2 {
		waitFor(t, func() bool { return rdb.Exists(ctx, s.Keys("job", "exec").Lease).Val() == 0 })
		if r := take("w1/a", 30*time.Millisecond); r.Outcome != lease.Acquired || r.Deliveries != 0 {
			t.Fatalf("the same holder after its lease ran out: %+v, want acquired, not counted", r)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("count %d after one delivery taken three times, want 1", n)
	}
	waitFor(t, func() bool { return rdb.Exists(ctx, s.Keys("job", "exec").Lease).Val() == 0 })

	// Given back unstarted (a rebalance): uncounted, ten times over.
	for i := range 10 {
		holder := "w2/" + string(rune('a'+i))
		r := take(holder, 10*time.Second)
		if r.Outcome != lease.Acquired || r.Deliveries != 2 {
			t.Fatalf("delivery %d: %+v, want acquired as the second", i, r)
		}
		res, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e, Holder: holder, Unstarted: true}})
		if err != nil || !res[0] {
			t.Fatalf("release unstarted: %v %v", res, err)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("count %d after ten rebalances, want 1", n)
	}

	// Released without the flag (it may have started): it stays counted.
	take("w3/a", 10*time.Second)
	if ok, err := s.Release(ctx, e, "w3/a"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("count %d after a started delivery, want 2", n)
	}
	// Uncounting is per holder and once: a stranger's or a repeated
	// unstarted release changes nothing.
	if res, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e, Holder: "w9/z", Unstarted: true}, {Execution: e, Holder: "w2/a", Unstarted: true}}); err != nil || res[0] || res[1] {
		t.Fatalf("releases of leases not held: %v %v", res, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("count %d after releases by holders not counted, want 2", n)
	}
	// A third started delivery is poison.
	if r := take("w4/a", 10*time.Second); r.Outcome != lease.Poison || r.Deliveries != 3 {
		t.Fatalf("third started delivery: %+v, want poison", r)
	}
	if _, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e}}); err == nil {
		t.Fatal("a release without a holder accepted")
	}
}

// A real poison — every delivery acquires, starts and dies without
// finishing or releasing — is caught on delivery max+1, even with
// rebalances (unstarted give-backs) and lease re-takes in between.
func TestPoisonCaughtThroughRebalances(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	const maxDeliveries = 5
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMaxDeliveries(maxDeliveries), lease.WithLiveness())
	ctx := context.Background()
	e := ex("job", "poison", 1, 1)
	for crash := 1; crash <= maxDeliveries+1; crash++ {
		if crash <= maxDeliveries {
			// A rebalance first: another worker leases it ahead and gives
			// it back unstarted.
			other := "other" + string(rune('0'+crash)) + "/1"
			if r, err := s.Acquire(ctx, e, other, 10*time.Second); err != nil || r.Outcome != lease.Acquired {
				t.Fatalf("crash %d, rebalance take: %+v %v", crash, r, err)
			}
			if _, err := s.ReleaseMany(ctx, []lease.Release{{Execution: e, Holder: other, Unstarted: true}}); err != nil {
				t.Fatal(err)
			}
		}
		// The crashing worker: alive, takes it, starts, dies.
		w := "crash" + string(rune('0'+crash))
		if err := s.Alive(ctx, w, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		r, err := s.Acquire(ctx, e, w+"/1", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if crash <= maxDeliveries {
			if r.Outcome != lease.Acquired || r.Deliveries != int64(crash) {
				t.Fatalf("crash %d: %+v, want acquired as delivery %d", crash, r, crash)
			}
		} else if r.Outcome != lease.Poison || r.Deliveries != maxDeliveries+1 {
			t.Fatalf("delivery %d: %+v, want poison", crash, r)
		}
		waitFor(t, func() bool { return rdb.Exists(ctx, s.LivenessKey(w)).Val() == 0 })
	}
}

// Held says how long the holder's worker has left to prove it is alive,
// so a successor looks again when a dead worker's lease is free rather
// than when the lease ends.
func TestHeldSaysWhenTheHolderMayBeDead(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithLiveness())
	ctx := context.Background()
	e := ex("job", "exec", 1, 1)
	if err := s.Alive(ctx, "w-a", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mustAcquireTTL(t, s, e, "w-a/1", 7*time.Second)
	r, err := s.Acquire(ctx, e, "w-b/1", 7*time.Second)
	if err != nil || r.Outcome != lease.Held {
		t.Fatalf("%+v %v, want held", r, err)
	}
	if r.HeldFor < 6*time.Second || r.HolderAliveFor <= 0 || r.HolderAliveFor > 1500*time.Millisecond {
		t.Fatalf("held for %s, holder alive for %s: want about 7s and at most 1.5s", r.HeldFor, r.HolderAliveFor)
	}
	plain := lease.New(rdb, lease.WithPrefix(prefix))
	if r, err := plain.Acquire(ctx, e, "w-b/2", 7*time.Second); err != nil || r.Outcome != lease.Held || r.HolderAliveFor != 0 {
		t.Fatalf("without liveness: %+v %v, want held with no liveness", r, err)
	}
}

// The delivery counter's hash always carries the marker's expiry, set at
// each attempt's first delivery: on a new hash, after every count was
// given back unstarted (the hash emptied and gone), and on a hash an
// earlier attempt left, whose expiry the next attempt extends.
func TestDeliveryCounterAlwaysExpires(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	const marker = time.Hour
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMaxDeliveries(5), lease.WithMarkerTTL(marker))
	ctx := context.Background()
	dlv := s.Keys("job", "exec").Deliveries
	expiry := func(when string) time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, dlv).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 || d > marker {
			t.Fatalf("%s: the delivery counter's expiry is %v, want within (0, %v]", when, d, marker)
		}
		return d
	}
	take := func(e lease.Execution, holder string) {
		t.Helper()
		if r, err := s.Acquire(ctx, e, holder, 10*time.Second); err != nil || r.Outcome != lease.Acquired {
			t.Fatalf("acquire by %s: %+v %v", holder, r, err)
		}
	}

	first := ex("job", "exec", 1, 1)
	take(first, "w1/a")
	expiry("first delivery")
	if _, err := s.ReleaseMany(ctx, []lease.Release{{Execution: first, Holder: "w1/a", Unstarted: true}}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, dlv).Val(); n != 0 {
		t.Fatalf("the counter outlived its only delivery given back unstarted (exists %d)", n)
	}
	take(first, "w1/b")
	expiry("a delivery after the counter emptied")

	// Shorten the hash's life by hand; the next attempt's first delivery
	// gives it the marker's whole life again, a later delivery of that
	// attempt does not touch it.
	if err := rdb.PExpire(ctx, dlv, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, first, "w1/b"); err != nil {
		t.Fatal(err)
	}
	second := ex("job", "exec", 2, 1)
	take(second, "w2/a")
	if d := expiry("the second attempt's first delivery"); d <= time.Minute {
		t.Fatalf("the second attempt's first delivery left the counter's expiry at %v, want the marker's %v", d, marker)
	}
	if err := rdb.PExpire(ctx, dlv, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, second, "w2/a"); err != nil {
		t.Fatal(err)
	}
	take(second, "w2/b")
	if d := expiry("the second attempt's second delivery"); d > time.Minute {
		t.Fatalf("a later delivery of the attempt moved the counter's expiry to %v", d)
	}
}
