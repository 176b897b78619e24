// Package lagexporter exports the worker group's consumer lag as a
// Prometheus gauge, computed from Kafka's own offsets: for every partition of
// the priority topics, the end offset (high watermark) minus the group's
// committed offset. It is the figure KEDA's Kafka scaler computes, so the
// dashboards, the alerts and either autoscaler (KEDA, or an HPA reading
// this gauge through prometheus-adapter) read one definition of lag.
//
// Every worker exports the lag of the whole group, not only of the
// partitions assigned to it. There is no leader to elect and nothing to hand
// over on a rebalance, a partition no member owns (all workers crashed, or a
// rebalance in progress) still has a series, and the cost is three small
// admin requests per interval per worker. Queries take max by (group, topic,
// partition) to collapse the copies; see deploy/prometheus/rules.
//
// What the lag means for Sundial: a worker commits an offset only once every
// firing below it has finished, and it holds firings in memory until their
// instant, up to the prefetch window (2 minutes) ahead. So a healthy group's
// lag is about firings/s × (window + a few seconds); a lag that grows
// without the firing rate growing means the workers fall behind. The
// worker's own sundial_worker_consumer_lag_records is different: records it
// has not fetched yet, per assigned partition.
//
// Lag is not backlog. The firings a worker holds ahead of their instant
// (rate × window, by default the whole staging window) are uncommitted, and
// so are firings already fired behind a slow one. An autoscaler reading lag
// adds workers for work that is not due yet. So the exporter also exports
// the due backlog, sundial_worker_due_backlog_firings{group,source}: work
// whose instant has passed and that this worker has not started, the signal
// the Helm chart scales on by default:
//
//   - source="ready": the firings in this worker's ready queue, released at
//     their instant and waiting for an executor. Exact at the read.
//   - source="kafka": records of the partitions this worker owns that it has
//     not fetched yet and that the relay produced more than one staging
//     window (Config.OverdueAfter) before now. A firing is staged at most a
//     window before its instant and published when staged, so each of them
//     is past its instant. Estimated: a lower bound, from the broker's time
//     index (ListOffsets by timestamp: every record below the returned
//     offset is older than the cutoff; records above it produced later but
//     due already, such as catch-ups, are not counted). A partition no worker
//     owns is counted by none.
//
// Firings held in the worker's holders past their instant are not counted:
// the holder releases what is due at once (to the ready queue), and one held
// on purpose (a host's rate limit, a lease another delivery holds) is not
// work more workers would do sooner.
package lagexporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// DefaultInterval is how often the offsets are read: well below a scrape
// interval's multiple, and cheap for the brokers (three requests).
const DefaultInterval = 10 * time.Second

// Offsets is what the exporter asks Kafka; *kadm.Client implements it.
type Offsets interface {
	ListStartOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	ListEndOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	// ListOffsetsAfterMilli answers, per partition, the first offset
	// produced at or after the millisecond (the due backlog's cutoff).
	ListOffsetsAfterMilli(ctx context.Context, millisecond int64, topics ...string) (kadm.ListedOffsets, error)
	FetchOffsets(ctx context.Context, group string) (kadm.OffsetResponses, error)
}

// Config says whose lag to export.
type Config struct {
	Group  string
	Topics []string
	// Interval between reads; DefaultInterval when zero.
	Interval time.Duration
	// Timeout of one read; half the interval when zero.
	Timeout time.Duration
	// OverdueAfter is the staging window (the prefetcher's --window): a
	// record produced longer ago than this is a firing past its instant.
	// DefaultOverdueAfter when zero.
	OverdueAfter time.Duration
	// Ready is the number of firings in this worker's ready queue; nil
	// counts none.
	Ready func() int
	// Positions is, per partition this worker owns, the offset of the next
	// record it will fetch, or -1 if it has fetched none yet (it starts at
	// the group's committed offset). nil: the worker owns nothing.
	Positions func() map[string]map[int32]int64
	// Publish, when set, is given the group's lag per topic (summed over
	// its partitions) after each successful read: the worker's rollup
	// writes it to Postgres for the console without Prometheus.
	Publish func(lag map[string]int64)
}

// DefaultOverdueAfter is the prefetcher's default staging window.
const DefaultOverdueAfter = 2 * time.Minute

// Exporter is a lifecycle.Service that reads the offsets every Interval and
// sets the gauges.
type Exporter struct {
	lifecycle.Runner

	cfg    Config
	kafka  Offsets
	clock  clock.Clock
	logger *slog.Logger

	lag     *prometheus.GaugeVec
	due     *prometheus.GaugeVec
	updated prometheus.Gauge
	errors  prometheus.Counter
	// seen holds the label sets written by the last successful read, so
	// partitions that disappear (a deleted topic) lose their series.
	seen map[[2]string]bool
	// closeKafka closes a client Dial made, once; nil when the caller owns it.
	closeKafka func()
	closeOnce  sync.Once
}

// Dial connects its own Kafka client to brokers (the lag reads stay off
// the consumer's connections and never wait behind a fetch) and returns an
// exporter that closes it on Stop. opts are the client's TLS and SASL
// options, the same as the consumer's.
func Dial(cfg Config, brokers []string, clientID string, logger *slog.Logger, reg prometheus.Registerer, opts ...kgo.Opt) (*Exporter, error) {
	cl, err := kgo.NewClient(slices.Concat(opts, []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(clientID)})...)
	if err != nil {
		return nil, fmt.Errorf("lag exporter kafka client: %w", err)
	}
	e := New(cfg, kadm.NewClient(cl), clock.Real{}, logger, reg)
	e.closeKafka = cl.Close
	return e, nil
}

// Stop ends the reads and closes the client Dial made.
func (e *Exporter) Stop() {
	e.Runner.Stop()
	if e.closeKafka != nil {
		e.closeOnce.Do(e.closeKafka)
	}
}

// New registers the exporter's metrics with reg. Nothing is read until Start.
func New(cfg Config, kafka Offsets, clk clock.Clock, logger *slog.Logger, reg prometheus.Registerer) *Exporter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval / 2
	}
	if cfg.OverdueAfter <= 0 {
		cfg.OverdueAfter = DefaultOverdueAfter
	}
	group := prometheus.Labels{"group": cfg.Group}
	e := &Exporter{
		cfg: cfg, kafka: kafka, clock: clk, logger: logger, seen: map[[2]string]bool{},
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "sundial_worker_group_lag_records",
			Help:        "Records of the priority topics the worker group has not committed: end offset minus committed offset, per partition (the same for every worker).",
			ConstLabels: group,
		}, []string{"topic", "partition"}),
		due: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "sundial_worker_due_backlog_firings",
			Help:        "Firings past their instant that this worker has not started: ready (its ready queue, exact) and kafka (records of its partitions not fetched yet, produced more than a staging window ago: a lower bound). The autoscaling signal.",
			ConstLabels: group,
		}, []string{"source"}),
		updated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "sundial_worker_group_lag_updated_timestamp_seconds",
			Help:        "Unix time of the last successful read of the group's offsets.",
			ConstLabels: group,
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "sundial_worker_group_lag_errors_total",
			Help:        "Reads of the group's offsets that failed (the gauges keep their last values).",
			ConstLabels: group,
		}),
	}
	reg.MustRegister(e.lag, e.due, e.updated, e.errors)
	// Both series exist from the start, so the autoscaler's query has data
	// before the first read.
	e.due.WithLabelValues("ready").Set(0)
	e.due.WithLabelValues("kafka").Set(0)
	return e
}

// Start reads once in the background at once, then every Interval.
func (e *Exporter) Start(context.Context) error {
	return e.Run(func(ctx context.Context) error {
		for {
			e.poll(ctx)
			t := e.clock.NewTimer(e.cfg.Interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
		}
	})
}

func (e *Exporter) poll(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, e.cfg.Timeout)
	defer cancel()
	cutoff := e.clock.Now().Add(-e.cfg.OverdueAfter)
	lags, recent, err := e.read(ctx, cutoff)
	if err != nil {
		if parent.Err() == nil { // not merely stopping
			e.errors.Inc()
			e.logger.Warn("reading the group's offsets failed", "group", e.cfg.Group, "err", err)
		}
		// The ready queue needs no broker: it stays current, and the
		// Kafka part keeps its last value like the lag.
		e.due.WithLabelValues("ready").Set(float64(e.ready()))
		return
	}
	next := make(map[[2]string]bool, len(lags))
	for k, v := range lags {
		e.lag.WithLabelValues(k[0], k[1]).Set(float64(v))
		next[k] = true
	}
	for k := range e.seen {
		if !next[k] {
			e.lag.DeleteLabelValues(k[0], k[1])
		}
	}
	e.seen = next
	if e.cfg.Publish != nil {
		perTopic := make(map[string]int64, len(e.cfg.Topics))
		for _, t := range e.cfg.Topics {
			perTopic[t] = 0 // a topic with no lag is published as 0
		}
		for k, v := range lags {
			perTopic[k[0]] += v
		}
		e.cfg.Publish(perTopic)
	}
	// The positions and the ready queue are read after Kafka answered: a
	// position read earlier could count records fetched meanwhile.
	var positions map[string]map[int32]int64
	if e.cfg.Positions != nil {
		positions = e.cfg.Positions()
	}
	e.due.WithLabelValues("ready").Set(float64(e.ready()))
	e.due.WithLabelValues("kafka").Set(float64(overdueUnfetched(positions, recent)))
	e.updated.Set(float64(e.clock.Now().UnixMilli()) / 1000)
}

func (e *Exporter) ready() int {
	if e.cfg.Ready == nil {
		return 0
	}
	return e.cfg.Ready()
}

// partitionOffsets are, for one partition, the group's committed offset
// (or the log start where it never committed), the first offset produced
// at or after the overdue cutoff, and the end offset.
type partitionOffsets struct{ from, recent, end int64 }

// overdueUnfetched sums, over the partitions in positions, the records
// from the next one to fetch up to the first produced at or after the
// cutoff. Every record below that one is older than the cutoff (the
// broker's time index answers with the first offset whose timestamp, or an
// earlier record's, reached it), so each is a firing past its instant.
func overdueUnfetched(positions map[string]map[int32]int64, offs map[[2]string]partitionOffsets) int64 {
	var n int64
	for topic, parts := range positions {
		for p, pos := range parts {
			o, ok := offs[[2]string{topic, strconv.Itoa(int(p))}]
			if !ok {
				continue
			}
			if pos < 0 {
				pos = o.from // nothing fetched yet: the fetch starts at the commit
			}
			n += max(0, min(o.recent, o.end)-pos)
		}
	}
	return n
}

// read returns the lag per (topic, partition), and the offsets the due
// backlog is computed from. A partition the group has never committed
// counts from the log start, as the workers start there (reset to the
// earliest offset). Topics that do not exist yet are left out.
func (e *Exporter) read(ctx context.Context, cutoff time.Time) (map[[2]string]int64, map[[2]string]partitionOffsets, error) {
	ends, err := e.kafka.ListEndOffsets(ctx, e.cfg.Topics...)
	if err != nil {
		return nil, nil, err
	}
	starts, err := e.kafka.ListStartOffsets(ctx, e.cfg.Topics...)
	if err != nil {
		return nil, nil, err
	}
	recent, err := e.kafka.ListOffsetsAfterMilli(ctx, cutoff.UnixMilli(), e.cfg.Topics...)
	if err != nil {
		return nil, nil, err
	}
	committed, err := e.kafka.FetchOffsets(ctx, e.cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that never committed (some brokers say so instead of
		// answering with no offsets): everything is lag.
		committed, err = nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := map[[2]string]int64{}
	offs := map[[2]string]partitionOffsets{}
	for topic, parts := range ends {
		for p, end := range parts {
			if end.Err != nil {
				continue // unknown topic or partition: nothing to lag behind
			}
			from := int64(-1)
			if c, ok := committed.Lookup(topic, p); ok && c.Err == nil {
				from = c.At
			}
			if from < 0 {
				from = 0
				if s, ok := starts.Lookup(topic, p); ok && s.Err == nil {
					from = s.Offset
				}
			}
			k := [2]string{topic, strconv.Itoa(int(p))}
			out[k] = max(0, end.Offset-from)
			// No record at or after the cutoff: every record is older.
			r := end.Offset
			if o, ok := recent.Lookup(topic, p); ok && o.Err == nil && o.Offset >= 0 {
				r = o.Offset
			}
			offs[k] = partitionOffsets{from: from, recent: r, end: end.Offset}
		}
	}
	return out, offs, nil
}
