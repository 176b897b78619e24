//go:build integration

package evict_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/services/worker/internal/evict"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// member is a static member of the group that polls and counts the
// partitions it owns, and refreshes its liveness key until killed.
type member struct {
	cl    *kgo.Client
	owned atomic.Int32
	stop  chan struct{}
	wg    sync.WaitGroup
}

func join(t *testing.T, brokers []string, group, topic, worker string, leases *lease.Store) *member {
	t.Helper()
	m := &member{stop: make(chan struct{})}
	count := func(_ context.Context, cl *kgo.Client, ps map[string][]int32, sign int32) {
		m.owned.Add(sign * int32(len(ps[topic])))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ClientID(worker), kgo.InstanceID("i-"+worker),
		// Far longer than the liveness TTL: only an eviction moves the
		// partitions of a dead member within the test's bound.
		kgo.SessionTimeout(20*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) { count(ctx, cl, ps, 1) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) { count(ctx, cl, ps, -1) }),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) { count(ctx, cl, ps, -1) }))
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
	}()
	go func() {
		defer m.wg.Done()
		for {
			_ = leases.Alive(context.Background(), worker, time.Second)
			select {
			case <-m.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return m
}

// kill stops the member as a kill -9 does: no more heartbeats, no leave
// (a static member does not leave on close), no more liveness refreshes.
func (m *member) kill() {
	close(m.stop)
	m.wg.Wait()
	m.cl.Close()
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// A member killed -9 is taken out of the group by a survivor's Evictor as
// soon as its liveness key lapses: the survivor owns every partition
// within a few seconds, though the group's session timeout is 20 s.
func TestADeadMemberLeavesTheGroupWhenItsKeyLapses(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	topic := testinfra.KafkaTopic(t, 4)
	group := testinfra.KafkaGroup(t)
	rdb, prefix := testinfra.Redis(t)
	leases := lease.New(rdb, lease.WithPrefix(prefix), lease.WithLiveness())

	a := join(t, brokers, group, topic, "a", leases)
	b := join(t, brokers, group, topic, "b", leases)
	defer b.kill()
	waitFor(t, "both members own partitions", 60*time.Second, func() bool { return a.owned.Load() == 2 && b.owned.Load() == 2 })

	g, err := evict.DialGroup(group, brokers, "b-evict")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var removed atomic.Int32
	ev := evict.New(evict.Config{Self: "b", TTL: time.Second, Removed: func(n int) { removed.Add(int32(n)) }},
		g, leases, clock.Real{}, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := ev.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer ev.Stop()
	// Both alive: nobody is removed.
	time.Sleep(1500 * time.Millisecond)
	if removed.Load() != 0 || b.owned.Load() != 2 {
		t.Fatalf("while both live: removed %d, b owns %d", removed.Load(), b.owned.Load())
	}

	a.kill()
	took := waitFor(t, "b owns every partition", 8*time.Second, func() bool { return b.owned.Load() == 4 })
	if removed.Load() != 1 {
		t.Fatalf("removed %d members, want 1", removed.Load())
	}
	t.Logf("the dead member's partitions moved %s after its kill (session timeout 20 s)", took.Round(10*time.Millisecond))
}
