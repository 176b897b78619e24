package lagexporter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// cluster is a kfake broker with topic a (2 partitions) and b (1).
func cluster(t *testing.T) (*kgo.Client, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "a"), kfake.SeedTopics(1, "b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func produce(t *testing.T, cl *kgo.Client, topic string, partition int32, n int) {
	t.Helper()
	for range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("x")}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func gauge(t *testing.T, e *Exporter, topic, partition string) float64 {
	t.Helper()
	return testutil.ToFloat64(e.lag.WithLabelValues(topic, partition))
}

func TestLagIsEndMinusCommitted(t *testing.T) {
	cl, adm := cluster(t)
	produce(t, cl, "a", 0, 10)
	produce(t, cl, "a", 1, 3)
	produce(t, cl, "b", 0, 5)
	ctx := context.Background()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "a", Partition: 0, At: 4, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "b", Partition: 0, At: 5, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := New(Config{Group: "g", Topics: []string{"a", "b", "missing"}}, adm, clock.Real{}, discard, reg)
	e.poll(ctx)

	if got := gauge(t, e, "a", "0"); got != 6 {
		t.Errorf("a/0 lag = %v, want 10-4 = 6", got)
	}
	// Never committed: counted from the log start, where the workers start.
	if got := gauge(t, e, "a", "1"); got != 3 {
		t.Errorf("a/1 lag = %v, want 3 (no commit yet)", got)
	}
	if got := gauge(t, e, "b", "0"); got != 0 {
		t.Errorf("b/0 lag = %v, want 0", got)
	}
	if n := testutil.CollectAndCount(e.lag); n != 3 {
		t.Errorf("%d lag series, want 3 (the missing topic has none)", n)
	}
	if testutil.ToFloat64(e.updated) == 0 {
		t.Error("updated timestamp not set")
	}
	// The group label is constant, so dashboards and the HPA select on it.
	const want = `
# HELP sundial_worker_group_lag_records Records of the priority topics the worker group has not committed: end offset minus committed offset, per partition (the same for every worker).
# TYPE sundial_worker_group_lag_records gauge
sundial_worker_group_lag_records{group="g",partition="0",topic="a"} 6
sundial_worker_group_lag_records{group="g",partition="0",topic="b"} 0
sundial_worker_group_lag_records{group="g",partition="1",topic="a"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sundial_worker_group_lag_records"); err != nil {
		t.Error(err)
	}

	// Committing moves the lag on the next read.
	offs = kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "a", Partition: 0, At: 10, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	e.poll(ctx)
	if got := gauge(t, e, "a", "0"); got != 0 {
		t.Errorf("after committing to the end, a/0 lag = %v", got)
	}
}

// failing is a real admin client whose FetchOffsets fails.
type failing struct{ *kadm.Client }

func (failing) FetchOffsets(context.Context, string) (kadm.OffsetResponses, error) {
	return nil, errors.New("broker gone")
}

func TestFailedReadKeepsValuesAndCounts(t *testing.T) {
	cl, adm := cluster(t)
	produce(t, cl, "a", 0, 2)
	reg := prometheus.NewRegistry()
	ready := 0
	e := New(Config{Group: "g", Topics: []string{"a"}, Ready: func() int { return ready }}, adm, clock.Real{}, discard, reg)
	e.poll(context.Background())
	e.kafka = failing{adm}
	ready = 7
	e.poll(context.Background())
	if got := due(t, e, "ready"); got != 7 {
		t.Errorf("ready part after a failed read = %v, want the queue's 7 (it needs no broker)", got)
	}
	if got := testutil.ToFloat64(e.errors); got != 1 {
		t.Errorf("errors = %v, want 1", got)
	}
	if got := gauge(t, e, "a", "0"); got != 2 {
		t.Errorf("lag after a failed read = %v, want the last value 2", got)
	}
}

func TestStartStop(t *testing.T) {
	_, adm := cluster(t)
	e := New(Config{Group: "g", Topics: []string{"a"}, Interval: 20 * time.Millisecond}, adm, clock.Real{}, discard, prometheus.NewRegistry())
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(e.updated) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.Stop()
	e.Stop()
	// Stoppable before start, too.
	New(Config{Group: "g"}, adm, clock.Real{}, discard, prometheus.NewRegistry()).Stop()
}

func TestDialOwnsItsClient(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := Dial(Config{Group: "g", Topics: []string{"a"}}, c.ListenAddrs(), "lag-test", discard, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Stop() // goleak in TestMain fails the package if the client leaked
	e.Stop()
}

func TestOverdueUnfetched(t *testing.T) {
	offs := map[[2]string]partitionOffsets{
		{"a", "0"}: {from: 10, recent: 50, end: 80},  // 40 records older than the cutoff past the commit
		{"a", "1"}: {from: 0, recent: 90, end: 90},   // every record older than the cutoff
		{"b", "0"}: {from: 5, recent: 5, end: 400},   // everything produced within the window: held ahead
		{"c", "0"}: {from: 0, recent: 120, end: 100}, // a time index answer past the end is clamped
	}
	for _, tc := range []struct {
		name      string
		positions map[string]map[int32]int64
		want      int64
	}{
		{"owns nothing", nil, 0},
		{"fetched everything", map[string]map[int32]int64{"a": {0: 80, 1: 90}, "b": {0: 400}}, 0},
		{"fetched past the cutoff", map[string]map[int32]int64{"a": {0: 60}}, 0},
		{"behind the cutoff", map[string]map[int32]int64{"a": {0: 30}}, 20},
		{"nothing fetched yet: from the commit", map[string]map[int32]int64{"a": {0: -1, 1: -1}}, 40 + 90},
		{"held ahead is never due", map[string]map[int32]int64{"b": {0: -1}}, 0},
		{"clamped to the end", map[string]map[int32]int64{"c": {0: 0}}, 100},
		{"a partition Kafka did not list", map[string]map[int32]int64{"z": {0: 0}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overdueUnfetched(tc.positions, offs); got != tc.want {
				t.Errorf("overdueUnfetched = %d, want %d", got, tc.want)
			}
		})
	}
}

// produceAt produces n records to topic/partition with the given
// timestamp, as if the relay had published them then.
func produceAt(t *testing.T, cl *kgo.Client, topic string, partition int32, n int, at time.Time) {
	t.Helper()
	for range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("x"), Timestamp: at}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func due(t *testing.T, e *Exporter, source string) float64 {
	t.Helper()
	return testutil.ToFloat64(e.due.WithLabelValues(source))
}

// TestDueBacklogIsNotLag drives the gauges through a real (kfake) broker:
// firings held ahead of their instant make lag but no due backlog; an
// overload (the worker's fetch behind records older than the window, its
// ready queue full) makes both.
func TestDueBacklogIsNotLag(t *testing.T) {
	cl, adm := cluster(t)
	now := time.Now()
	// Held ahead: 600 firings staged within the last window, all fetched
	// and held by this worker, nothing committed yet.
	produceAt(t, cl, "a", 0, 400, now.Add(-30*time.Second))
	produceAt(t, cl, "a", 1, 200, now.Add(-5*time.Second))
	positions := map[string]map[int32]int64{"a": {0: 400, 1: 200}}
	ready := 0
	reg := prometheus.NewRegistry()
	e := New(Config{Group: "g", Topics: []string{"a"}, OverdueAfter: 2 * time.Minute,
		Ready: func() int { return ready }, Positions: func() map[string]map[int32]int64 { return positions }},
		adm, clock.Real{}, discard, reg)
	e.poll(context.Background())
	if lag := gauge(t, e, "a", "0") + gauge(t, e, "a", "1"); lag != 600 {
		t.Errorf("group lag = %v, want 600 (every held firing is uncommitted)", lag)
	}
	if r, k := due(t, e, "ready"), due(t, e, "kafka"); r != 0 || k != 0 {
		t.Errorf("due backlog with every firing held ahead: ready %v, kafka %v; want 0, 0", r, k)
	}

	// Overload on b: 300 records published three minutes ago (so past
	// their instant), then 100 within the window; the worker has fetched
	// none (paused at --max-held), and 50 firings wait for an executor.
	produceAt(t, cl, "b", 0, 300, now.Add(-3*time.Minute))
	produceAt(t, cl, "b", 0, 100, now.Add(-10*time.Second))
	e.cfg.Topics = []string{"a", "b"}
	positions["b"] = map[int32]int64{0: -1}
	ready = 50
	e.poll(context.Background())
	if r, k := due(t, e, "ready"), due(t, e, "kafka"); r != 50 || k != 300 {
		t.Errorf("due backlog in overload: ready %v, kafka %v; want 50, 300", r, k)
	}
	// Having fetched 120 of them, the worker still has 180 overdue in Kafka.
	positions["b"][0] = 120
	e.poll(context.Background())
	if k := due(t, e, "kafka"); k != 180 {
		t.Errorf("kafka due after fetching 120 = %v, want 180", k)
	}
	// A partition this worker does not own is another worker's to count.
	delete(positions, "b")
	e.poll(context.Background())
	if k := due(t, e, "kafka"); k != 0 {
		t.Errorf("kafka due of partitions owned by nobody here = %v, want 0", k)
	}
}

// Publish is given the lag per topic, summed over its partitions, after a
// read that succeeded (a topic with no partition read counts 0), and not
// after one that failed.
func TestPublishGivesTheLagPerTopic(t *testing.T) {
	cl, adm := cluster(t)
	produce(t, cl, "a", 0, 10)
	produce(t, cl, "a", 1, 3)
	produce(t, cl, "b", 0, 5)
	ctx := context.Background()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "a", Partition: 0, At: 4, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "b", Partition: 0, At: 5, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	var got []map[string]int64
	publish := func(lag map[string]int64) { got = append(got, lag) }
	e := New(Config{Group: "g", Topics: []string{"a", "b", "missing"}, Publish: publish}, adm, clock.Real{}, discard, prometheus.NewRegistry())
	e.poll(ctx)
	if len(got) != 1 || !maps.Equal(got[0], map[string]int64{"a": 9, "b": 0, "missing": 0}) {
		t.Fatalf("published %v, want a 9 (6+3), b 0, missing 0", got)
	}
	f := New(Config{Group: "g", Topics: []string{"a"}, Publish: publish}, failing{adm}, clock.Real{}, discard, prometheus.NewRegistry())
	f.poll(ctx)
	if len(got) != 1 {
		t.Fatalf("a failed read published %v", got[1:])
	}
}
