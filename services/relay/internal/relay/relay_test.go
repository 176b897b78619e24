package relay

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/config"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitFor = 30 * time.Second

type harness struct {
	t       *testing.T
	cluster *kfake.Cluster
	ob      *memOutbox
	reg     *prometheus.Registry
	relay   *Relay
	cfg     Config
	kc      *kgo.Client
	logger  *slog.Logger
}

// newHarness builds a relay over an in-memory outbox and a kfake cluster.
func newHarness(t *testing.T, clk clock.Clock, tweak func(*Config), kopts ...kfake.Opt) *harness {
	t.Helper()
	cluster, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, kopts...)...)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cfg := Defaults()
	cfg.KafkaBrokers = cluster.ListenAddrs()[0]
	cfg.TopicPrefix = "unit"
	cfg.NodeID = "test"
	cfg.PublishTimeout = time.Second
	cfg.PollInterval = time.Hour // tests wake the relay explicitly
	if tweak != nil {
		tweak(&cfg)
	}
	var p config.Problems
	cfg.Validate(&p)
	require.NoError(t, p.Err())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	kc, err := NewProducer(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	h := &harness{t: t, cluster: cluster, ob: newMemOutbox(clk), reg: prometheus.NewRegistry(), cfg: cfg, kc: kc, logger: logger}
	h.relay = New(cfg, Deps{Outbox: h.ob, Kafka: kc, Logger: logger, Clock: clk, Registry: h.reg})
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(h.t, h.relay.Start(ctx))
	h.t.Cleanup(h.relay.Stop)
}

// stage adds a row of a fresh execution with priority p, due at publishAt.
func (h *harness) stage(p sundialv1.Priority, publishAt time.Time) outbox.Row {
	return h.stageTraced(p, publishAt, "")
}

// stageTraced is stage with a trace context in the envelope.
func (h *harness) stageTraced(p sundialv1.Priority, publishAt time.Time, traceparent string) outbox.Row {
	job := uuid.New()
	sched := publishAt.Add(time.Minute)
	f := &sundialv1.Firing{
		ExecutionId: firing.ExecutionID(job, sched).String(), JobId: job.String(), Attempt: 1,
		Priority: p, ScheduledTime: timestamppb.New(sched), FireTime: timestamppb.New(sched),
		Traceparent: traceparent,
	}
	env, err := firing.Encode(f)
	require.NoError(h.t, err)
	r := outbox.Row{ExecutionID: f.ExecutionId, Attempt: 1, JobID: f.JobId, Priority: p, Envelope: env}
	r.ID = h.ob.add(r, publishAt)
	return r
}

// consume reads every firing topic from the start until n records arrived.
func (h *harness) consume(n int) []*kgo.Record {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Brokers()...),
		kgo.ConsumeTopics(firing.Topics{Prefix: h.cfg.TopicPrefix}.FireAll()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(h.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(h.t, ctx.Err(), "got %d of %d records", len(out), n)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func TestPublishesToPriorityTopicKeyedByJobThenDeletes(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	h.start()
	now := time.Now()
	want := map[string]outbox.Row{}
	for _, p := range []sundialv1.Priority{
		sundialv1.Priority_PRIORITY_CRITICAL, sundialv1.Priority_PRIORITY_HIGH,
		sundialv1.Priority_PRIORITY_MEDIUM, sundialv1.Priority_PRIORITY_LOW,
		sundialv1.Priority_PRIORITY_UNSPECIFIED, // published as medium
	} {
		r := h.stage(p, now)
		want[r.ExecutionID] = r
	}
	h.relay.Wake()
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)

	got := h.consume(len(want))
	require.Len(t, got, len(want))
	for _, rec := range got {
		f, err := firing.Decode(rec.Value)
		require.NoError(t, err)
		row, ok := want[f.ExecutionId]
		require.True(t, ok, "unexpected record %s", f.ExecutionId)
		require.Equal(t, firing.Topics{Prefix: "unit"}.Fire(row.Priority), rec.Topic)
		require.Equal(t, row.JobID, string(rec.Key))
		require.Equal(t, row.Envelope, rec.Value, "envelope must be published byte for byte")
	}
	require.Equal(t, float64(1), testutil.ToFloat64(h.relay.m.published.WithLabelValues("critical")))
	require.Equal(t, float64(2), testutil.ToFloat64(h.relay.m.published.WithLabelValues("medium")))
	require.Equal(t, float64(5), histCount(t, h.reg, "sundial_relay_publish_latency_seconds"))
}

// failProduce makes the brokers for which onNode is true answer every
// produce with a non-retriable error while failing is set.
func failProduce(c *kfake.Cluster, failing *atomic.Bool, onNode func(int32) bool) {
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if !failing.Load() || !onNode(c.CurrentNode()) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// A produce error deletes nothing; the rows are published once Kafka
// accepts them again.
func TestProduceErrorsKeepRows(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	var failing atomic.Bool
	failing.Store(true)
	failProduce(h.cluster, &failing, func(int32) bool { return true })
	h.start()
	for range 3 {
		h.stage(sundialv1.Priority_PRIORITY_HIGH, time.Now())
	}
	h.relay.Wake()
	errs := h.relay.m.publishErrors.WithLabelValues(kerr.InvalidRecord.Message)
	require.Eventually(t, func() bool { return testutil.ToFloat64(errs) >= 3 }, waitFor, 5*time.Millisecond)
	require.Equal(t, 3, h.ob.len(), "rows deleted without an ack")
	require.Zero(t, h.ob.deletedCount())

	failing.Store(false)
	// The loop is backing off after the failure and retries on its own.
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
	require.Len(t, h.consume(3), 3)
}

// When only some records fail, exactly the acknowledged rows are deleted.
// The low topic's partitions live on broker 1, the others on broker 0, and
// only broker 1 fails, so one batch gets both outcomes.
func TestPartialFailureDeletesOnlyAcknowledgedRows(t *testing.T) {
	topics := firing.Topics{Prefix: "unit"}
	h := newHarness(t, clock.Real{}, nil, kfake.NumBrokers(2), kfake.SeedTopics(2, topics.FireAll()...))
	low := topics.Fire(sundialv1.Priority_PRIORITY_LOW)
	for _, topic := range topics.FireAll() {
		node := int32(0)
		if topic == low {
			node = 1
		}
		for p := range int32(2) {
			require.NoError(t, h.cluster.MoveTopicPartition(topic, p, node))
		}
	}
	var failing atomic.Bool
	failing.Store(true)
	failProduce(h.cluster, &failing, func(node int32) bool { return node == 1 })
	h.start()
	var lows []outbox.Row
	for range 2 {
		h.stage(sundialv1.Priority_PRIORITY_CRITICAL, time.Now())
		lows = append(lows, h.stage(sundialv1.Priority_PRIORITY_LOW, time.Now()))
	}
	h.relay.Wake()
	require.Eventually(t, func() bool { return h.ob.len() == 2 }, waitFor, 5*time.Millisecond)
	for _, r := range lows {
		require.True(t, h.ob.has(r.ID), "failed low row %d was deleted", r.ID)
	}
	failing.Store(false)
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
}

// Claims that come back full are followed at once by the next claim,
// without waiting for a wake or the (hour-long) poll.
func TestLoopsWhileBatchesAreFull(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(c *Config) { c.BatchSize = 3 })
	for range 10 {
		h.stage(sundialv1.Priority_PRIORITY_MEDIUM, time.Now().Add(-time.Second))
	}
	h.start()
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
	require.Equal(t, float64(4), histCount(t, h.reg, "sundial_relay_claim_batch_rows"), "claims of 3, 3, 3, 1")
}

// A row staged ahead of time is published when it comes due, with no wake
// and no poll: the loop sleeps exactly until the next publish_at.
func TestWakesWhenStagedRowComesDue(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, fake, nil)
	r := h.stage(sundialv1.Priority_PRIORITY_HIGH, fake.Now().Add(90*time.Second))
	h.start()
	// Until it is due nothing is claimed, however often the loop runs.
	require.Eventually(t, func() bool { return h.ob.claimCount() >= 1 }, waitFor, 5*time.Millisecond)
	require.True(t, h.ob.has(r.ID))
	fake.Advance(90 * time.Second)
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
	require.Equal(t, float64(1), testutil.ToFloat64(h.relay.m.wakeups.WithLabelValues("due")))
}

// The due rows are counted every --depth-interval; the whole table, a scan
// of every row, only every --depth-total-interval (here once, at start).
func TestDepthCountsTheTotalRarely(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(c *Config) {
		c.DepthInterval = 10 * time.Millisecond
		c.DepthTotalInterval = time.Hour
	})
	h.stage(sundialv1.Priority_PRIORITY_LOW, time.Now().Add(time.Hour))
	h.stage(sundialv1.Priority_PRIORITY_LOW, time.Now().Add(time.Hour))
	h.start()
	require.Eventually(t, func() bool { due, _ := h.ob.depthCalls(); return due >= 10 }, waitFor, 5*time.Millisecond)
	_, total := h.ob.depthCalls()
	require.Equal(t, 1, total, "the total is counted once per --depth-total-interval")
	require.Equal(t, float64(2), testutil.ToFloat64(h.relay.m.depthTotal))
	require.Equal(t, float64(0), testutil.ToFloat64(h.relay.m.depthDue))
}

// With a short --depth-total-interval the total follows the table.
func TestDepthRecountsTheTotalAfterItsInterval(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(c *Config) {
		c.DepthInterval = 10 * time.Millisecond
		c.DepthTotalInterval = 30 * time.Millisecond
	})
	h.start()
	require.Eventually(t, func() bool { _, total := h.ob.depthCalls(); return total >= 1 }, waitFor, 5*time.Millisecond)
	h.stage(sundialv1.Priority_PRIORITY_LOW, time.Now().Add(time.Hour))
	require.Eventually(t, func() bool { return testutil.ToFloat64(h.relay.m.depthTotal) == 1 }, waitFor, 5*time.Millisecond)
}

func TestWakeCutsThePollShort(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	h.start()
	// Let the loop go idle (its first claim finds nothing).
	require.Eventually(t, func() bool { return h.ob.claimCount() >= 1 }, waitFor, 5*time.Millisecond)
	h.stage(sundialv1.Priority_PRIORITY_LOW, time.Now())
	h.relay.Wake()
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
}

func TestStopIsIdempotentAndSafeBeforeStart(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	h.relay.Stop()
	h.relay.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.Error(t, h.relay.Start(ctx), "a stopped relay must not start")
}

func TestConfigValidateNamesFlags(t *testing.T) {
	c := Config{TopicReplication: 0, BatchSize: 0, PublishTimeout: time.Millisecond}
	var p config.Problems
	c.Validate(&p)
	err := p.Err()
	require.Error(t, err)
	for _, flag := range []string{"postgres-dsn", "kafka-brokers", "topic-prefix", "topic-partitions",
		"topic-replication", "batch-size", "poll-interval", "publish-timeout", "depth-interval", "depth-total-interval", "node-id"} {
		require.Contains(t, err.Error(), flag+":")
	}
	d := Defaults()
	p = config.Problems{}
	d.Validate(&p)
	require.NoError(t, p.Err())
}

func histCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return float64(n)
		}
	}
	return 0
}

// A broker that stops answering must not pin the claim (and its row locks)
// beyond the publish timeout: the records fail, the rows stay, and they are
// published once the broker answers again.
func TestSilentBrokerReleasesClaimWithinPublishTimeout(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	var silent atomic.Bool
	silent.Store(true)
	h.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.cluster.KeepControl()
		if !silent.Load() {
			return nil, nil, false
		}
		return nil, nil, true // swallow the request: no reply
	})
	h.start()
	h.stage(sundialv1.Priority_PRIORITY_CRITICAL, time.Now())
	h.relay.Wake()
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(h.relay.m.publishErrors.WithLabelValues("timeout"))+
			testutil.ToFloat64(h.relay.m.publishErrors.WithLabelValues("canceled")) >= 1
	}, waitFor, 5*time.Millisecond)
	require.Equal(t, 1, h.ob.len())
	require.Zero(t, h.ob.deletedCount())
	silent.Store(false)
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, time.Minute, 10*time.Millisecond)
}

// The producer is idempotent with acks=all, and that is what makes a
// retried produce safe: here the broker appends the batch but answers that
// it fell short of its in-sync replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND:
// the client cannot know the record landed), the client sends the batch
// again, and the broker recognises the copy by its producer id and
// sequence. One record lands and the row is deleted. Without idempotence
// the retry would append a second copy.
func TestIdempotentProducerLandsARetriedBatchOnce(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	type produce struct {
		acks int16
		pids []int64
	}
	var (
		mu       sync.Mutex
		produces []produce
	)
	// Watch every produce request without answering it.
	h.cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		h.cluster.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		p := produce{acks: req.Acks}
		for _, tp := range req.Topics {
			for _, pp := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(pp.Records); err != nil {
					t.Errorf("produce request with an unreadable batch: %v", err)
					continue
				}
				p.pids = append(p.pids, b.ProducerID)
			}
		}
		mu.Lock()
		produces = append(produces, p)
		mu.Unlock()
		return nil, nil, false
	})
	lost := h.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicasAfterAppend})
	h.start()
	row := h.stage(sundialv1.Priority_PRIORITY_HIGH, time.Now())
	h.relay.Wake()
	require.Eventually(t, func() bool { return h.ob.len() == 0 }, waitFor, 5*time.Millisecond)
	require.Equal(t, 1, lost.Hits(), "the first append's answer was not the fault's")

	// Exactly one record in the topic: the end offsets add up to one.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	topics := firing.Topics{Prefix: h.cfg.TopicPrefix}.FireAll()
	ends, err := kadm.NewClient(h.kc).ListEndOffsets(ctx, topics...)
	require.NoError(t, err)
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		total += o.Offset
	})
	require.Equal(t, int64(1), total, "records in the firing topics")
	rec := h.consume(1)[0]
	f, err := firing.Decode(rec.Value)
	require.NoError(t, err)
	require.Equal(t, row.ExecutionID, f.GetExecutionId())
	require.Equal(t, 1, h.ob.deletedCount())

	mu.Lock()
	got := slices.Clone(produces)
	mu.Unlock()
	require.GreaterOrEqual(t, len(got), 2, "the batch was not sent again")
	for _, p := range got {
		require.Equal(t, int16(-1), p.acks, "a produce without acks=all")
		for _, pid := range p.pids {
			require.Equal(t, got[0].pids[0], pid, "a batch outside the one idempotent producer id")
		}
	}
	require.GreaterOrEqual(t, got[0].pids[0], int64(0), "batches carry no producer id: the producer is not idempotent")
}
