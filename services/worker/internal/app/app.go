// Package app composes the worker from its parts, so main and the
// in-process integration tests build exactly the same thing.
//
// Start order (stop is the reverse): connections, clock estimator, ledger
// recorder, notifier, poison forwarder, GOMAXPROCS governor, fire holder, prepare holder,
// prepare stage, executor pool (with its settlers), consumer. The consumer stops first: it
// stops fetching and leaves the group, and its final revoke waits for the
// executing firings — which need the executors, the recorder, Redis and
// Cassandra still running.
package app

import (
	"context"

	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/admin"
	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/ledger"
	"github.com/sundialhq/sundial/pkg/ledgerpending"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/netpolicy"
	"github.com/sundialhq/sundial/pkg/secrets"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/clockoffset"
	"github.com/sundialhq/sundial/services/worker/internal/consumer"
	"github.com/sundialhq/sundial/services/worker/internal/executor"
	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/lagexporter"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/notify"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/procs"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/versions"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Check is a readiness check.
type Check = admin.Check

// Worker is the composed worker.
type Worker struct {
	Services []lifecycle.Service
	Checks   map[string]Check

	Consumer *consumer.Consumer
	// Holder is where the consumer puts arriving firings: the prepare
	// holder, with the fire holder counted in its Len.
	Holder    *stages
	Queue     *readyq.Queue
	Estimator *clockoffset.Estimator // nil without --postgres-dsn
	Metrics   *metrics.Metrics
	// Breakers is the per-host circuit breaker (nil when disabled).
	Breakers *hostguard.Breakers
}

// Deps lets tests replace what the worker would otherwise connect to.
type Deps struct {
	// Ledger replaces the Cassandra writer.
	Ledger recorder.Ledger
	// Clock replaces the local wall clock (before --clock-offset).
	Clock clock.Clock
	// KafkaOpts are extra options for the consumer's client.
	KafkaOpts []kgo.Opt
	// Environ is the process environment (os.Environ); leftover
	// SUNDIAL_SECRET_* variables (no longer read: secrets are per tenant)
	// are warned about. main passes it so nothing deeper reads the
	// environment.
	Environ []string
	// Tracer traces firings through the worker; nil: tracing off.
	Tracer trace.Tracer
	// RedisDialer replaces how connections to Redis are made (tests cut
	// a worker off from Redis with it).
	RedisDialer func(ctx context.Context, network, addr string) (net.Conn, error)
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
	watched, err := cfg.WatchedJobs()
	if err != nil {
		return nil, fmt.Errorf("metrics-job-ids: %w", err)
	}
	m := metrics.New(reg, cfg.MetricsMaxTenants, watched...)
	w = &Worker{Metrics: m, Checks: map[string]Check{}}
	w.Services = append(w.Services, cl)

	// --clock-offset skews this worker's own clock, as a badly synchronised
	// host would be; the estimator then measures and corrects it.
	// The worker's own clock is steady: a step of the host's wall clock
	// while it runs does not move it (clock.Steady); the offset estimator
	// corrects it against the database, which takes a step in at its next
	// sample instead of firing early or late until then.
	local := deps.Clock
	if local == nil {
		local = clock.NewSteady()
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

	// Redis: leases, fences, overlap markers, delivery counts.
	ropts := &redis.Options{Addr: cfg.RedisAddr, Dialer: deps.RedisDialer}
	if err := cfg.RedisSecurity.Apply(ropts); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	rdb := redis.NewClient(ropts)
	cl.add(func() { _ = rdb.Close() })
	lopts := []lease.Option{lease.WithPrefix(cfg.RedisKeyPrefix), lease.WithMaxDeliveries(cfg.MaxDeliveries), lease.WithMarkerTTL(cfg.DoneTTL)}
	if cfg.LivenessTTL > 0 {
		lopts = append(lopts, lease.WithLiveness())
	}
	leases := lease.New(rdb, lopts...)
	if cfg.LivenessTTL > 0 {
		// Before any lease is taken, stopped after the last is let go.
		w.Services = append(w.Services, &liveness{store: leases, worker: cfg.WorkerID, ttl: cfg.LivenessTTL, clk: local, logger: logger.With("component", "liveness")})
	}
	w.Checks["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	// Markers Redis could not take wait here and are written when it
	// answers; started before the executors, stopped after them.
	marks := settle.NewMarks(leases, settle.MarksConfig{}, local, logger.With("component", "marks"))
	marks.Deferred = func(n int) { m.SettleErrors.WithLabelValues("marker").Add(float64(n)) }
	w.Services = append(w.Services, marks)

	// The ledger.
	led := deps.Ledger
	// recorded tells the prepare stage whether an attempt a dead delivery
	// leased and never marked is in the ledger already (so not to fire it
	// again); only with the real ledger.
	var recorded func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool)
	// hasRecord tells the prepare stage whether the ledger holds a final
	// record of a firing's attempt, for copies found done by their marker.
	var hasRecord func(ctx context.Context, f *sundialv1.Firing) (bool, error)
	if led == nil {
		ccfg := ledger.ConnectConfig{Hosts: splitList(cfg.CassandraHosts)}
		if err := cfg.CassandraSecurity.Apply(&ccfg); err != nil {
			return nil, fmt.Errorf("cassandra: %w", err)
		}
		s, err := ledger.Connect(ccfg)
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
		reader := ledger.NewReader(s, cfg.CassandraKeyspace)
		recorded = func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
			st, err := attemptStatus(ctx, reader, f)
			if err != nil || !attemptOutcome(st) {
				return 0, false
			}
			return st, true
		}
		hasRecord = func(ctx context.Context, f *sundialv1.Firing) (bool, error) {
			st, err := attemptStatus(ctx, reader, f)
			return st != sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, err
		}
		w.Checks["cassandra"] = func(ctx context.Context) error {
			it := s.Iter(ctx, ledger.Statement{CQL: "SELECT release_version FROM system.local", Idempotent: true})
			var v string
			it.Scan(&v)
			return it.Close()
		}
	}
	recCfg := recorder.DefaultConfig
	recCfg.RunningDelay = cfg.LedgerRunningDelay
	recCfg.Linger = cfg.LedgerLinger
	recCfg.Quiet = cfg.LedgerQuiet
	if cfg.LedgerGroupSize > 0 {
		recCfg.GroupSize = cfg.LedgerGroupSize
	}
	// With Postgres, records Cassandra keeps refusing go to ledger_pending
	// (the pool is made below, before anything starts).
	var spillTo *pgxpool.Pool
	if cfg.PostgresDSN != "" {
		recCfg.SpillAfter = cfg.LedgerSpillAfter
		recCfg.Spill = func(ctx context.Context, as []*sundialv1.ExecutionAttempt) error {
			return ledgerpending.Spill(ctx, spillTo, as)
		}
	}
	rec := recorder.New(led, recCfg, logger.With("component", "recorder"), recorder.Metrics{
		Written: func(r string) { m.LedgerWrites.WithLabelValues(r).Inc() },
	})
	w.Services = append(w.Services, rec)

	// The producer: dead letters, and Kafka targets when allowed.
	topics := firing.Topics{Prefix: cfg.TopicPrefix}
	// TLS and SASL, for every Kafka client: the producer, the consumer and
	// the lag exporter. Clipped so each append copies.
	kafkaSec, err := cfg.KafkaSecurity.Opts()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	kafkaSec = slices.Clip(kafkaSec)
	prod, err := kgo.NewClient(append(kafkaSec,
		kgo.SeedBrokers(splitList(cfg.KafkaBrokers)...),
		kgo.ClientID(cfg.WorkerID+"-producer"),
		// Every firing is produced the moment it is due: no linger.
		kgo.ProducerLinger(0),
		// acks=all with the idempotent producer (franz-go's default):
		// an acknowledged firing or dead letter survives a broker
		// failure, and a retried produce is not duplicated.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Job topics are created by their owners; a typo must fail the
		// attempt, not create a topic.
		kgo.UnknownTopicRetries(2),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	cl.add(prod.Close)
	dlq := settle.NewKafkaDLQ(prod, topics.DLQ())

	// Outbound requests on behalf of jobs: the address policy at dial time,
	// secrets in headers, per-host breakers.
	policy, err := netpolicy.New(splitList(cfg.AllowTargetAddrs), splitList(cfg.DenyTargetAddrs),
		netpolicy.OnRefused(func(reason string) { m.RefusedAddresses.WithLabelValues(reason).Inc() }))
	if err != nil {
		return nil, err
	}
	tr := target.NewTransport(policy)
	cl.add(tr.CloseIdleConnections)
	var sources []secrets.Source
	if cfg.SecretsDir != "" {
		sources = append(sources, secrets.Dir(cfg.SecretsDir))
		// Secrets are per tenant (<dir>/<tenant>/<name>); a file of the
		// old, unscoped layout served every tenant and now serves none.
		if flat, err := secrets.Dir(cfg.SecretsDir).Unscoped(); err == nil && len(flat) > 0 {
			logger.Warn("secrets-dir holds files outside a tenant directory; no job resolves them (move each to <secrets-dir>/<tenant>/<name>)", "files", flat)
		}
	}
	if vars := secrets.EnvFromEnviron(deps.Environ); len(vars) > 0 {
		logger.Warn("SUNDIAL_SECRET_* variables are no longer read: they cannot say which tenant a secret belongs to (write <secrets-dir>/<tenant>/<name> instead)", "variables", vars)
	}
	resolver := secrets.NewResolver(local, 0, sources...)
	keyring, err := newKeyring(ctx, cfg, secret, corrected, logger.With("component", "signing"), cl)
	if err != nil {
		return nil, err
	}
	w.Services = append(w.Services, keyring) // loads the keys before anything fires
	route := target.Router{HTTP: target.NewHTTP(target.NewClient(tr), secret, target.WithSecrets(resolver), target.WithPolicy(policy), target.WithSigner(keyring))}
	if allow := cfg.AllowKafkaTargets; allow != "" {
		route.Kafka = target.NewKafka(prod, secret, cfg.TopicPrefix+".", splitList(allow)).WithSigner(keyring)
	}
	fire := hostguard.NewBreakers(route, hostguard.BreakerConfig{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown}, corrected, hostguard.BreakerMetrics{
		Transition: func(from, to hostguard.State) {
			if from != hostguard.Closed {
				m.Breakers.WithLabelValues(from.String()).Dec()
			}
			if to != hostguard.Closed {
				m.Breakers.WithLabelValues(to.String()).Inc()
			}
			m.BreakerTransitions.WithLabelValues(to.String()).Inc()
			logger.Info("circuit breaker state changed", "from", from.String(), "to", to.String())
		},
		Rejected: m.BreakerRejections.Inc,
	})
	w.Breakers, _ = fire.(*hostguard.Breakers)

	nt := notify.New(target.NewClient(tr), secret, policy, corrected, notify.DefaultConfig,
		notify.Metrics{Result: func(r string) { m.Notifications.WithLabelValues(r).Inc() }}, logger.With("component", "notify"))
	nt.WithSigner(keyring) // a callback goes to the tenant's endpoint: its keys sign it
	w.Services = append(w.Services, nt)
	raw := settle.NewRawForwarder(dlq, local, logger.With("component", "poison"), func(r string) { m.PoisonRecords.WithLabelValues(r).Inc() })
	w.Services = append(w.Services, raw)

	// The three stages: prepare (the prepare holder releases each firing
	// --prepare-lead before its instant; the stage leases it, many per
	// Redis call), fire (the fire holder releases it at its instant into
	// the ready queue; an executor sends the request) and settle (the
	// executors' settlers write markers and records in groups).
	// The admission rule: the less urgent priorities may occupy only part
	// of the executors, so a HIGH or CRITICAL firing never waits for slow
	// LOW or MEDIUM requests to end.
	q := readyq.New(readyq.WithLane(readyq.FairLanes), readyq.WithDepthObserver(func(p sundialv1.Priority, d int) {
		m.ReadyDepth.WithLabelValues(firing.PriorityName(p)).Set(float64(d))
	}), readyq.WithLimits(readyq.LimitsOf(cfg.Executors, cfg.HighExecutorsPercent, cfg.MediumExecutorsPercent, cfg.LowExecutorsPercent)))
	w.Queue = q
	gov, err := procsGovernor(cfg, local, m, logger.With("component", "procs"))
	if err != nil {
		return nil, err
	}
	w.Services = append(w.Services, gov)
	fireHolder := holder.New(corrected, q.Push, holder.WithTenantTurns(), holder.WithReleased(func(n int) {
		if n >= herdChunk {
			gov.Busy()
		}
	}))
	var prep *prepare.Stage
	prepHolder := holder.New(corrected, func(it *work.Item) { prep.Add(it) }, holder.WithLead(func(it *work.Item) time.Duration { return prep.Lead(it) }),
		holder.WithBatchSink(func(items []*work.Item) { prep.AddMany(items) }))
	prep = prepare.New(prepare.Config{
		Lead: cfg.PrepareLead, Grain: cfg.PrepareGrain, Batch: cfg.PrepareBatch, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, Unmarked: marks.Pending,
		Recorded: recorded, DoneTTL: cfg.DoneTTL, HasRecord: hasRecord,
		RecordLost: func(a *sundialv1.ExecutionAttempt, done func()) bool {
			return rec.Final(context.Background(), a, true, done)
		},
	}, leases, prepare.Routes{Fire: fireHolder.Add, Now: q.Push, Again: prepHolder.Add}, corrected, m, logger.With("component", "prepare"))
	wake = func() { prepHolder.Wake(); fireHolder.Wake() }
	w.Holder = &stages{prepare: prepHolder, fire: fireHolder, ready: q}
	metrics.Held(reg, w.Holder.Len)
	w.Services = append(w.Services, fireHolder, prepHolder, prep)

	// Changes announced after a firing was leased ahead reach it at its
	// instant.
	watch := versions.New(rdb, leases.VersionsChannel(), local, logger.With("component", "versions"))
	w.Services = append(w.Services, watch)
	pd := executor.Deps{
		Queue: q, Holder: fireHolder, Prepare: prep, Leaser: leases, Target: fire, Recorder: rec, Notifier: nt,
		Versions: watch, Marks: marks, Tracer: deps.Tracer, Clock: corrected, Metrics: m, Logger: logger.With("component", "executor"),
	}
	if l := hostguard.NewLimiter(cfg.HostRate, cfg.HostBurst); l != nil {
		pd.Limiter = l
	}
	if cfg.PostgresDSN != "" {
		pcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
		if err != nil {
			return nil, fmt.Errorf("postgres-dsn: %w", err)
		}
		// Retries, dead letters and completions: each is a short
		// transaction a settler waits for, so a herd of one-off jobs
		// needs enough connections for Postgres to group their commits.
		if cfg.PostgresMaxConns > 0 {
			pcfg.MaxConns = int32(cfg.PostgresMaxConns)
		}
		pg, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("postgres pool: %w", err)
		}
		cl.add(pg.Close)
		spillTo = pg
		pd.Settler = settle.New(settle.NewPostgres(pg), dlq, corrected, settle.Config{}, settle.Metrics{
			RetryScheduled: func(pr, class string) { m.RetriesScheduled.WithLabelValues(pr, class).Inc() },
			DeadLetter:     func(class string) { m.DeadLetters.WithLabelValues(class).Inc() },
			JobCompleted:   func(o string) { m.JobCompletions.WithLabelValues(o).Inc() },
			StepError:      func(step string) { m.SettleErrors.WithLabelValues(step).Inc() },
		}, logger.With("component", "settle"))
	} else {
		logger.Warn("no --postgres-dsn: failed attempts are recorded FAILED and neither retried nor dead-lettered")
	}
	pool := executor.New(executor.Config{
		Executors: cfg.Executors, CriticalExecutors: cfg.CriticalExecutors, SettleBatch: cfg.SettleBatch, SettleLinger: cfg.SettleLinger, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, DoneTTL: cfg.DoneTTL,
		MaxDeliveries: cfg.MaxDeliveries,
	}, pd)
	w.Services = append(w.Services, pool)

	w.Consumer = consumer.New(consumer.Config{
		Brokers:        splitList(cfg.KafkaBrokers),
		Topics:         topics.FireAll(),
		Group:          cfg.Group,
		ClientID:       cfg.WorkerID,
		SessionTimeout: cfg.SessionTimeout,
		DrainTimeout:   cfg.RevokeDrainTimeout,
		Clock:          corrected,
		CatchUpRate:    cfg.CatchUpRate,
		CommitInterval: cfg.CommitInterval,
		MaxHeld:        cfg.MaxHeld,
		FetchAhead:     cfg.FetchAhead,
		Unpaused:       []string{topics.Fire(sundialv1.Priority_PRIORITY_CRITICAL)},
		HeldShares:     heldShares(topics, cfg),
		Poison:         raw.Forward,
		Opts:           append(kafkaSec, deps.KafkaOpts...),
		Tracer:         deps.Tracer,
	}, w.Holder, m, logger.With("component", "consumer"))
	w.Services = append(w.Services, w.Consumer)
	w.Checks["kafka"] = w.Consumer.Ping

	// The group's lag from Kafka's offsets, for dashboards and autoscalers.
	// Also the due backlog: the ready queue and this worker's records in
	// Kafka older than the staging window, which the chart scales on.
	lag, err := lagexporter.Dial(lagexporter.Config{Group: cfg.Group, Topics: topics.FireAll(),
		OverdueAfter: cfg.StagingWindow, Ready: q.Len, Positions: w.Consumer.Positions},
		splitList(cfg.KafkaBrokers), cfg.WorkerID+"-lag", logger.With("component", "lagexporter"), reg, kafkaSec...)
	if err != nil {
		return nil, err
	}
	w.Services = append(w.Services, lag)
	return w, nil
}

// heldShares is the back-pressure per priority topic: MEDIUM's and LOW's
// parts of --max-held, so a LOW or MEDIUM backlog pauses its own topics
// and HIGH fetches on (CRITICAL is never paused).
func heldShares(topics firing.Topics, cfg Config) []consumer.TopicShare {
	var out []consumer.TopicShare
	for _, s := range []struct {
		p   sundialv1.Priority
		pct int
	}{{sundialv1.Priority_PRIORITY_MEDIUM, cfg.MediumHeldPercent}, {sundialv1.Priority_PRIORITY_LOW, cfg.LowHeldPercent}} {
		if s.pct > 0 {
			out = append(out, consumer.TopicShare{Topic: topics.Fire(s.p), Percent: s.pct})
		}
	}
	return out
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

// stages is the consumer's view of the worker's stages: arriving firings go
// to the prepare holder, and a revoke takes back those not yet prepared (a
// prepared one is claimed, so the revoke waits for it to fire instead).
// Len counts every firing waiting in memory — both holders and the ready
// queue — for sundial_worker_held_firings. (--max-held is the consumer's:
// it counts per topic what it fetched and is not finished, so a backlog of
// one priority pauses that priority's topic.)
type stages struct {
	prepare, fire *holder.Holder
	ready         *readyq.Queue
}

func (s *stages) Add(it *work.Item)         { s.prepare.Add(it) }
func (s *stages) Remove(it *work.Item) bool { return s.prepare.Remove(it) }
func (s *stages) Len() int                  { return s.prepare.Len() + s.fire.Len() + s.ready.Len() }

// herdChunk: a release of this many firings at once by the fire holder is a
// herd, and GOMAXPROCS goes up before it is fired.
const herdChunk = 32

// procsGovernor applies --procs: auto returns the governor that sizes
// GOMAXPROCS to the load (unless the GOMAXPROCS variable is set: then the
// operator's figure stays); a number sets it once, and empty leaves it. In
// those cases the governor returned does nothing and the gauge is set once.
func procsGovernor(cfg Config, clk clock.Clock, m *metrics.Metrics, logger *slog.Logger) (*procs.Governor, error) {
	auto, fixed, err := cfg.procsSetting()
	if err != nil {
		return nil, err
	}
	pc := procs.DefaultConfig
	switch {
	case fixed > 0:
		runtime.GOMAXPROCS(fixed)
	case auto && os.Getenv("GOMAXPROCS") != "":
		logger.Info("GOMAXPROCS is set: --procs auto leaves it", "gomaxprocs", runtime.GOMAXPROCS(0))
	case auto:
		pc.Max = runtime.GOMAXPROCS(0)
	}
	if pc.Max <= 1 {
		m.Procs.Set(float64(runtime.GOMAXPROCS(0)))
		return procs.New(pc, clk, logger), nil
	}
	return procs.New(pc, clk, logger, procs.WithReport(func(n int) { m.Procs.Set(float64(n)) })), nil
}
