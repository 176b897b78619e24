// Package app composes the worker from its parts, so main and the
// in-process integration tests build exactly the same thing.
//
// Start order (stop is the reverse): connections, clock estimator, ledger
// recorder, holder, executor pool, consumer. The consumer stops first: it
// stops fetching and leaves the group, and its final revoke waits for the
// executing firings — which need the executors, the recorder, Redis and
// Cassandra still running.
package app

import (
	"context"

	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/admin"
	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/ledger"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/clockoffset"
	"github.com/sundialhq/sundial/services/worker/internal/consumer"
	"github.com/sundialhq/sundial/services/worker/internal/executor"
	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/lagexporter"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// Check is a readiness check.
type Check = admin.Check

// Worker is the composed worker.
type Worker struct {
	Services []lifecycle.Service
	Checks   map[string]Check

	Consumer  *consumer.Consumer
	Holder    *holder.Holder
	Queue     *readyq.Queue
	Estimator *clockoffset.Estimator // nil without --postgres-dsn
	Metrics   *metrics.Metrics
}

// Deps lets tests replace what the worker would otherwise connect to.
type Deps struct {
	// Ledger replaces the Cassandra writer.
	Ledger recorder.Ledger
	// Clock replaces the local wall clock (before --clock-offset).
	Clock clock.Clock
	// KafkaOpts are extra options for the consumer's client.
	KafkaOpts []kgo.Opt
}

// New builds the worker. Nothing runs until its Services are started; the
// connections it opens are closed by the first service's Stop (the last to
// stop).
func New(ctx context.Context, cfg Config, deps Deps, logger *slog.Logger, reg prometheus.Registerer) (w *Worker, err error) {
	secret, err := cfg.Secret()
	if err != nil {
		return nil, err
	}
	cl := &closer{}
	defer func() {
		if err != nil {
			cl.Stop()
		}
	}()
	m := metrics.New(reg)
	w = &Worker{Metrics: m, Checks: map[string]Check{}}
	w.Services = append(w.Services, cl)

	// --clock-offset skews this worker's own clock, as a badly synchronised
	// host would be; the estimator then measures and corrects it.
	local := deps.Clock
	if local == nil {
		local = clock.Real{}
	}
	if cfg.ClockOffset != 0 {
		skew := cfg.ClockOffset
		local = clock.Offset{Base: local, Offset: func() time.Duration { return skew }}
	}
	corrected := local
	var wake func()
	if cfg.PostgresDSN != "" {
		pg, err := clockoffset.NewPostgres(cfg.PostgresDSN)
		if err != nil {
			return nil, err
		}
		cl.add(pg.Close)
		w.Estimator = clockoffset.New(local, pg, clockoffset.Config{Interval: cfg.ClockSampleInterval}, logger.With("component", "clockoffset"),
			func(est clockoffset.Estimate) {
				m.ClockOffset.Set(est.Offset.Seconds())
				m.ClockRTT.Set(est.RTT.Seconds())
				if wake != nil {
					wake()
				}
			})
		corrected = w.Estimator.Clock()
		w.Services = append(w.Services, w.Estimator)
	}

	// Redis: leases and fences.
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	cl.add(func() { _ = rdb.Close() })
	leases := lease.New(rdb, lease.WithPrefix(cfg.RedisKeyPrefix))
	w.Checks["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }

	// The ledger.
	led := deps.Ledger
	if led == nil {
		s, err := ledger.Connect(ledger.ConnectConfig{Hosts: splitList(cfg.CassandraHosts)})
		if err != nil {
			return nil, err
		}
		cl.add(s.Close)
		s = ledger.Instrumented(ledger.Retrying(s, ledger.DefaultRetryPolicy), reg)
		if cfg.LedgerMigrate {
			if err := ledger.Migrate(ctx, s, cfg.CassandraKeyspace, ledger.DefaultReplication); err != nil {
				return nil, err
			}
		}
		led = ledger.NewWriter(s, cfg.CassandraKeyspace)
		w.Checks["cassandra"] = func(ctx context.Context) error {
			it := s.Iter(ctx, ledger.Statement{CQL: "SELECT release_version FROM system.local", Idempotent: true})
			var v string
			it.Scan(&v)
			return it.Close()
		}
	}
	rec := recorder.New(led, recorder.DefaultConfig, logger.With("component", "recorder"), recorder.Metrics{
		Written: func(r string) { m.LedgerWrites.WithLabelValues(r).Inc() },
	})
	w.Services = append(w.Services, rec)

	// Targets.
	route := target.Router{HTTP: target.NewHTTP(nil, secret)}
	topics := firing.Topics{Prefix: cfg.TopicPrefix}
	if allow := cfg.AllowKafkaTargets; allow != "" {
		prod, err := kgo.NewClient(
			kgo.SeedBrokers(splitList(cfg.KafkaBrokers)...),
			kgo.ClientID(cfg.WorkerID+"-targets"),
			// Every firing is produced the moment it is due: no linger.
			kgo.ProducerLinger(0),
			// acks=all with the idempotent producer (franz-go's default):
			// an acknowledged firing survives a broker failure, and a
			// retried produce is not duplicated.
			kgo.RequiredAcks(kgo.AllISRAcks()),
			// Job topics are created by their owners; a typo must fail
			// the attempt, not create a topic.
			kgo.UnknownTopicRetries(2),
		)
		if err != nil {
			return nil, fmt.Errorf("kafka target producer: %w", err)
		}
		cl.add(prod.Close)
		route.Kafka = target.NewKafka(prod, secret, cfg.TopicPrefix+".", splitList(allow))
	}

	q := readyq.New(readyq.WithDepthObserver(func(p sundialv1.Priority, d int) {
		m.ReadyDepth.WithLabelValues(firing.PriorityName(p)).Set(float64(d))
	}))
	w.Queue = q
	h := holder.New(corrected, q.Push)
	wake = h.Wake
	w.Holder = h
	metrics.Held(reg, h.Len)
	w.Services = append(w.Services, h)

	pool := executor.New(executor.Config{
		Executors: cfg.Executors, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, DoneTTL: cfg.DoneTTL,
	}, q, h, leases, route, rec, corrected, m, logger.With("component", "executor"))
	w.Services = append(w.Services, pool)

	w.Consumer = consumer.New(consumer.Config{
		Brokers:        splitList(cfg.KafkaBrokers),
		Topics:         topics.FireAll(),
		Group:          cfg.Group,
		ClientID:       cfg.WorkerID,
		SessionTimeout: cfg.SessionTimeout,
		DrainTimeout:   cfg.RevokeDrainTimeout,
		CommitInterval: cfg.CommitInterval,
		MaxHeld:        cfg.MaxHeld,
		Opts:           deps.KafkaOpts,
	}, h, m, logger.With("component", "consumer"))
	w.Services = append(w.Services, w.Consumer)
	w.Checks["kafka"] = w.Consumer.Ping

	// The group's lag from Kafka's offsets, for dashboards and autoscalers.
	lag, err := lagexporter.Dial(lagexporter.Config{Group: cfg.Group, Topics: topics.FireAll()},
		splitList(cfg.KafkaBrokers), cfg.WorkerID+"-lag", logger.With("component", "lagexporter"), reg)
	if err != nil {
		return nil, err
	}
	w.Services = append(w.Services, lag)
	return w, nil
}

// closer closes connections when stopped; it is the first service started
// and so the last stopped.
type closer struct{ fns []func() }

func (c *closer) add(f func())                    { c.fns = append(c.fns, f) }
func (c *closer) Start(ctx context.Context) error { return nil }
func (c *closer) Stop() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}
