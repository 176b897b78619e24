//go:build integration

package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// With liveness, a lease whose worker stopped refreshing its liveness key
// (a killed worker) is free at once for another delivery, with a larger
// fence, and the dead holder's late renewal is fenced; a live worker's
// lease is held as before, however long it has left, and the Held answer
// says how long its worker's key has left. Without liveness the lease
// holds until it expires. The same on one Redis, where the lease script
// reads the liveness key, and on the Redis Cluster, where the Store reads
// it beside the script and asks again for the dead holder's lease.
func TestLeaseOfADeadWorkerIsFree(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		rdb, prefix := testinfra.Redis(t)
		checkLeaseOfADeadWorkerIsFree(t, rdb, prefix)
	})
	t.Run("redis-cluster", func(t *testing.T) {
		rdb, prefix := testinfra.RedisCluster(t)
		checkLeaseOfADeadWorkerIsFree(t, rdb, prefix)
	})
}

func checkLeaseOfADeadWorkerIsFree(t *testing.T, rdb redis.UniversalClient, prefix string) {
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithLiveness())
	ctx := context.Background()
	e := ex("job", "exec-1", 1, 1)
	// The worker's eviction loop reads the liveness keys (Living) long
	// before a takeover; its first read sets the marker that says Redis
	// kept them, without which a cluster takes nothing over.
	if _, _, err := s.Living(ctx, nil); err != nil {
		t.Fatal(err)
	}

	if err := s.Alive(ctx, "w-a", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Alive(ctx, "w-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	first := mustAcquire(t, s, e, "w-a/1")
	if res, err := s.Acquire(ctx, e, "w-b/1", 10*time.Second); err != nil || res.Outcome != lease.Held ||
		res.HolderAliveFor <= 0 || res.HolderAliveFor > 200*time.Millisecond {
		t.Fatalf("while w-a is alive: %+v %v, want held, w-a's key's ≤ 200ms left", res, err)
	}

	// w-a dies: its liveness key runs out, its 10 s lease does not.
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(ctx, s.LivenessKey("w-a")).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("liveness key did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := mustAcquire(t, s, e, "w-b/2")
	if second <= first {
		t.Fatalf("fence %d after the dead holder's %d: must grow", second, first)
	}
	if err := s.Renew(ctx, e, "w-a/1", 10*time.Second); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("the dead holder's renewal: %v, want ErrFenced", err)
	}
	// w-b is alive: its lease holds against a third delivery.
	if res, err := s.Acquire(ctx, e, "w-c/1", 10*time.Second); err != nil || res.Outcome != lease.Held || res.HolderAliveFor <= 30*time.Second {
		t.Fatalf("against a live holder: %+v %v, want held, its key's minute left", res, err)
	}

	// A batch mixing a dead holder's lease, a live holder's and a free
	// one: only the dead one is taken over, in the batch's one answer.
	e3, e4, e5 := ex("job-3", "exec-3", 1, 1), ex("job-4", "exec-4", 1, 1), ex("job-5", "exec-5", 1, 1)
	if err := s.Alive(ctx, "w-d", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, e3, "w-d/1")
	mustAcquire(t, s, e4, "w-b/4")
	for rdb.Exists(ctx, s.LivenessKey("w-d")).Val() == 1 {
		time.Sleep(20 * time.Millisecond)
	}
	res, err := s.AcquireMany(ctx, []lease.Acquisition{
		{Execution: e3, Holder: "w-c/3", TTL: 10 * time.Second},
		{Execution: e4, Holder: "w-c/4", TTL: 10 * time.Second},
		{Execution: e5, Holder: "w-c/5", TTL: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != lease.Acquired || res[1].Outcome != lease.Held || res[1].HolderAliveFor <= 30*time.Second || res[2].Outcome != lease.Acquired {
		t.Fatalf("mixed batch: %+v, want acquired (dead holder), held (w-b's key's minute left), acquired (free)", res)
	}

	// Without liveness the same lease of a dead worker holds until it expires.
	plain := lease.New(rdb, lease.WithPrefix(prefix))
	e2 := ex("job", "exec-2", 1, 1)
	mustAcquire(t, plain, e2, "w-dead/1")
	if res, err := plain.Acquire(ctx, e2, "w-b/3", 10*time.Second); err != nil || res.Outcome != lease.Held {
		t.Fatalf("without liveness: %v %v, want held", res.Outcome, err)
	}
	if err := s.Alive(ctx, "w/x", time.Second); err == nil {
		t.Fatal("a worker id with '/' accepted")
	}
}

// Living reads every worker's liveness key in one call, and says when
// Redis lost its keys since the last call (the marker gone), so a caller
// does not take a restart for every worker's death.
func TestLivingSaysWhoLivesAndWhenRedisForgot(t *testing.T) {
	rdb, prefix := testinfra.Redis(t)
	s := lease.New(rdb, lease.WithPrefix(prefix), lease.WithLiveness())
	ctx := context.Background()
	if err := s.Alive(ctx, "w-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	alive, kept, err := s.Living(ctx, []string{"w-a", "w-b"})
	if err != nil {
		t.Fatal(err)
	}
	if kept || !alive[0] || alive[1] {
		t.Fatalf("first call: alive %v kept %v, want [true false] and not kept (no marker yet)", alive, kept)
	}
	if err := s.Alive(ctx, "w-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if alive, kept, err = s.Living(ctx, []string{"w-a", "w-b"}); err != nil || !kept || !alive[0] || !alive[1] {
		t.Fatalf("second call: alive %v kept %v err %v, want both alive, kept", alive, kept, err)
	}
	// Redis forgets (a restart without persistence): the marker goes with
	// the liveness keys.
	if err := rdb.Del(ctx, s.LivenessMarkerKey(), s.LivenessKey("w-a"), s.LivenessKey("w-b")).Err(); err != nil {
		t.Fatal(err)
	}
	if alive, kept, err = s.Living(ctx, []string{"w-a", "w-b"}); err != nil || kept || alive[0] || alive[1] {
		t.Fatalf("after a loss: alive %v kept %v err %v, want none alive and not kept", alive, kept, err)
	}
	if _, kept, _ = s.Living(ctx, nil); !kept {
		t.Fatal("the call after a loss: not kept, want kept (the marker was set again)")
	}
}
