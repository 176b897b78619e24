package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recHolder is a holder that records what the consumer hands it, so the test
// plays the executor: it claims and finishes items itself.
type recHolder struct {
	mu      sync.Mutex
	items   map[string]*work.Item // by execution id
	removed map[string]bool
	added   chan *work.Item
}

func newRecHolder() *recHolder {
	return &recHolder{items: map[string]*work.Item{}, removed: map[string]bool{}, added: make(chan *work.Item, 1000)}
}

func (h *recHolder) AddAfter(it *work.Item, notBefore int64) {
	it.NotBefore = notBefore
	f, _ := firing.Decode(it.Envelope)
	h.mu.Lock()
	h.items[f.GetExecutionId()] = it
	h.mu.Unlock()
	h.added <- it
}

func (h *recHolder) Remove(it *work.Item) bool {
	f, _ := firing.Decode(it.Envelope)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed[f.GetExecutionId()] = true
	return true
}

func (h *recHolder) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.items)
}

func (h *recHolder) get(id string) *work.Item {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.items[id]
}

func (h *recHolder) wasRemoved(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removed[id]
}

func (h *recHolder) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		<-h.added
	}
}

const topic = "fire"

// envelope is a firing due in an hour: beyond what a revoke keeps.
func envelope(t *testing.T, id string) []byte {
	t.Helper()
	return envelopeAt(t, id, time.Now().Add(time.Hour))
}

func envelopeAt(t *testing.T, id string, at time.Time) []byte {
	t.Helper()
	b, err := firing.Encode(&sundialv1.Firing{ExecutionId: id, JobId: "job", Attempt: 1, FireTime: timestamppb.New(at), Priority: sundialv1.Priority_PRIORITY_HIGH})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type rig struct {
	cluster *kfake.Cluster
	addrs   []string
	adm     *kadm.Client
	admCl   *kgo.Client
}

func newRig(t *testing.T, partitions int32) *rig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &rig{cluster: c, addrs: c.ListenAddrs(), adm: kadm.NewClient(cl), admCl: cl}
}

// produce writes records with ids p<partition>-o<offset>.
func (r *rig) produce(t *testing.T, partition int32, n int) {
	t.Helper()
	for i := range n {
		rec := &kgo.Record{Topic: topic, Partition: partition, Value: envelope(t, fmt.Sprintf("p%d-o%d", partition, i))}
		if err := r.admCl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *rig) produceRaw(t *testing.T, partition int32, v []byte) {
	t.Helper()
	if err := r.admCl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: partition, Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) committed(t *testing.T, partition int32) int64 {
	t.Helper()
	offs, err := r.adm.FetchOffsets(context.Background(), "g")
	if err != nil {
		return -2
	}
	o, ok := offs.Lookup(topic, partition)
	if !ok {
		return -1
	}
	return o.At
}

// eventually polls cond: commits are the broker's state, not an event the
// test can wait on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (r *rig) consumer(t *testing.T, name string, h Holder, drain time.Duration) *Consumer {
	t.Helper()
	c := New(Config{
		Brokers: r.addrs, Topics: []string{topic}, Group: "g", ClientID: name,
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, DrainTimeout: drain,
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger().With("member", name))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func claimFinish(t *testing.T, h *recHolder, id string) {
	t.Helper()
	it := h.get(id)
	if !it.Owner.Claim(it) {
		t.Fatalf("claim %s refused", id)
	}
	it.Owner.Finish(it)
}

func TestCommitsOnlyBelowLowestUnfinished(t *testing.T) {
	r := newRig(t, 1)
	r.produce(t, 0, 5)
	h := newRecHolder()
	c := r.consumer(t, "a", h, time.Second)
	defer c.Stop()
	h.wait(t, 5)

	// 2 and 3 finish first: the commit may not pass 0.
	claimFinish(t, h, "p0-o2")
	claimFinish(t, h, "p0-o3")
	eventually(t, "first commit", func() bool { return r.committed(t, 0) == 0 })
	claimFinish(t, h, "p0-o0")
	eventually(t, "commit to 1", func() bool { return r.committed(t, 0) == 1 })
	claimFinish(t, h, "p0-o1")
	eventually(t, "commit to 4", func() bool { return r.committed(t, 0) == 4 })
	// 4 is executing, not finished: the commit stays at 4.
	it := h.get("p0-o4")
	if !it.Owner.Claim(it) {
		t.Fatal("claim")
	}
	if got := r.committed(t, 0); got != 4 {
		t.Fatalf("committed %d past the executing firing at 4", got)
	}
	it.Owner.Finish(it)
	eventually(t, "commit to 5", func() bool { return r.committed(t, 0) == 5 })
}

func TestPoisonRecordIsPassed(t *testing.T) {
	r := newRig(t, 1)
	r.produceRaw(t, 0, []byte("not a protobuf \xff\xff\xff"))
	r.produce(t, 0, 1) // offset 1, id p0-o0
	h := newRecHolder()
	c := r.consumer(t, "a", h, time.Second)
	defer c.Stop()
	h.wait(t, 1)
	eventually(t, "commit past poison", func() bool { return r.committed(t, 0) == 1 })
	claimFinish(t, h, "p0-o0")
	eventually(t, "commit to 2", func() bool { return r.committed(t, 0) == 2 })
}

// With a Poison hook, the offset passes an undecodable record only once the
// hook says it is done (on the DLQ topic), and the hook gets its bytes.
func TestPoisonRecordWaitsForTheHook(t *testing.T) {
	r := newRig(t, 1)
	r.produceRaw(t, 0, []byte("not a protobuf \xff\xff\xff"))
	r.produce(t, 0, 1)
	type poisoned struct {
		rec   *kgo.Record
		cause error
		done  func()
	}
	got := make(chan poisoned, 1)
	h := newRecHolder()
	c := New(Config{
		Brokers: r.addrs, Topics: []string{topic}, Group: "g", ClientID: "a",
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, DrainTimeout: time.Second,
		Poison: func(rec *kgo.Record, cause error, done func()) { got <- poisoned{rec, cause, done} },
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	p := <-got
	if string(p.rec.Value) != "not a protobuf \xff\xff\xff" || p.rec.Offset != 0 || p.cause == nil {
		t.Fatalf("hook got %q at %d: %v", p.rec.Value, p.rec.Offset, p.cause)
	}
	h.wait(t, 1)
	claimFinish(t, h, "p0-o0")
	eventually(t, "first commit", func() bool { return r.committed(t, 0) == 0 })
	// Watch for five commit intervals: the offset stays at the poison record.
	window := time.After(100 * time.Millisecond)
	for watching := true; watching; {
		if got := r.committed(t, 0); got != 0 {
			t.Fatalf("committed %d past a poison record not yet on the DLQ", got)
		}
		select {
		case <-window:
			watching = false
		default:
		}
	}
	p.done()
	eventually(t, "commit past both", func() bool { return r.committed(t, 0) == 2 })
}

// When a second member joins, the partition that moves is revoked from the
// first: its held firings are abandoned (taken out of the holder), its
// executing firing is waited for, the commit lands just below the first
// abandoned one, and the new owner gets exactly the abandoned ones again.
func TestRevokeDrainsCommitsAndHandsOver(t *testing.T) {
	r := newRig(t, 2)
	r.produce(t, 0, 4)
	r.produce(t, 1, 4)
	ha := newRecHolder()
	a := r.consumer(t, "a", ha, 30*time.Second)
	defer a.Stop()
	ha.wait(t, 8)
	for _, p := range []int{0, 1} {
		claimFinish(t, ha, fmt.Sprintf("p%d-o0", p))
		it := ha.get(fmt.Sprintf("p%d-o1", p))
		if !it.Owner.Claim(it) { // executing through the rebalance
			t.Fatal("claim")
		}
	}
	eventually(t, "commits at 1", func() bool { return r.committed(t, 0) == 1 && r.committed(t, 1) == 1 })

	hb := newRecHolder()
	b := r.consumer(t, "b", hb, 30*time.Second)
	defer b.Stop()

	// Find the partition that moved: its held firings were abandoned.
	var moved int32 = -1
	eventually(t, "a partition revoked from a", func() bool {
		for _, p := range []int32{0, 1} {
			if ha.wasRemoved(fmt.Sprintf("p%d-o2", p)) && ha.wasRemoved(fmt.Sprintf("p%d-o3", p)) {
				moved = p
				return true
			}
		}
		return false
	})
	stay := 1 - moved
	if ha.wasRemoved(fmt.Sprintf("p%d-o2", stay)) {
		t.Fatal("the partition that stayed lost its held firings")
	}
	// The revoke is waiting for the executing firing; b gets nothing yet.
	select {
	case it := <-hb.added:
		t.Fatalf("new owner got %v before the old one drained", it)
	default:
	}
	if got := r.committed(t, moved); got != 1 {
		t.Fatalf("committed %d before the executing firing finished", got)
	}
	// Claims on abandoned items fail: an executor that popped one late
	// drops it.
	if it := ha.get(fmt.Sprintf("p%d-o2", moved)); it.Owner.Claim(it) {
		t.Fatal("claimed an abandoned firing")
	}
	ex := ha.get(fmt.Sprintf("p%d-o1", moved))
	ex.Owner.Finish(ex)

	eventually(t, "commit below the first abandoned", func() bool { return r.committed(t, moved) == 2 })
	hb.wait(t, 2)
	for _, id := range []string{fmt.Sprintf("p%d-o2", moved), fmt.Sprintf("p%d-o3", moved)} {
		if hb.get(id) == nil {
			t.Fatalf("new owner did not get %s", id)
		}
	}
	if hb.get(fmt.Sprintf("p%d-o1", moved)) != nil {
		t.Fatal("new owner got the finished firing again")
	}
	// The partition a kept still commits normally.
	ke := ha.get(fmt.Sprintf("p%d-o1", stay))
	ke.Owner.Finish(ke)
	eventually(t, "kept partition commits", func() bool { return r.committed(t, stay) == 2 })
}

// Stop leaves the group; the final revoke commits, bounded by the drain
// timeout when a firing never finishes.
func TestStopCommitsAndBoundsDrain(t *testing.T) {
	r := newRig(t, 1)
	r.produce(t, 0, 3)
	h := newRecHolder()
	c := r.consumer(t, "a", h, 100*time.Millisecond)
	h.wait(t, 3)
	claimFinish(t, h, "p0-o0")
	stuck := h.get("p0-o1")
	stuck.Owner.Claim(stuck) // never finishes
	claimFinish(t, h, "p0-o2")
	c.Stop()
	if got := r.committed(t, 0); got != 1 {
		t.Fatalf("committed %d after stop, want 1 (the stuck firing)", got)
	}
	if stuck.Owner.Requeue(stuck) {
		t.Fatal("requeue accepted on a revoked partition")
	}
}

// Over --max-held the consumer stops fetching every topic but the unpaused
// (CRITICAL) one, so memory stays bounded while CRITICAL firings still
// come in; when the held firings drain, fetching resumes.
func TestOverMaxHeldOnlyCriticalIsFetched(t *testing.T) {
	const crit = "crit"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, crit))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(tp, prefix string, n int) {
		for i := range n {
			rec := &kgo.Record{Topic: tp, Value: envelope(t, fmt.Sprintf("%s-%d", prefix, i))}
			if err := prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const total, maxHeld = 600, 100
	produce(topic, "bulk", total)

	h := newRecHolder()
	h.added = make(chan *work.Item, 2*total)
	cons := New(Config{
		Brokers: c.ListenAddrs(), Topics: []string{topic, crit}, Unpaused: []string{crit}, Group: "g", ClientID: "w",
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, MaxHeld: maxHeld,
		// Small fetches, so one fetch cannot carry the whole backlog past
		// the limit.
		Opts: []kgo.Opt{kgo.FetchMaxPartitionBytes(8 << 10), kgo.FetchMaxBytes(8 << 10), kgo.FetchMaxWait(100 * time.Millisecond)},
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cons.Stop()
	eventually(t, "the limit reached", func() bool { return h.Len() >= maxHeld })
	// Positions say how far each owned partition is fetched (the lag
	// exporter counts the overdue records beyond): the paused topic part
	// of the way, the empty one not at all.
	pos := cons.Positions()
	if p := pos[topic][0]; p < maxHeld || p >= total {
		t.Errorf("position of the paused partition = %d, want in [%d, %d)", p, maxHeld, total)
	}
	if p, ok := pos[crit][0]; !ok || p != -1 {
		t.Errorf("position of the partition with nothing fetched = %d (owned %v), want -1", p, ok)
	}

	produce(crit, "crit", 5)
	eventually(t, "the CRITICAL firings fetched while paused", func() bool {
		for i := range 5 {
			if h.get(fmt.Sprintf("crit-%d", i)) == nil {
				return false
			}
		}
		return true
	})
	bulk := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for id := range h.items {
			if strings.HasPrefix(id, "bulk-") {
				n++
			}
		}
		return n
	}
	if n := bulk(); n >= total {
		t.Fatalf("all %d bulk firings fetched with max held %d", n, maxHeld)
	}
	// The executors catch up: memory frees and the rest is fetched.
	seen := map[string]bool{}
	eventually(t, "every bulk firing after draining", func() bool {
		// Taken out under the holder's lock, claimed after it: the
		// partition calls Add with its own lock held, so claiming under
		// the holder's lock would take the two in the opposite order.
		h.mu.Lock()
		taken := h.items
		h.items = map[string]*work.Item{}
		h.mu.Unlock()
		for id, it := range taken {
			if it.Owner.Claim(it) {
				it.Owner.Finish(it)
			}
			seen[id] = true
		}
		n := 0
		for id := range seen {
			if strings.HasPrefix(id, "bulk-") {
				n++
			}
		}
		return n == total
	})
}

// A LOW backlog stops at LOW's share of MaxHeld and does not pause the
// HIGH topic: HIGH firings published while the LOW backlog waits in Kafka
// are all fetched, and the LOW backlog resumes as its firings finish.
// (Bounded by MaxHeld alone, the LOW backlog would fill the worker past a
// quarter over the limit, where every pausable topic stops.)
func TestLowBacklogDoesNotPauseHigh(t *testing.T) {
	const high, low = "high", "low"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, high, low))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(tp, prefix string, n int, at time.Time) {
		for i := range n {
			rec := &kgo.Record{Topic: tp, Value: envelopeAt(t, fmt.Sprintf("%s-%d", prefix, i), at)}
			if err := prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const total, maxHeld = 600, 100
	// The LOW backlog is due before the HIGH firings: by MaxHeld alone its
	// partition is the one furthest behind, which fetches on.
	produce(low, "low", total, time.Now().Add(30*time.Minute))

	h := newRecHolder()
	h.added = make(chan *work.Item, 2*total)
	cons := New(Config{
		Brokers: c.ListenAddrs(), Topics: []string{high, low}, Group: "g", ClientID: "w",
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, MaxHeld: maxHeld,
		HeldShares: []TopicShare{{Topic: low, Percent: 50}},
		// Small fetches, so one fetch cannot carry the whole backlog past
		// the limit.
		Opts: []kgo.Opt{kgo.FetchMaxPartitionBytes(8 << 10), kgo.FetchMaxBytes(8 << 10), kgo.FetchMaxWait(100 * time.Millisecond)},
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cons.Stop()
	count := func(prefix string) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for id := range h.items {
			if strings.HasPrefix(id, prefix+"-") {
				n++
			}
		}
		return n
	}
	eventually(t, "LOW's share reached", func() bool { return count("low") >= maxHeld/2 })

	produce(high, "high", 30, time.Now().Add(time.Hour))
	eventually(t, "the HIGH firings fetched while LOW is paused", func() bool { return count("high") == 30 })
	if n := count("low"); n >= total || n > maxHeld+maxHeld/4 {
		t.Fatalf("%d LOW firings fetched with LOW's share at %d of max held %d", n, maxHeld/2, maxHeld)
	}
	// The executors finish the LOW firings: the rest of the backlog comes.
	seen := map[string]bool{}
	eventually(t, "every LOW firing after draining", func() bool {
		h.mu.Lock()
		taken := h.items
		h.items = map[string]*work.Item{}
		h.mu.Unlock()
		for id, it := range taken {
			if it.Owner.Claim(it) {
				it.Owner.Finish(it)
			}
			seen[id] = true
		}
		n := 0
		for id := range seen {
			if strings.HasPrefix(id, "low-") {
				n++
			}
		}
		return n == total
	})
}

// A broker outage ends the session (lost): the held firings stay held and
// claimable — their leases decide who fires, not the group — and when the
// broker is back and the group gives the partition back, the records
// already held are not held a second time, and commits go on from where
// the firings finished.
func TestLostSessionKeepsHeldFiringsAndResumes(t *testing.T) {
	r := newRig(t, 1)
	for i := range 3 {
		r.produceRaw(t, 0, envelopeAt(t, fmt.Sprintf("p0-o%d", i), time.Now().Add(time.Hour)))
	}
	h := newRecHolder()
	c := r.consumer(t, "a", h, time.Second)
	defer c.Stop()
	h.wait(t, 3)
	claimFinish(t, h, "p0-o0")
	eventually(t, "commit at 1", func() bool { return r.committed(t, 0) == 1 })

	// The broker stops answering: every request closes its connection.
	var down atomic.Bool
	down.Store(true)
	r.cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		r.cluster.KeepControl()
		if down.Load() {
			return nil, errors.New("broker down"), true
		}
		return nil, nil, false
	})
	eventually(t, "the session lost", func() bool { return len(c.Assigned()) == 0 })
	for _, id := range []string{"p0-o1", "p0-o2"} {
		if h.wasRemoved(id) {
			t.Fatalf("%s was taken out of the holder when the session was lost", id)
		}
	}
	// Held firings go on during the outage.
	claimFinish(t, h, "p0-o1")

	down.Store(false)
	eventually(t, "the partition given back", func() bool { return len(c.Assigned()) == 1 })
	r.produceRaw(t, 0, envelopeAt(t, "p0-o3", time.Now().Add(time.Hour)))
	it := <-h.added
	if f, _ := firing.Decode(it.Envelope); f.GetExecutionId() != "p0-o3" {
		t.Fatalf("after the outage the holder got %s again; only the new record was due", f.GetExecutionId())
	}
	eventually(t, "commit past the firing finished during the outage", func() bool { return r.committed(t, 0) == 2 })
	claimFinish(t, h, "p0-o2")
	claimFinish(t, h, "p0-o3")
	eventually(t, "commit at the end", func() bool { return r.committed(t, 0) == 4 })
	select {
	case it := <-h.added:
		f, _ := firing.Decode(it.Envelope)
		t.Fatalf("holder got %s twice", f.GetExecutionId())
	default:
	}
}

// A revoke keeps the firings due within RevokeKeep (the next owner could
// not fetch and lease them in time; whichever copy takes the lease fires)
// and abandons the later ones to the next owner.
func TestRevokeKeepsFiringsDueSoon(t *testing.T) {
	r := newRig(t, 2)
	for p := range int32(2) {
		r.produceRaw(t, p, envelopeAt(t, fmt.Sprintf("p%d-soon", p), time.Now().Add(2*time.Second)))
		r.produceRaw(t, p, envelopeAt(t, fmt.Sprintf("p%d-later", p), time.Now().Add(time.Hour)))
	}
	ha := newRecHolder()
	a := r.consumer(t, "a", ha, time.Second)
	defer a.Stop()
	ha.wait(t, 4)

	hb := newRecHolder()
	b := r.consumer(t, "b", hb, time.Second)
	defer b.Stop()
	var moved int32 = -1
	eventually(t, "a partition revoked from a", func() bool {
		for _, p := range []int32{0, 1} {
			if ha.wasRemoved(fmt.Sprintf("p%d-later", p)) {
				moved = p
				return true
			}
		}
		return false
	})
	soon := fmt.Sprintf("p%d-soon", moved)
	if ha.wasRemoved(soon) {
		t.Fatal("the firing due in 2 s was abandoned by the revoke")
	}
	// The next owner gets both again; the one due soon is now held twice,
	// and its lease will let one copy fire.
	hb.wait(t, 2)
	if hb.get(soon) == nil {
		t.Fatal("the next owner did not get the firing due soon")
	}
	kept := ha.get(soon)
	if !kept.Owner.Claim(kept) {
		t.Fatal("the kept firing cannot be claimed")
	}
	kept.Owner.Finish(kept)
	// The kept firing finishing here does not commit the partition a no
	// longer owns.
	if got := r.committed(t, moved); got != 0 {
		t.Fatalf("committed %d for a partition a gave up", got)
	}
}

// Catch-ups that reach the worker after their instants (the relay and the
// fetch took longer than the prefetcher's spacing) are held back so they
// leave at the catch-up rate; an ordinary firing is not.
func TestLateCatchUpsArePacedOnArrival(t *testing.T) {
	r := newRig(t, 1)
	due := time.Now().Add(-2 * time.Second)
	for i := range 30 {
		b, err := firing.Encode(&sundialv1.Firing{ExecutionId: fmt.Sprintf("c%d", i), JobId: "job", Attempt: 1, CatchUp: true,
			FireTime: timestamppb.New(due.Add(time.Duration(i) * 10 * time.Millisecond)), Priority: sundialv1.Priority_PRIORITY_HIGH})
		if err != nil {
			t.Fatal(err)
		}
		r.produceRaw(t, 0, b)
	}
	r.produceRaw(t, 0, envelopeAt(t, "ordinary", due))
	h := newRecHolder()
	c := New(Config{Brokers: r.addrs, Topics: []string{topic}, Group: "g", ClientID: "a", CatchUpRate: 100},
		h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	h.wait(t, 31)
	prev := int64(0)
	for i := range 30 {
		it := h.get(fmt.Sprintf("c%d", i))
		if it.NotBefore <= it.FireAt {
			t.Fatalf("late catch-up c%d not held back", i)
		}
		if i > 0 && it.NotBefore-prev < int64(10*time.Millisecond) {
			t.Fatalf("c%d released %s after c%d, under 1/rate", i, time.Duration(it.NotBefore-prev), i-1)
		}
		prev = it.NotBefore
	}
	if it := h.get("ordinary"); it.NotBefore != 0 {
		t.Fatal("an ordinary firing was paced")
	}
}

// A session timeout below the brokers' group.min.session.timeout.ms would
// never let the worker join: the consumer raises it to the brokers'
// minimum and joins; one the brokers allow is kept.
func TestSessionTimeoutRaisedToTheBrokersMinimum(t *testing.T) {
	for _, tc := range []struct {
		brokerMin string
		want      time.Duration
	}{{"6000", 6 * time.Second}, {"1000", 1500 * time.Millisecond}} {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": tc.brokerMin}))
		if err != nil {
			t.Fatal(err)
		}
		h := newRecHolder()
		cons := New(Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "g", ClientID: "a", SessionTimeout: 1500 * time.Millisecond},
			h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
		if err := cons.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if cons.cfg.SessionTimeout != tc.want {
			t.Errorf("broker minimum %s ms: session timeout %s, want %s", tc.brokerMin, cons.cfg.SessionTimeout, tc.want)
		}
		eventually(t, "joined", func() bool { return len(cons.Assigned()) == 1 })
		cons.Stop()
		c.Close()
	}
}

// Each partition stops fetching once its firings reach FetchAhead past
// now, whatever the other partitions do: a partition far ahead does not
// fill the worker while another's firings due sooner wait in Kafka.
func TestFetchAheadPausesEachPartitionAtTheHorizon(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(part int32, prefix string, n int, at func(i int) time.Time) {
		for i := range n {
			rec := &kgo.Record{Topic: topic, Partition: part, Value: envelopeAt(t, fmt.Sprintf("%s-%d", prefix, i), at(i))}
			if err := prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now()
	// Partition 0: a firing every 10 s from now on, 300 of them (50 min).
	produce(0, "far", 300, func(i int) time.Time { return now.Add(time.Duration(i) * 10 * time.Second) })
	// Partition 1: 300 firings due within the next minute.
	produce(1, "near", 300, func(i int) time.Time { return now.Add(time.Duration(i) * 200 * time.Millisecond) })

	h := newRecHolder()
	h.added = make(chan *work.Item, 1000)
	cons := New(Config{
		Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "g", ClientID: "w",
		SessionTimeout: 6 * time.Second, CommitInterval: 20 * time.Millisecond, FetchAhead: 2 * time.Minute,
		Opts: []kgo.Opt{kgo.FetchMaxPartitionBytes(4 << 10), kgo.FetchMaxBytes(8 << 10), kgo.FetchMaxWait(100 * time.Millisecond)},
	}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), logger())
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cons.Stop()
	count := func(prefix string) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for id := range h.items {
			if strings.HasPrefix(id, prefix) {
				n++
			}
		}
		return n
	}
	eventually(t, "every near firing fetched", func() bool { return count("near-") == 300 })
	time.Sleep(300 * time.Millisecond) // a few more fetches, had the far partition not been paused
	// Firings 0..12 are within two minutes; a fetch may carry some past
	// the horizon before the pause takes effect, never the whole backlog.
	if n := count("far-"); n < 13 || n >= 300 {
		t.Fatalf("%d far firings fetched, want those within the horizon and not the 50-minute backlog", n)
	}
}
