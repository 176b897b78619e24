//go:build integration

package consumer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/offsets"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// realMember joins the test's group on the real broker as a static member
// named instance. The session timeout is long, so anything faster than it
// is static membership at work, not a session expiring.
func realMember(t *testing.T, brokers []string, topic, group, instance string, h Holder) *Consumer {
	t.Helper()
	c := New(Config{
		Brokers: brokers, Topics: []string{topic}, Group: group, ClientID: instance, InstanceID: instance,
		SessionTimeout: 20 * time.Second, CommitInterval: 50 * time.Millisecond, DrainTimeout: 5 * time.Second,
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger().With("member", instance))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// crash ends a member as kill -9 would for the group: no revoke callback
// work is awaited by the broker and no leave is sent (a static member's
// client does not send one when it closes).
func (c *Consumer) crash() {
	c.once.Do(func() {
		c.poll.Stop()
		c.commit.Stop()
		c.cl.Load().Close()
	})
}

func owned(c *Consumer, topic string) []int32 {
	ps := c.Assigned()[topic]
	slices.Sort(ps)
	return ps
}

func waitOwned(t *testing.T, c *Consumer, topic string, within time.Duration, cond func([]int32) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond(owned(c, topic)) {
		if time.Since(start) > within {
			t.Fatalf("after %s %s owns %v", within, c.cfg.InstanceID, owned(c, topic))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// A static member killed and restarted with the same instance id gets its
// partitions back at once — no empty assignment while the group waits out
// the dead session — and the other member keeps its own throughout.
func TestRestartedStaticMemberGetsItsPartitionsBackAtOnce(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	topic := testinfra.KafkaTopic(t, 4)
	group := testinfra.KafkaGroup(t)
	a := realMember(t, brokers, topic, group, "worker-a", newRecHolder())
	b := realMember(t, brokers, topic, group, "worker-b", newRecHolder())
	defer b.Stop()
	waitOwned(t, a, topic, 30*time.Second, func(ps []int32) bool { return len(ps) == 2 && len(owned(b, topic)) == 2 })
	mine, theirs := owned(a, topic), owned(b, topic)

	a.crash()
	a2 := realMember(t, brokers, topic, group, "worker-a", newRecHolder())
	defer a2.Stop()
	took := waitOwned(t, a2, topic, 5*time.Second, func(ps []int32) bool { return slices.Equal(ps, mine) })
	t.Logf("restarted member owns %v again after %s (session timeout 20s)", mine, took)
	if got := owned(b, topic); !slices.Equal(got, theirs) {
		t.Fatalf("the other member's partitions changed from %v to %v", theirs, got)
	}
}

// A static member that stops gracefully leaves the group itself, so the
// other member takes its partitions at once, not after the session
// timeout.
func TestStaticMemberLeavesOnStop(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	topic := testinfra.KafkaTopic(t, 4)
	group := testinfra.KafkaGroup(t)
	a := realMember(t, brokers, topic, group, "worker-a", newRecHolder())
	b := realMember(t, brokers, topic, group, "worker-b", newRecHolder())
	defer b.Stop()
	waitOwned(t, b, topic, 30*time.Second, func(ps []int32) bool { return len(ps) == 2 && len(owned(a, topic)) == 2 })
	a.Stop()
	took := waitOwned(t, b, topic, 8*time.Second, func(ps []int32) bool { return len(ps) == 4 })
	t.Logf("the other member owns all four after %s (session timeout 20s)", took)
}

// A worker killed with records finished past its commit point — they
// finished out of order — leaves them in its commit's metadata, so the
// member that takes the partition over is handed only the unfinished ones
// (it would otherwise lease each again, to find it done).
func TestTakeoverPassesRecordsFinishedPastTheCommit(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	topic := testinfra.KafkaTopic(t, 1)
	group := testinfra.KafkaGroup(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 8 {
		rec := &kgo.Record{Topic: topic, Partition: 0, Value: envelope(t, fmt.Sprintf("p0-o%d", i))}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ha := newRecHolder()
	a := realMember(t, brokers, topic, group, "worker-a", ha)
	ha.wait(t, 8)
	finished := []int{1, 2, 5, 6}
	for _, i := range finished {
		claimFinish(t, ha, fmt.Sprintf("p0-o%d", i))
	}
	adm := kadm.NewClient(cl)
	eventually(t, "a commit at 0 naming the finished records", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		o, ok := offs.Lookup(topic, 0)
		if !ok || o.At != 0 {
			return false
		}
		bits, ok := offsets.DecodeDone(o.Metadata)
		return ok && offsets.DoneAt(bits, 0, 1) && offsets.DoneAt(bits, 0, 6)
	})
	a.crash()

	hb := newRecHolder()
	b := realMember(t, brokers, topic, group, "worker-a", hb)
	defer b.Stop()
	hb.wait(t, 4)
	for _, i := range []int{0, 3, 4, 7} {
		if hb.get(fmt.Sprintf("p0-o%d", i)) == nil {
			t.Fatalf("the new owner was not handed the unfinished p0-o%d", i)
		}
	}
	for _, i := range finished {
		if hb.get(fmt.Sprintf("p0-o%d", i)) != nil {
			t.Fatalf("the new owner was handed p0-o%d, which the old one finished", i)
		}
	}
	if got := testutil.ToFloat64(b.m.TakeoverPassed); got != float64(len(finished)) {
		t.Fatalf("passed %v records, want %d", got, len(finished))
	}
	// Finishing the rest moves the commit past everything.
	for _, i := range []int{0, 3, 4, 7} {
		claimFinish(t, hb, fmt.Sprintf("p0-o%d", i))
	}
	eventually(t, "the commit at 8", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), group)
		o, ok := offs.Lookup(topic, 0)
		return err == nil && ok && o.At == 8
	})
}
