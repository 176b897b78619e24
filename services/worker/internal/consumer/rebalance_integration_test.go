//go:build integration

package consumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/work"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// chanHolder hands arriving firings to a miniWorker's stage.
type chanHolder struct{ q chan *work.Item }

func (h chanHolder) AddAfter(it *work.Item, notBefore int64) {
	it.NotBefore = notBefore
	h.q <- it
}
func (h chanHolder) Remove(it *work.Item) bool { return true } // the stage's Claim refuses it

// outcomes is what every member fired, shared by the test's members.
type outcomes struct {
	mu     sync.Mutex
	fired  map[string]int
	poison int
}

// miniWorker is a worker reduced to what decides deliveries: its consumer,
// and one stage goroutine that leases each firing (a fresh holder per
// try, as the prepare stage does), gives leased firings back unstarted a
// few times (as a firing sent back to be prepared later is), then fires
// and marks it done.
type miniWorker struct {
	c      *Consumer
	rel    *Unstarted
	cancel context.CancelFunc
	done   chan struct{}
}

func startMini(t *testing.T, brokers []string, topic, group, id string, store *lease.Store, out *outcomes, giveBacks int) *miniWorker {
	t.Helper()
	q := make(chan *work.Item, 10000)
	rel := NewUnstarted(store, 5*time.Second, logger())
	if err := rel.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := New(Config{
		Brokers: brokers, Topics: []string{topic}, Group: group, ClientID: id, InstanceID: id,
		SessionTimeout: 10 * time.Second, CommitInterval: 50 * time.Millisecond, DrainTimeout: 10 * time.Second,
		Unstarted: rel,
	}, chanHolder{q}, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger().With("member", id))
	ctx, cancel := context.WithCancel(context.Background())
	w := &miniWorker{c: c, rel: rel, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var seq int
		gaveBack := map[*work.Item]int{}
		for {
			var it *work.Item
			select {
			case <-ctx.Done():
				return
			case it = <-q:
			}
			if !it.Owner.Claim(it) {
				continue
			}
			f, err := firing.Decode(it.Envelope)
			if err != nil {
				t.Error(err)
				return
			}
			it.Firing = f
			// One holder per delivery, kept when it is prepared again,
			// as the prepare stage does.
			if it.LeaseHolder == "" {
				seq++
				it.LeaseHolder = id + "/" + strconv.Itoa(seq)
			}
			holder := it.LeaseHolder
			ex := prepare.Execution(f)
			res, err := store.Acquire(ctx, ex, holder, 30*time.Second)
			if err != nil {
				if it.Owner.Requeue(it) {
					q <- it
				}
				continue
			}
			it.Lease = res
			switch res.Outcome {
			case lease.AlreadyDone:
				it.Owner.Finish(it)
			case lease.Poison:
				out.mu.Lock()
				out.poison++
				out.mu.Unlock()
				_ = store.MarkAttemptDone(ctx, ex, holder, time.Hour)
				it.Owner.Finish(it)
			case lease.Acquired:
				// Leased ahead: held a moment, so rebalances find
				// leased firings.
				time.Sleep(2 * time.Millisecond)
				if gaveBack[it] < giveBacks {
					gaveBack[it]++
					if it.Owner.Requeue(it) {
						q <- it
					}
					continue
				}
				out.mu.Lock()
				out.fired[f.GetExecutionId()]++
				out.mu.Unlock()
				if err := store.MarkDone(ctx, ex, holder, time.Hour); err != nil {
					t.Error(err)
				}
				it.Owner.Finish(it)
			default: // Held: another delivery has it; look again soon.
				time.Sleep(time.Millisecond)
				if it.Owner.Requeue(it) {
					q <- it
				}
			}
		}
	}()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w
}

// stop is a graceful stop in the worker's order: the consumer (leaving
// the group, draining), then the stage, then the releases it queued.
func (w *miniWorker) stop() {
	w.c.Stop()
	w.cancel()
	<-w.done
	w.rel.Stop()
}

// Ten rebalances (a member leaving gracefully, another joining) while
// firings are held, leased and given back unstarted: with a delivery
// budget of 2, every firing fires exactly once and none is poison,
// because only deliveries that may have started count.
func TestTenRebalancesMakeNoPoison(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	topic := testinfra.KafkaTopic(t, 4)
	group := testinfra.KafkaGroup(t)
	rdb, prefix := testinfra.Redis(t)
	store := lease.New(rdb, lease.WithPrefix(prefix), lease.WithMaxDeliveries(2))

	const n = 300
	cl := testinfra.KafkaClient(t)
	now := time.Now()
	for i := range n {
		b, err := firing.Encode(&sundialv1.Firing{ExecutionId: fmt.Sprintf("e%d", i), JobId: fmt.Sprintf("job-%d", i%20), JobVersion: 1, Attempt: 1,
			FireTime: timestamppb.New(now), Priority: sundialv1.Priority_PRIORITY_HIGH})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	out := &outcomes{fired: map[string]int{}}
	var members []*miniWorker
	var joined atomic.Int32
	join := func() {
		members = append(members, startMini(t, brokers, topic, group, fmt.Sprintf("mini-%d", joined.Add(1)), store, out, 3))
	}
	join()
	join()
	for range 10 {
		time.Sleep(300 * time.Millisecond)
		members[0].stop()
		members = members[1:]
		join()
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out.mu.Lock()
		fired, poison := len(out.fired), out.poison
		out.mu.Unlock()
		if fired+poison == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d fired, %d poison of %d", fired, poison, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.poison != 0 {
		t.Fatalf("%d firings dead-lettered as poison after ten rebalances", out.poison)
	}
	for id, k := range out.fired {
		if k != 1 {
			t.Fatalf("%s fired %d times", id, k)
		}
	}
	t.Logf("%d firings fired once each through ten rebalances, none poison", len(out.fired))
}
