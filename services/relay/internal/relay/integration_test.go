//go:build integration

package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/relay/internal/itest"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

// realRelay starts a relay on the real Postgres pool and the given brokers
// (the real Kafka unless a test passes kfake's).
func realRelay(t *testing.T, dsn string, prefix string, brokers []string, tweak func(*Config)) *Relay {
	t.Helper()
	cfg := Defaults()
	cfg.PostgresDSN = dsn
	cfg.KafkaBrokers = joinComma(brokers)
	cfg.TopicPrefix = prefix
	cfg.TopicReplication = 1
	cfg.NodeID = t.Name()
	cfg.PollInterval = time.Hour // tests that rely on polling set it
	if tweak != nil {
		tweak(&cfg)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	kc, err := NewProducer(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	var listener *outbox.Listener
	if cfg.Listen {
		listener = &outbox.Listener{Config: pcfg.ConnConfig.Copy(), Logger: logger, Clock: clock.Real{}}
	}
	r := New(cfg, Deps{Outbox: FromStore(outbox.NewStore(pool)), Kafka: kc, Listener: listener,
		Logger: logger, Registry: prometheus.NewRegistry()})
	require.NoError(t, r.Start(ctx))
	t.Cleanup(r.Stop)
	return r
}

func joinComma(s []string) string {
	out := ""
	for i, b := range s {
		if i > 0 {
			out += ","
		}
		out += b
	}
	return out
}

func emptyWithin(t *testing.T, pool *pgxpool.Pool, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return itest.Count(t, pool) == 0 }, d, 20*time.Millisecond,
		"outbox not drained")
}

func TestIntegrationPublishesToRightTopicWithKeyAndDeletes(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	r := realRelay(t, dsn, prefix, itest.Brokers(t), nil)
	staged := itest.Stage(t, pool, 40, 0, true)
	emptyWithin(t, pool, time.Minute)

	byExec := map[string]itest.Staged{}
	for _, s := range staged {
		byExec[s.ExecutionID] = s
	}
	recs := itest.ReadAll(t, prefix)
	require.Len(t, recs, len(staged))
	for _, rec := range recs {
		f, err := firing.Decode(rec.Value)
		require.NoError(t, err)
		s, ok := byExec[f.ExecutionId]
		require.True(t, ok)
		require.Equal(t, firing.Topics{Prefix: prefix}.Fire(s.Priority), rec.Topic)
		require.Equal(t, s.JobID, string(rec.Key))
		require.Equal(t, s.Envelope, rec.Value)
		delete(byExec, f.ExecutionId)
	}
	require.Empty(t, byExec)
	require.Equal(t, float64(10), testutil.ToFloat64(r.m.published.WithLabelValues("low")))
}

// The relay creates every topic the platform needs, the dead-letter topic
// included (workers only produce to it).
func TestIntegrationCreatesFiringAndDeadLetterTopics(t *testing.T) {
	dsn, _ := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	realRelay(t, dsn, prefix, itest.Brokers(t), nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(itest.Brokers(t)...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp := firing.Topics{Prefix: prefix}
	want := append(tp.FireAll(), tp.DLQ())
	// A topic just created reaches the broker's metadata a moment later
	// (its partitions' leaders are elected after CreateTopics answers), so
	// each must show up with partitions within a bound, not at once.
	adm := kadm.NewClient(cl)
	var missing []string
	for {
		details, err := adm.ListTopics(ctx, want...)
		require.NoError(t, err)
		missing = missing[:0]
		for _, topic := range want {
			if d, ok := details[topic]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				missing = append(missing, fmt.Sprintf("%s: %+v", topic, d))
			}
		}
		if len(missing) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topics missing or without partitions after 30 s: %v", missing)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Two relays over one outbox: SKIP LOCKED gives them disjoint batches, so
// with nothing failing each row is published exactly once.
func TestIntegrationTwoRelaysPublishEachRowOnce(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	small := func(c *Config) { c.BatchSize = 25; c.PollInterval = 50 * time.Millisecond }
	a := realRelay(t, dsn, prefix, itest.Brokers(t), small)
	b := realRelay(t, dsn, prefix, itest.Brokers(t), small)
	const n = 2000
	var staged []itest.Staged
	for range n / 200 {
		staged = append(staged, itest.Stage(t, pool, 200, 0, true)...)
	}
	emptyWithin(t, pool, 2*time.Minute)

	count := map[string]int{}
	for _, rec := range itest.ReadAll(t, prefix) {
		f, err := firing.Decode(rec.Value)
		require.NoError(t, err)
		count[f.ExecutionId]++
	}
	require.Len(t, count, n)
	for _, s := range staged {
		require.Equal(t, 1, count[s.ExecutionID], "execution %s", s.ExecutionID)
	}
	pa := sumCounter(a.m.published)
	pb := sumCounter(b.m.published)
	t.Logf("relay a published %v rows, relay b %v", pa, pb)
	require.Equal(t, float64(n), pa+pb)
	require.NotZero(t, pa)
	require.NotZero(t, pb)
}

func sumCounter(v *prometheus.CounterVec) float64 {
	total := 0.0
	for _, p := range []sundialv1.Priority{1, 2, 3, 4} {
		total += testutil.ToFloat64(v.WithLabelValues(firing.PriorityName(p)))
	}
	return total
}

// With an hour-long poll, only the NOTIFY can wake the relay.
func TestIntegrationNotifyWakesTheRelay(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	r := realRelay(t, dsn, prefix, itest.Brokers(t), nil)
	// The listener connects, then wakes the loop once; wait for it to be
	// subscribed so the NOTIFY below cannot be missed.
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.m.listening) == 1 }, time.Minute, 10*time.Millisecond)
	// That first wake is spent once the loop has idled after it; from then
	// on each wake counted is a NOTIFY's. (Counting before it is spent
	// raced: the loop's first cycle could claim the rows staged below while
	// the connect wake still sat in the channel, and the outbox emptied
	// with no wake counted yet.)
	notifies := func() float64 { return testutil.ToFloat64(r.m.wakeups.WithLabelValues("notify")) }
	require.Eventually(t, func() bool { return notifies() >= 1 }, time.Minute, 10*time.Millisecond)
	itest.Stage(t, pool, 5, 0, true)
	emptyWithin(t, pool, time.Minute)
	// Whether the rows' NOTIFY woke the idle loop or arrived while a cycle
	// was already claiming them, the loop takes its wake: without the
	// NOTIFY nothing but an hour-long poll could wake it.
	require.Eventually(t, func() bool { return notifies() >= 2 }, time.Minute, 10*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(r.m.wakeups.WithLabelValues("poll")))
}

// No LISTEN and no NOTIFY: the poll alone finds the rows.
func TestIntegrationPollingWithoutNotify(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	r := realRelay(t, dsn, prefix, itest.Brokers(t), func(c *Config) {
		c.Listen = false
		c.PollInterval = 200 * time.Millisecond
	})
	// Staged once the relay is idle between polls (its first claim, after
	// the topics were ensured, found nothing): staged earlier, that first
	// claim publishes the rows and no poll is needed (a CI run, 0 polls).
	require.Eventually(t, func() bool { return testutil.ToFloat64(r.m.wakeups.WithLabelValues("poll")) >= 1 },
		time.Minute, 10*time.Millisecond, "the relay never polled")
	itest.Stage(t, pool, 5, 0, false)
	// Without NOTIFY only a poll can find them: within seconds at a
	// 200 ms poll, where the default hour would leave them.
	emptyWithin(t, pool, 10*time.Second)
}

// A row staged ahead of its publish_at waits for it, then goes without a
// poll or a NOTIFY: the claim told the loop when it comes due.
func TestIntegrationStagedRowPublishedWhenDue(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	// Staged before the relay starts, so its first claim sees the row not
	// yet due: with no NOTIFY and an hour-long poll, only the claim's
	// "next due" can wake it (staged after, a first claim that ran first
	// would find nothing and sleep the hour).
	itest.Stage(t, pool, 1, 3*time.Second, false)
	r := realRelay(t, dsn, prefix, itest.Brokers(t), func(c *Config) { c.Listen = false })
	emptyWithin(t, pool, time.Minute)
	// At least one "due" wake-up (an early one, by the claim's own latency,
	// is followed by another); the hour-long poll never fired.
	require.GreaterOrEqual(t, testutil.ToFloat64(r.m.wakeups.WithLabelValues("due")), float64(1))
	require.Zero(t, testutil.ToFloat64(r.m.wakeups.WithLabelValues("poll")))
	require.Len(t, itest.ReadAll(t, prefix), 1)
}

// Fault injection on the real outbox: Kafka (kfake) rejects every produce,
// the rows stay in Postgres untouched, and go once Kafka accepts them.
func TestIntegrationProduceErrorsLeaveRowsInPostgres(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer cluster.Close()
	var failing atomic.Bool
	failing.Store(true)
	failProduce(cluster, &failing, func(int32) bool { return true })
	r := realRelay(t, dsn, "unit", cluster.ListenAddrs(), func(c *Config) { c.PublishTimeout = time.Second })
	itest.Stage(t, pool, 8, 0, true)
	require.Eventually(t, func() bool { return errorsSeen(r) >= 8 },
		time.Minute, 10*time.Millisecond)
	require.Equal(t, 8, itest.Count(t, pool))
	failing.Store(false)
	emptyWithin(t, pool, time.Minute)

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics(firing.Topics{Prefix: "unit"}.FireAll()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got < 8 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		got += fs.NumRecords()
	}
}

func errorsSeen(r *Relay) float64 {
	return testutil.ToFloat64(r.m.publishErrors.WithLabelValues(kerr.InvalidRecord.Message))
}

// On the real broker the relay publishes as one idempotent producer: a
// broker keeps producer state (id, last sequence) per partition only for
// idempotent producers, so every partition the relay wrote to lists one
// producer, the same everywhere, whose last sequence counts that
// partition's records (sequences start at zero).
func TestIntegrationRelayProducesIdempotently(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	realRelay(t, dsn, prefix, itest.Brokers(t), nil)
	itest.Stage(t, pool, 24, 0, true)
	emptyWithin(t, pool, time.Minute)
	type tp struct {
		topic     string
		partition int32
	}
	records := map[tp]int32{}
	for _, rec := range itest.ReadAll(t, prefix) {
		records[tp{rec.Topic, rec.Partition}]++
	}
	require.NotEmpty(t, records)

	cl, err := kgo.NewClient(kgo.SeedBrokers(itest.Brokers(t)...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var topics kadm.TopicsSet
	for _, topic := range (firing.Topics{Prefix: prefix}).FireAll() {
		topics.Add(topic)
	}
	described, err := kadm.NewClient(cl).DescribeProducers(ctx, topics)
	require.NoError(t, err)
	producerID := int64(-1)
	seen := 0
	described.EachPartition(func(p kadm.DescribedProducersPartition) {
		require.NoError(t, p.Err, "%s/%d", p.Topic, p.Partition)
		n := records[tp{p.Topic, p.Partition}]
		if n == 0 {
			require.Empty(t, p.ActiveProducers, "%s/%d has producers but no records", p.Topic, p.Partition)
			return
		}
		seen++
		require.Len(t, p.ActiveProducers, 1, "%s/%d: producers %v", p.Topic, p.Partition, p.ActiveProducers)
		for _, pr := range p.ActiveProducers {
			require.GreaterOrEqual(t, pr.ProducerID, int64(0))
			if producerID < 0 {
				producerID = pr.ProducerID
			}
			require.Equal(t, producerID, pr.ProducerID, "%s/%d written by another producer", p.Topic, p.Partition)
			require.Equal(t, n-1, pr.LastSequence, "%s/%d: last sequence for %d records", p.Topic, p.Partition, n)
		}
	})
	require.Equal(t, len(records), seen, "partitions with records that the broker described")
	t.Logf("%d partitions written by idempotent producer %d", seen, producerID)
}
