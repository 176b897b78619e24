package app

// The steps of New, in the order it takes them: each builds one part of the
// worker from what the earlier steps returned, appends the part's services
// (in start order) and readiness checks to the worker, and hands what it
// opened to the closer.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/secrets"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/clockoffset"
	"github.com/sundialhq/sundial/services/worker/internal/completer"
	"github.com/sundialhq/sundial/services/worker/internal/consumer"
	"github.com/sundialhq/sundial/services/worker/internal/discard"
	"github.com/sundialhq/sundial/services/worker/internal/evict"
	"github.com/sundialhq/sundial/services/worker/internal/fire"
	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/lagexporter"
	"github.com/sundialhq/sundial/services/worker/internal/limits"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/misfire"
	"github.com/sundialhq/sundial/services/worker/internal/notify"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/rollup"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/signing"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/versions"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// clocks are the worker's two clocks. local is this host's own; corrected
// is local as the offset estimator corrects it against the database clock
// (local itself without --postgres-dsn): firings are held and fired by it.
type clocks struct {
	local, corrected clock.Clock
	// wake re-arms the holders' timers after a new estimate moved the
	// corrected clock. The holders are built after the estimator, so the
	// stages step sets it, before anything starts; nil until then.
	wake func()
}

// clocks builds the clocks and, with --postgres-dsn, the offset estimator
// (and its connection).
//
// --clock-offset skews this worker's own clock, as a badly synchronised
// host would be; the estimator then measures and corrects it. The worker's
// own clock is steady: a step of the host's wall clock while it runs does
// not move it (clock.Steady); the offset estimator corrects it against the
// database, which takes a step in at its next sample instead of firing
// early or late until then.
func (b *builder) clocks() (*clocks, error) {
	local := b.deps.Clock
	if local == nil {
		local = clock.NewSteady()
	}
	if b.cfg.ClockOffset != 0 {
		skew := b.cfg.ClockOffset
		local = clock.Offset{Base: local, Offset: func() time.Duration { return skew }}
	}
	c := &clocks{local: local, corrected: local}
	if b.cfg.PostgresDSN == "" {
		return c, nil
	}
	pg, err := clockoffset.NewPostgres(b.cfg.PostgresDSN)
	if err != nil {
		return nil, err
	}
	b.cl.add(pg.Close)
	m := b.m
	b.w.Estimator = clockoffset.New(local, pg, clockoffset.Config{Interval: b.cfg.ClockSampleInterval}, b.logger.With("component", "clockoffset"),
		func(est clockoffset.Estimate) {
			m.ClockOffset.Set(est.Offset.Seconds())
			m.ClockRTT.Set(est.RTT.Seconds())
			if c.wake != nil {
				c.wake()
			}
		})
	c.corrected = b.w.Estimator.Clock()
	b.run(b.w.Estimator)
	return c, nil
}

// redisSide is what the worker keeps in Redis: leases, fences, overlap
// markers and delivery counts (the lease store), and the markers Redis
// could not take, written when it answers.
type redisSide struct {
	rdb    redis.UniversalClient
	leases *lease.Store
	marks  *settle.Marks
}

// redis connects to Redis and builds the lease store, the liveness key's
// refresher (with --liveness-ttl) and the deferred markers.
func (b *builder) redis(clk *clocks) (redisSide, error) {
	addrs, err := lease.ParseAddrs(b.cfg.RedisAddr)
	if err != nil {
		return redisSide{}, fmt.Errorf("redis-addr: %w", err)
	}
	// One address: a single Redis; several: a Redis Cluster's nodes.
	rdb, err := lease.NewClient(addrs, b.cfg.RedisSecurity, b.deps.RedisDialer)
	if err != nil {
		return redisSide{}, fmt.Errorf("redis: %w", err)
	}
	b.cl.add(func() { _ = rdb.Close() })
	// A wrong password or an untrusted certificate stops the worker now,
	// naming Redis; a Redis that is down is waited for, as before.
	if err := connsec.AtStart(context.Background(), b.logger, func(ctx context.Context) error { return lease.Check(ctx, rdb) }); err != nil {
		return redisSide{}, err
	}
	lopts := []lease.Option{lease.WithPrefix(b.cfg.RedisKeyPrefix), lease.WithMaxDeliveries(b.cfg.MaxDeliveries), lease.WithMarkerTTL(b.cfg.DoneTTL)}
	if b.cfg.LivenessTTL > 0 {
		lopts = append(lopts, lease.WithLiveness())
	}
	leases := lease.New(rdb, lopts...)
	if b.cfg.LivenessTTL > 0 {
		// Before any lease is taken, stopped after the last is let go.
		b.run(&liveness{store: leases, worker: b.cfg.WorkerID, ttl: b.cfg.LivenessTTL, clk: clk.local, logger: b.logger.With("component", "liveness")})
	}
	b.w.Checks["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	// Started before the executors, stopped after them.
	m := b.m
	marks := settle.NewMarks(leases, settle.MarksConfig{
		Deferred: func(n int) { m.SettleErrors.WithLabelValues("marker").Add(float64(n)) },
	}, clk.local, b.logger.With("component", "marks"))
	b.run(marks)
	return redisSide{rdb: rdb, leases: leases, marks: marks}, nil
}

// ledgerSide is the ledger as the worker uses it: the writer the recorder
// writes through and, with the real ledger only (nil with Deps.Ledger),
// two reads of an attempt's record for the prepare stage.
type ledgerSide struct {
	writer recorder.Ledger
	// recorded tells whether an attempt a dead delivery leased and never
	// marked is in the ledger already (so not to fire it again).
	recorded func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool)
	// hasRecord tells whether the ledger holds a final record of a
	// firing's attempt, for copies found done by their marker.
	hasRecord func(ctx context.Context, f *sundialv1.Firing) (bool, error)
}

// ledger reaches Cassandra (creating the keyspace and tables with
// --ledger-migrate), unless Deps.Ledger replaces it. The session connects
// in the background: a worker starts while Cassandra is down, its records
// spill to Postgres (the recorder) and /readyz names the ledger until
// Cassandra answers.
func (b *builder) ledger(_ context.Context, spill *spillPool) (ledgerSide, error) {
	if b.deps.Ledger != nil {
		return ledgerSide{writer: b.deps.Ledger}, nil
	}
	ccfg := ledger.ConnectConfig{Hosts: splitList(b.cfg.CassandraHosts)}
	if err := b.cfg.CassandraSecurity.Apply(&ccfg); err != nil {
		return ledgerSide{}, fmt.Errorf("cassandra: %w", err)
	}
	lcfg := ledger.LazyConfig{
		Connect: ccfg,
		Wrap: func(s ledger.Session) ledger.Session {
			return ledger.Instrumented(ledger.Retrying(s, ledger.DefaultRetryPolicy), b.reg)
		},
		Logger: b.logger.With("component", "ledger"),
	}
	if b.cfg.LedgerMigrate {
		keyspace := b.cfg.CassandraKeyspace
		lcfg.Prepare = func(ctx context.Context, s ledger.Session) error {
			return ledger.Migrate(ctx, s, keyspace, ledger.DefaultReplication)
		}
	}
	lazy, err := ledger.NewLazySession(lcfg)
	if err != nil {
		return ledgerSide{}, fmt.Errorf("cassandra-hosts: %w", err)
	}
	b.cl.add(lazy.Close)
	b.run(lazy) // connecting before the recorder starts writing
	var s ledger.Session = lazy
	reader := ledger.NewReader(s, b.cfg.CassandraKeyspace)
	b.w.Checks["cassandra"] = lazy.Ready
	var wopts []ledger.WriterOption
	if b.cfg.PostgresDSN != "" {
		// Each record lives its tenant's TTL (tenant_ledger_ttl), read
		// through the settling pool, which is opened later in the build
		// and set before anything starts.
		ttls := ledgerttl.NewCache(spilled{spill}, ledgerttl.Refresh, clock.Real{}, b.logger)
		b.run(ttls)
		wopts = append(wopts, ledger.WithTenantTTL(ttls.For))
	}
	return ledgerSide{
		writer: ledger.NewWriter(s, b.cfg.CassandraKeyspace, wopts...),
		recorded: func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
			st, err := attemptStatus(ctx, reader, f)
			if err != nil || !attemptOutcome(st) {
				return 0, false
			}
			return st, true
		},
		hasRecord: func(ctx context.Context, f *sundialv1.Firing) (bool, error) {
			st, err := attemptStatus(ctx, reader, f)
			return st != sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, err
		},
	}, nil
}

// spillPool is where the recorder parks the records Cassandra keeps
// refusing (ledger_pending): the settle stage's Postgres pool. The
// recorder is built (and started) before the executors, whose step makes
// the pool, so it reaches the pool through this; set before anything
// starts, and only with --postgres-dsn.
type spillPool struct{ pool *pgxpool.Pool }

// spilled reads through the spill pool once it is set (ledgerttl.Querier).
type spilled struct{ p *spillPool }

func (s spilled) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if s.p.pool == nil {
		return nil, errors.New("no postgres pool yet")
	}
	return s.p.pool.Query(ctx, sql, args...)
}

// recorder builds the ledger recorder, which groups the attempts' records
// into ledger writes.
func (b *builder) recorder(led recorder.Ledger, spill *spillPool, q *readyq.Queue) *recorder.Recorder {
	recCfg := recorder.DefaultConfig
	// Due firings go out first; their records are written after them
	// (recorder.Config.Emptied), held back at most --ledger-max-yield.
	recCfg.Emptied, recCfg.MaxYield = q.Emptied, b.cfg.LedgerMaxYield
	recCfg.RunningDelay = b.cfg.LedgerRunningDelay
	recCfg.Linger = b.cfg.LedgerLinger
	recCfg.Quiet = b.cfg.LedgerQuiet
	if b.cfg.LedgerGroupSize > 0 {
		recCfg.GroupSize = b.cfg.LedgerGroupSize
	}
	if b.cfg.PostgresDSN != "" {
		recCfg.SpillAfter = b.cfg.LedgerSpillAfter
		recCfg.Spill = func(ctx context.Context, as []*sundialv1.ExecutionAttempt) error {
			return ledgerpending.Spill(ctx, spill.pool, as)
		}
	}
	// The ledger's pace follows Cassandra's latency and errors; its burst
	// holds a whole group.
	tcfg := ledger.DefaultThrottleConfig
	tcfg.Burst = max(tcfg.Burst, recCfg.GroupSize)
	throttle, _ := ledger.NewThrottle(tcfg) // the defaults, valid
	recCfg.Throttle = throttle
	metrics.LedgerThrottle(b.reg, throttle.Rate, throttle.InFlight)
	m := b.m
	rec := recorder.New(led, recCfg, b.logger.With("component", "recorder"), recorder.Metrics{
		Written: func(r string) { m.LedgerWrites.WithLabelValues(r).Inc() },
		Yielded: func(d time.Duration) { m.LedgerYield.Observe(d.Seconds()) },
	})
	b.run(rec)
	return rec
}

// kafkaSide is the worker's Kafka: its topics, the TLS and SASL options
// every one of its clients takes (the producer, the consumer and the lag
// exporter; clipped, so each append copies), and the producer of dead
// letters (and of Kafka targets, when allowed) with the DLQ on it.
type kafkaSide struct {
	topics   firing.Topics
	security []kgo.Opt
	producer *kgo.Client
	dlq      *settle.KafkaDLQ
}

// producer builds the Kafka producer.
func (b *builder) producer() (kafkaSide, error) {
	topics := firing.Topics{Prefix: b.cfg.TopicPrefix}
	sec, err := b.cfg.KafkaSecurity.Opts()
	if err != nil {
		return kafkaSide{}, fmt.Errorf("kafka: %w", err)
	}
	sec = slices.Clip(sec)
	prod, err := kgo.NewClient(append(sec,
		kgo.SeedBrokers(splitList(b.cfg.KafkaBrokers)...),
		kgo.ClientID(b.cfg.WorkerID+"-producer"),
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
		return kafkaSide{}, fmt.Errorf("kafka producer: %w", err)
	}
	b.cl.add(prod.Close)
	return kafkaSide{topics: topics, security: sec, producer: prod, dlq: settle.NewKafkaDLQ(prod, topics.DLQ())}, nil
}

// outboundSide is how the worker reaches out on behalf of jobs: the
// address policy checked at dial time, the transport that checks it, the
// keys that sign each tenant's requests, and fire, the target (HTTP or
// Kafka) behind the per-host circuit breakers.
type outboundSide struct {
	policy    *netpolicy.Policy
	transport *http.Transport
	keyring   *signing.Keyring
	fire      target.Target
}

// outbound builds the targets: the address policy, the transport, the
// secrets for headers, the signing keys and the breakers.
func (b *builder) outbound(ctx context.Context, secret []byte, clk *clocks, rs redisSide, prod *kgo.Client) (outboundSide, error) {
	m := b.m
	policy, err := netpolicy.New(splitList(b.cfg.AllowTargetAddrs), splitList(b.cfg.DenyTargetAddrs),
		netpolicy.OnRefused(func(reason string) { m.RefusedAddresses.WithLabelValues(reason).Inc() }))
	if err != nil {
		return outboundSide{}, err
	}
	tr := target.NewTransport(policy)
	b.cl.add(tr.CloseIdleConnections)
	resolver := b.secretResolver(clk.local)
	keyring, err := newKeyring(ctx, b.cfg, secret, clk.corrected, b.logger.With("component", "signing"), b.cl)
	if err != nil {
		return outboundSide{}, err
	}
	b.run(keyring) // loads the keys before anything fires
	route := target.Router{HTTP: target.NewHTTP(target.NewClient(tr), secret, target.WithSecrets(resolver), target.WithPolicy(policy), target.WithSigner(keyring))}
	if allow := b.cfg.AllowKafkaTargets; allow != "" {
		route.Kafka = target.NewKafka(prod, secret, b.cfg.TopicPrefix+".", splitList(allow), target.WithKafkaSigner(keyring))
	}
	fire, err := b.limits(route, clk.corrected, rs)
	if err != nil {
		return outboundSide{}, err
	}
	return outboundSide{policy: policy, transport: tr, keyring: keyring, fire: fire}, nil
}

// secretResolver resolves the {{secret:NAME}} references in headers from
// --secrets-dir, warning about secrets left where no job reads them.
func (b *builder) secretResolver(clk clock.Clock) *secrets.Resolver {
	var sources []secrets.Source
	if b.cfg.SecretsDir != "" {
		sources = append(sources, secrets.Dir(b.cfg.SecretsDir))
		// Secrets are per tenant (<dir>/<tenant>/<name>); a file of the
		// old, unscoped layout served every tenant and now serves none.
		if flat, err := secrets.Dir(b.cfg.SecretsDir).Unscoped(); err == nil && len(flat) > 0 {
			b.logger.Warn("secrets-dir holds files outside a tenant directory; no job resolves them (move each to <secrets-dir>/<tenant>/<name>)", "files", flat)
		}
	}
	if vars := secrets.EnvFromEnviron(b.deps.Environ); len(vars) > 0 {
		b.logger.Warn("SUNDIAL_SECRET_* variables are no longer read: they cannot say which tenant a secret belongs to (write <secrets-dir>/<tenant>/<name> instead)", "variables", vars)
	}
	return secrets.NewResolver(clk, 0, sources...)
}

// limits puts the limits in front of route: with a tenant quota, a host
// concurrency cap or --cluster-limits, the limits package (in Redis, or
// per process without --cluster-limits), which the executors then ask at
// each firing's instant; otherwise the per-host circuit breakers (none
// with --breaker-failures 0) and the per-process --host-rate.
func (b *builder) limits(route target.Target, clk clock.Clock, rs redisSide) (target.Target, error) {
	cfg, m := b.cfg, b.m
	rates, err := cfg.Quotas()
	if err != nil {
		return nil, fmt.Errorf("quotas-file: %w", err)
	}
	if !cfg.ClusterLimits && !rates.FiringLimited() && cfg.HostConcurrency == 0 {
		fire := b.breakers(route, clk)
		b.w.Breakers, _ = fire.(*hostguard.Breakers)
		return fire, nil
	}
	var rdb redis.Cmdable
	if cfg.ClusterLimits {
		rdb = rs.rdb
	}
	logger := b.logger.With("component", "limits")
	g := limits.New(rdb, route, limits.Config{
		Prefix: cfg.RedisKeyPrefix, HostRate: cfg.HostRate, HostBurst: cfg.HostBurst, HostConcurrency: cfg.HostConcurrency,
		Breaker: hostguard.BreakerConfig{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown}, Tenants: rates,
		Timeout: cfg.LimitsTimeout, Fallback: cfg.LimitsFallback, BreakerSync: cfg.BreakerSync,
	}, clk, limits.Metrics{
		// Transitions this worker made; the state gauge is left alone: a
		// breaker held in Redis is closed by whichever worker's probe
		// succeeds, and a gauge per worker would not add up.
		Transition: func(_, to hostguard.State) { m.BreakerTransitions.WithLabelValues(to.String()).Inc() },
		Rejected:   m.BreakerRejections.Inc,
		Fallback:   m.LimitsFallbacks.Inc,
	}, logger)
	b.w.Limits = g
	logger.Info("limits", "cluster", cfg.ClusterLimits, "host_rate", cfg.HostRate, "host_concurrency", cfg.HostConcurrency,
		"breaker_failures", cfg.BreakerFailures, "tenant_firing_rate", rates.Defaults().Firing.Rate)
	return g.Target(), nil
}

// breakers puts the per-host circuit breakers in front of route (none
// with --breaker-failures 0), counting and logging their transitions.
func (b *builder) breakers(route target.Target, clk clock.Clock) target.Target {
	m, logger := b.m, b.logger
	return hostguard.NewBreakers(route, hostguard.BreakerConfig{Failures: b.cfg.BreakerFailures, Cooldown: b.cfg.BreakerCooldown}, clk, hostguard.BreakerMetrics{
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
}

// callbacks builds the notifier of jobs' callback URLs and the forwarder
// of poison records (records that are no firing) to the DLQ.
func (b *builder) callbacks(secret []byte, clk *clocks, out outboundSide, dlq *settle.KafkaDLQ) (*notify.Notifier, *settle.RawForwarder) {
	m := b.m
	ncfg := notify.DefaultConfig
	ncfg.Signer = out.keyring // a callback goes to the tenant's endpoint: its keys sign it
	nt := notify.New(target.NewClient(out.transport), secret, out.policy, clk.corrected, ncfg,
		notify.Metrics{Result: func(r string) { m.Notifications.WithLabelValues(r).Inc() }}, b.logger.With("component", "notify"))
	b.run(nt)
	raw := settle.NewRawForwarder(dlq, clk.local, b.logger.With("component", "poison"), func(r string) { m.PoisonRecords.WithLabelValues(r).Inc() })
	b.run(raw)
	return nt, raw
}

// stageSet is the prepare and fire stages: the ready queue the fire holder
// releases into, the fire holder, and the prepare stage.
type stageSet struct {
	queue *readyq.Queue
	fire  *holder.Holder
	// prep is the prepare holder: a firing whose lease ran low before
	// its request goes back through it to be leased again.
	prep *holder.Holder
	// unstarted gives back the leases of firings let go unstarted.
	unstarted *consumer.Unstarted
	// watch knows the announced job versions; judge the late firings;
	// discard records the firings of changed jobs.
	watch   *versions.Watch
	judge   *misfire.Judge
	discard *discard.Summarizer
}

// stages builds the prepare stage and the holders around it (the fire and
// settle stages are fireAndSettle's): the prepare holder releases each firing
// --prepare-lead before its instant and the prepare stage leases it, many
// per Redis call; the fire holder releases it at its instant into the ready
// queue, where an executor takes it. The ready queue's admission rule: the
// less urgent priorities may occupy only part of the executors, so a HIGH
// or CRITICAL firing never waits for slow LOW or MEDIUM requests to end.
// The GOMAXPROCS governor is built here too: a herd the fire holder
// releases raises it.
// readyQueue builds the ready queue: due firings waiting for an
// executor. The stages fill and drain it; the settlers and the recorder
// give way to the firings while it holds any.
func (b *builder) readyQueue(clk *clocks) *readyq.Queue {
	cfg, m := b.cfg, b.m
	q := readyq.New(readyq.WithLane(readyq.FairLanes), readyq.WithDepthObserver(func(p sundialv1.Priority, d int) {
		m.ReadyDepth.WithLabelValues(firing.PriorityName(p)).Set(float64(d))
	}), readyq.WithLimits(readyq.LimitsOf(cfg.Executors, cfg.HighExecutorsPercent, cfg.MediumExecutorsPercent, cfg.LowExecutorsPercent)),
		readyq.WithClock(clk.local))
	b.w.Queue = q
	metrics.ExecutorIdle(b.reg, q.IdleWhileDue)
	return q
}

func (b *builder) stages(clk *clocks, rs redisSide, led ledgerSide, rec *recorder.Recorder, q *readyq.Queue) (stageSet, error) {
	cfg, m := b.cfg, b.m
	applyGCPercent(cfg, b.logger)
	gov, err := procsGovernor(cfg, clk.local, m, b.logger.With("component", "procs"))
	if err != nil {
		return stageSet{}, err
	}
	b.run(gov)
	fireHolder := holder.New(clk.corrected, q.Push, holder.WithTenantTurns(), holder.WithReleased(func(n int) {
		if n >= herdChunk {
			gov.Busy()
		}
	}))
	// Leases are taken only as fast as the executors fire: a firing
	// leased when due waits at most 2/5 of a lease for an executor, so it
	// reaches one with more than half its lease left and goes out with no
	// Redis call, however far behind the worker is.
	adm := prepare.NewAdmission(prepare.AdmissionConfig{Waiting: q.LenUpTo, Drained: q.Drained, Window: cfg.LeaseTTL * 2 / 5,
		Floor: max(512, 4*(cfg.Executors+cfg.CriticalExecutors))}, clk.local)
	// Changed jobs: the versions watch learns what the api announces; the
	// sweeper takes the changed jobs' firings out of both holders in one
	// pass per window, and the summarizer records them as one row per
	// job and change, finishing them after (package discard). Late
	// firings are judged by their jobs' misfire policies (package
	// misfire) before they are leased; those shed unleased are recorded
	// by the summarizer too, one row per job and few seconds.
	// A bulk delete frees hundreds of megabytes of held firings at once:
	// handed back to the system when they are finished, not gradually.
	sum := discard.NewSummarizer(rec, discard.Config{WorkerID: cfg.WorkerID, ReturnMemory: debug.FreeOSMemory}, clk.corrected, b.logger.With("component", "discard"))
	judge := misfire.New(misfire.Config{Threshold: cfg.MisfireThreshold}, clk.corrected)
	var sweep *discard.Sweeper
	watch := versions.New(rs.rdb, rs.leases.VersionsChannel(), clk.local, b.logger.With("component", "versions"),
		versions.WithChanged(func(job string, v int64) { sweep.Changed(job, v) }))
	var prep *prepare.Stage
	// The prepare holder takes turns between tenants too: when leasing a
	// herd takes longer than the lead (a busy machine, a herd beyond what
	// is leased ahead), one tenant's thousands must not keep another's
	// firing of the same instant out of the fire holder until they are
	// leased.
	prepHolder := holder.New(clk.corrected, func(it *work.Item) { prep.Add(it) }, holder.WithLead(func(it *work.Item) time.Duration { return prep.Lead(it) }),
		holder.WithBatchSink(func(items []*work.Item) { prep.AddMany(items) }), holder.WithTenantTurns())
	prep = prepare.New(prepare.Config{
		Lead: cfg.PrepareLead, Grain: cfg.PrepareGrain, Batch: cfg.PrepareBatch, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL, Unmarked: rs.marks.Pending,
		Recorded: led.recorded, DoneTTL: cfg.DoneTTL, HasRecord: led.hasRecord,
		RecordLost: func(a *sundialv1.ExecutionAttempt, done func()) bool {
			return rec.Final(context.Background(), a, true, done)
		},
		Admission: adm, Changed: watch.Newer,
		Late: judge.Judge,
	}, rs.leases, prepare.Routes{Fire: fireHolder.Add, Now: q.Push, Again: prepHolder.AddAfter, Drop: sum.Drop,
		Skip: func(it *work.Item, reason string) { b.misfired(rec, clk, it, reason) },
		Shed: func(it *work.Item, v misfire.Verdict) { sum.Shed(it, v.Kind) },
	}, clk.corrected, m, b.logger.With("component", "prepare"))
	sweep = discard.NewSweeper([]discard.Holder{prepHolder, discard.Claimed{Holder: fireHolder}}, sum, 0, clk.corrected, b.logger.With("component", "discard"))
	clk.wake = func() { prepHolder.Wake(); fireHolder.Wake() }
	b.w.Holder = &stages{prepare: prepHolder, fire: fireHolder, ready: q, unleased: prep.Waiting}
	metrics.Held(b.reg, b.w.Holder.Len)
	metrics.Admission(b.reg, prep.Waiting, adm.Rate)
	// Started before the prepare stage takes a lease, stopped after the
	// executors and the stages give their last firing back.
	unstarted := consumer.NewUnstarted(rs.leases, 2*time.Second, b.logger.With("component", "unstarted"))
	b.run(unstarted)
	b.run(sum, watch, sweep, fireHolder, prepHolder, prep)
	return stageSet{queue: q, fire: fireHolder, prep: prepHolder, unstarted: unstarted, watch: watch, judge: judge, discard: sum}, nil
}

// misfired records a firing its job's misfire policy skipped (SKIPPED, at
// fence 0: nothing was leased or fired) and finishes it once recorded.
func (b *builder) misfired(rec *recorder.Recorder, clk *clocks, it *work.Item, reason string) {
	a := settle.AttemptRecord(it.Firing, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0, b.cfg.WorkerID)
	a.FinishedTime = timestamppb.New(clk.corrected.Now())
	a.Reason = reason
	if !rec.Final(context.Background(), a, true, func() { it.Owner.Finish(it) }) {
		b.logger.Warn("recorder stopped before a skipped late firing was recorded", "execution_id", a.GetExecutionId())
	}
}

// fireAndSettle builds the fire stage's executors and the settle stage
// after them: the settlers write markers and records in groups and, with
// --postgres-dsn, make each attempt's outcome durable in Postgres (retries
// through the outbox, dead letters, job completions), in the pool the
// recorder spills to. Job changes announced after a firing was leased
// ahead reach it at its instant through the versions watch. The settle
// stage starts first and stops last: every attempt the executors made is
// handed to it before it stops.
func (b *builder) fireAndSettle(ctx context.Context, clk *clocks, rs redisSide, st stageSet, out target.Target, rec *recorder.Recorder, nt *notify.Notifier, dlq *settle.KafkaDLQ, spill *spillPool) error {
	cfg := b.cfg
	sd := settle.StageDeps{
		Leaser: rs.leases, Recorder: rec, Notifier: nt, Marks: rs.marks, Target: out, Tracer: b.deps.Tracer,
		Clock: clk.corrected, Metrics: b.m, Logger: b.logger.With("component", "settle"),
	}
	settler, err := b.settler(ctx, clk, dlq, spill)
	if err != nil {
		return err
	}
	if settler != nil {
		sd.Settler = settler
	}
	executors := cfg.Executors + cfg.CriticalExecutors
	settling := settle.NewStage(settle.StageConfig{
		Batch: cfg.SettleBatch, Linger: cfg.SettleLinger, Queue: settleQueue(executors), WorkerID: cfg.WorkerID, DoneTTL: cfg.DoneTTL,
		MaxDeliveries: cfg.MaxDeliveries, RunningGrace: max(time.Minute, 3*cfg.LeaseTTL),
		// Settled after the instant's requests: see settle.StageConfig.Emptied.
		Emptied: st.queue.Emptied,
	}, sd)
	fd := fire.Deps{
		Queue: st.queue, Holder: st.fire, Prepare: st.prep, Settle: settling, Leaser: rs.leases, Target: out, Recorder: rec,
		Versions: st.watch, Tracer: b.deps.Tracer, Clock: clk.corrected, Metrics: b.m, Logger: b.logger.With("component", "fire"),
	}
	if b.w.Limits != nil {
		fd.Limiter = b.w.Limits
	} else if l := hostguard.NewLimiter(cfg.HostRate, cfg.HostBurst); l != nil {
		fd.Limiter = l
	}
	b.run(settling, fire.New(fire.Config{
		Executors: cfg.Executors, CriticalExecutors: cfg.CriticalExecutors, WorkerID: cfg.WorkerID, LeaseTTL: cfg.LeaseTTL,
	}, fd))
	return nil
}

// settler opens the settling pool and builds the settler on it; without
// --postgres-dsn it returns nil (and says what that means).
func (b *builder) settler(ctx context.Context, clk *clocks, dlq *settle.KafkaDLQ, spill *spillPool) (*settle.Settler, error) {
	if b.cfg.PostgresDSN == "" {
		b.logger.Warn("no --postgres-dsn: failed attempts are recorded FAILED and neither retried nor dead-lettered")
		return nil, nil
	}
	pcfg, err := pgxpool.ParseConfig(b.cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	// Retries, dead letters and completions: each is a short transaction
	// a settler waits for, so a herd of one-off jobs needs enough
	// connections for Postgres to group their commits.
	if b.cfg.PostgresMaxConns > 0 {
		pcfg.MaxConns = int32(b.cfg.PostgresMaxConns)
	}
	pg, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	b.cl.add(pg.Close)
	spill.pool = pg
	// The pool connects on demand: a worker starts while Postgres is down
	// (settling waits and retries, records spill nowhere until it
	// answers), and /readyz names Postgres until it does.
	b.w.Checks["postgres"] = pg.Ping
	// The per-minute rollup of firings the console reads without
	// Prometheus, in the same pool: started before the executors, stopped
	// after them with a last flush (package rollup).
	b.m.Rollup = rollup.New(rollup.Config{WorkerID: b.cfg.WorkerID}, rollup.NewPG(pg), clk.corrected, b.logger.With("component", "rollup"))
	b.run(b.m.Rollup)
	// This worker's report and what it reaches (Kafka, Redis, Cassandra,
	// Postgres: every check, as the build adds them before the start),
	// for the console's services panel without Prometheus.
	b.run(instances.NewReporter(pg, "worker", b.cfg.WorkerID, b.w.Checks, instances.Options{Logger: b.logger.With("component", "instances")}))
	_ = connsec.AtStart(ctx, b.logger, func(ctx context.Context) error { // logs, never fails
		if err := pg.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		return nil
	})
	m := b.m
	// Jobs whose last slot settled are queued and completed at a pace
	// (package completer), so a burst of one-off jobs leaves Postgres's
	// cores to the firings.
	done := completer.New(completer.Config{Rate: b.cfg.CompletionRate}, completer.NewPG(pg, settle.Actor), completer.Metrics{
		Completed: func(o string) { m.JobCompletions.WithLabelValues(o).Inc() },
		Failed:    func() { m.SettleErrors.WithLabelValues("completion").Inc() },
		Waited:    func(d time.Duration) { m.CompletionWait.Set(d.Seconds()) },
	}, clk.local, b.logger.With("component", "completer"))
	b.run(done)
	return settle.New(settle.NewPostgres(pg, done.Wake), dlq, clk.corrected, settle.Config{}, settle.Metrics{
		RetryScheduled: func(pr, class string) { m.RetriesScheduled.WithLabelValues(pr, class).Inc() },
		DeadLetter:     func(class string) { m.DeadLetters.WithLabelValues(class).Inc() },
		StepError:      func(step string) { m.SettleErrors.WithLabelValues(step).Inc() },
	}, b.logger.With("component", "settle")), nil
}

// consumer builds the consumer of the priority topics, which puts arriving
// firings into the stages and forwards poison records, and the lag
// exporter: the group's lag from Kafka's offsets, for dashboards and
// autoscalers, and the due backlog (the ready queue and this worker's
// records in Kafka older than the staging window), which the chart scales
// on.
func (b *builder) consumer(clk *clocks, st stageSet, kafka kafkaSide, poison *settle.RawForwarder) error {
	cfg := b.cfg
	c := consumer.New(consumer.Config{
		Brokers:        splitList(cfg.KafkaBrokers),
		Topics:         kafka.topics.FireAll(),
		Group:          cfg.Group,
		ClientID:       cfg.WorkerID,
		SessionTimeout: cfg.SessionTimeout,
		DrainTimeout:   cfg.RevokeDrainTimeout,
		Clock:          clk.corrected,
		CatchUpRate:    cfg.CatchUpRate,
		CommitInterval: cfg.CommitInterval,
		MaxHeld:        cfg.MaxHeld,
		FetchAhead:     cfg.FetchAhead,
		Unpaused:       []string{kafka.topics.Fire(sundialv1.Priority_PRIORITY_CRITICAL)},
		HeldShares:     heldShares(kafka.topics, cfg),
		Poison:         poison.Forward,
		Opts:           append(kafka.security, b.deps.KafkaOpts...),
		Tracer:         b.deps.Tracer,
		InstanceID:     cfg.GroupInstanceID(),
		Unstarted:      st.unstarted,
		Arrived:        st.judge.Arrived,
		Changed:        st.watch.Newer,
		Drop:           st.discard.Drop,
	}, b.w.Holder, b.m, b.logger.With("component", "consumer"))
	b.w.Consumer = c
	b.run(c)
	b.w.Checks["kafka"] = c.Ping
	lag, err := lagexporter.Dial(lagexporter.Config{Group: cfg.Group, Topics: kafka.topics.FireAll(), Interval: cfg.LagInterval,
		OverdueAfter: cfg.StagingWindow, Ready: st.queue.Len, Positions: c.Positions, Publish: func(lag map[string]int64) { b.m.Rollup.SetLag(lag) }},
		splitList(cfg.KafkaBrokers), cfg.WorkerID+"-lag", b.logger.With("component", "lagexporter"), b.reg, kafka.security...)
	if err != nil {
		return err
	}
	b.run(lag)
	return nil
}

// evictor takes a dead peer out of the consumer group when its liveness
// key lapses, sooner than the group's session timeout (package evict).
// It needs liveness keys and static membership; --evict-dead=false leaves
// a dead worker's partitions to the session timeout.
func (b *builder) evictor(clk *clocks, rs redisSide, kafka kafkaSide) error {
	cfg := b.cfg
	if !cfg.EvictDead || cfg.LivenessTTL <= 0 || cfg.GroupInstanceID() == "" {
		return nil
	}
	g, err := evict.DialGroup(cfg.Group, splitList(cfg.KafkaBrokers), cfg.WorkerID+"-evict", append(kafka.security, b.deps.KafkaOpts...)...)
	if err != nil {
		return err
	}
	b.cl.add(g.Close)
	m := b.m
	b.run(evict.New(evict.Config{Self: cfg.WorkerID, TTL: cfg.LivenessTTL, Removed: func(n int) { m.Evicted.Add(float64(n)) }},
		g, rs.leases, clk.local, b.logger.With("component", "evict")))
	return nil
}

// settleQueue is the settle stage's queue for this many executors: room for
// a herd's attempts while the settlers yield to the firings still waiting
// (at least 8,192, about 100 bytes each beside the firings held anyway).
func settleQueue(executors int) int { return max(2*executors, 8192) }
