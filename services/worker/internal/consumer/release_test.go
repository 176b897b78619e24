package consumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/pkg/domain/firing"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// A deleted job's firings, dropped (on arrival or swept from the holders),
// stop counting against MaxHeld at once: the records behind them — a new
// job's among the deleted job's thousands — are fetched while the drops
// wait for their summary to be recorded, and the commit still waits for
// the drops to finish.
func TestDroppedFiringsFreeRoomBeforeTheyFinish(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(job, prefix string, n int) {
		for i := range n {
			b, err := firing.Encode(&sundialv1.Firing{ExecutionId: fmt.Sprintf("%s-%d", prefix, i), JobId: job, JobVersion: 1, Attempt: 1,
				FireTime: timestamppb.New(time.Now().Add(time.Hour)), Priority: sundialv1.Priority_PRIORITY_HIGH})
			if err != nil {
				t.Fatal(err)
			}
			if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: b}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const maxHeld = 100
	// 200 of a job that is then deleted, held; 300 more of it that arrive
	// after the delete; then 5 of a new job.
	produce("gone", "held", 200)
	produce("gone", "late", 300)
	produce("new", "new", 5)

	var (
		mu      sync.Mutex
		deleted bool
		dropped []*work.Item
	)
	h := newRecHolder()
	h.added = make(chan *work.Item, 1000)
	cons := New(Config{
		Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "g", ClientID: "w",
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, MaxHeld: maxHeld,
		Changed: func(job string, v int64) (int64, bool) {
			mu.Lock()
			defer mu.Unlock()
			return 2, deleted && job == "gone"
		},
		// As discard.Summarizer.Drop: released at once, finished later.
		Drop: func(it *work.Item, _ int64) {
			it.Owner.Release(it)
			mu.Lock()
			dropped = append(dropped, it)
			mu.Unlock()
		},
		Opts: []kgo.Opt{kgo.FetchMaxPartitionBytes(4 << 10), kgo.FetchMaxBytes(4 << 10), kgo.FetchMaxWait(50 * time.Millisecond)},
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cons.Stop()
	eventually(t, "the limit reached", func() bool { return h.Len() >= maxHeld })
	if h.get("new-0") != nil {
		t.Fatal("the new job's firing fetched past the limit")
	}

	// The job is deleted: the sweeper claims what is held and drops it.
	mu.Lock()
	deleted = true
	mu.Unlock()
	// A fetch's records are added under the partition's lock, each asked
	// whether its job changed first: one asked before the delete may still
	// be on its way to the holder. Claiming a held firing takes that lock,
	// so once it is claimed every firing asked before the delete is held,
	// and every one after it is dropped on arrival.
	var first *work.Item
	h.mu.Lock()
	for _, it := range h.items {
		first = it
		break
	}
	h.mu.Unlock()
	if !first.Owner.Claim(first) {
		t.Fatal("claim refused")
	}
	h.mu.Lock()
	taken := h.items
	h.items = map[string]*work.Item{}
	h.mu.Unlock()
	for _, it := range taken {
		if it != first && !it.Owner.Claim(it) {
			t.Fatal("claim refused")
		}
		mu.Lock()
		dropped = append(dropped, it)
		mu.Unlock()
		it.Owner.Release(it)
		if it.Envelope != nil {
			t.Fatal("a released firing keeps its envelope")
		}
	}

	// Nothing dropped has finished, yet the new job's firings arrive: the
	// drops no longer count. (The last late firings may still be on their
	// way to Drop when the new ones are held, so the counts are awaited
	// too; none of the drops finishes before the Finish calls below.)
	eventually(t, "the new job's firings fetched behind the dropped ones, every drop released", func() bool {
		for i := range 5 {
			if h.get(fmt.Sprintf("new-%d", i)) == nil {
				return false
			}
		}
		mu.Lock()
		n := len(dropped)
		mu.Unlock()
		return n == 500 && cons.heldOf(topic).Load() == 5
	})
	if got := committedOffset(t, c, 0); got > 0 {
		t.Fatalf("committed %d past dropped firings that have not finished", got)
	}

	// The summaries are recorded: the drops finish and the commit passes them.
	mu.Lock()
	n := len(dropped)
	for _, it := range dropped {
		it.Owner.Finish(it)
	}
	mu.Unlock()
	if n != 500 {
		t.Fatalf("dropped %d, want 500", n)
	}
	eventually(t, "the commit past the dropped firings", func() bool { return committedOffset(t, c, 0) == 500 })
	if n := cons.heldOf(topic).Load(); n != 5 {
		t.Errorf("held = %d after the drops finished, want 5", n)
	}
}

func committedOffset(t *testing.T, c *kfake.Cluster, partition int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return (&rig{adm: kadm.NewClient(cl), admCl: cl}).committed(t, partition)
}
