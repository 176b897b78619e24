// Package app composes the prefetcher from its parts, from the settings
// main has loaded and validated (Config).
//
// The services are started in order and stopped in reverse: the pool's
// closer, the job-notification listener, the ledger TTLs' reloader
// (pkg/postgres/ledgerttl), the ledger drainer, the ZooKeeper startup check, then
// what stages: the prefetch loop and the range coordinator. The
// coordinator stops first (ending every range's work, range 0's retention
// sweep included, rolling back in-flight transactions, then closing the
// session, which hands the ranges to the others at once), then the loop's
// notification fan-out. Then the ledger drainer, the listener, the pool.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"

	"github.com/sundialhq/sundial/services/prefetcher/internal/ledgerdrain"
	"github.com/sundialhq/sundial/services/prefetcher/internal/prefetch"
	"github.com/sundialhq/sundial/services/prefetcher/internal/retention"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// Deps is what the prefetcher takes from its process rather than its
// settings.
type Deps struct {
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Tracer traces staging; nil: tracing off.
	Tracer trace.Tracer
}

// App is the composed prefetcher.
type App struct {
	// Services are started in order and stopped in reverse (daemon.Run).
	Services []lifecycle.Service
	// Checks are the readiness checks, by name, for the admin server.
	Checks map[string]admin.Check
}

// New builds the prefetcher from a validated Config. Nothing runs until
// its Services are started; the pool is closed by the first service's Stop
// (the last to stop), and by New itself when it fails.
func New(ctx context.Context, cfg Config, deps Deps) (a *App, err error) {
	clk := clock.Real{}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	metrics := prefetch.NewMetrics(deps.Registry, cfg.Election)
	metrics.Ranges.Set(float64(cfg.Ranges))
	zcfg := rangeleader.Config{
		Servers:        cfg.zkServers(),
		Path:           cfg.Election,
		NodeID:         cfg.NodeID,
		Ranges:         cfg.Ranges,
		SessionTimeout: cfg.ZKSessionTimeout,
		Logger:         deps.Logger,
		Clock:          clk,
		OnChange:       metrics.ObserveRanges,
	}
	if err := cfg.ZKSecurity.Apply(&zcfg); err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if cfg.ZKSecurity.Username == "" {
		// Kept working for deployments that predate the ACLs (and the
		// tests and tools that start prefetchers without one), but said
		// at every start: anyone who reaches ZooKeeper can stall or split
		// leadership.
		deps.Logger.Warn("zookeeper ACLs are open: no --zk-username, so every node the prefetcher creates is world:anyone:cdrwa "+
			"and any client reaching ZooKeeper can delete a range lock, add a fake member or change ACLs; "+
			"set --zk-username and --zk-password-file (docs/security.md, ZooKeeper ACLs)",
			"election", cfg.Election)
	}
	store := stage.New(pool, deps.Logger, stage.WithTracer(deps.Tracer))
	listener := prefetch.NewListener(pool.Config().ConnConfig.Copy(), jobwake.Channel, deps.Logger, clk)
	sweeper, err := retention.New(cfg.Retention, pool, deps.Logger, clk, retention.NewMetrics(deps.Registry))
	if err != nil {
		return nil, err
	}
	loop, err := prefetch.New(cfg.Config, cfg.Ranges, store, listener.C(), deps.Logger, clk, metrics, sweeper)
	if err != nil {
		return nil, err
	}
	// The coordinator stops first: it ends every range's work (rolling
	// back in-flight transactions) and closes the session, which hands
	// the ranges to the others at once. The loop starts first and stops
	// last.
	zcfg.Work = loop.Work
	coord, err := rangeleader.New(zcfg)
	if err != nil {
		return nil, err
	}
	ttls := ledgerttl.NewCache(pool, ledgerttl.Refresh, clk, deps.Logger)
	drainer, err := newDrainer(cfg, pool, deps, clk, ttls)
	if err != nil {
		return nil, err
	}
	deps.Logger.Info("prefetcher configured", "node_id", cfg.NodeID, "election", cfg.Election, "ranges", cfg.Ranges,
		"window", cfg.Window, "chunk", cfg.Chunk, "tick", cfg.Tick, "batch_size", cfg.BatchSize, "zk_session_timeout", cfg.ZKSessionTimeout,
		"catch_up_rate", cfg.CatchUpRate, "fill_step", cfg.FillStep, "retention", cfg.Retention.Retention)
	checks := map[string]admin.Check{"postgres": store.Ping, "zookeeper": coord.Check}
	// The report of this member and of the ZooKeeper it reaches, for the
	// console without Prometheus: started last, stopped first.
	report := instances.NewReporter(pool, "prefetcher", cfg.NodeID, checks, instances.Options{Clock: clk, Logger: deps.Logger.With("component", "instances")})
	return &App{
		Services: []lifecycle.Service{poolCloser{pool}, listener, ttls, drainer, zkStartupCheck(zcfg, deps.Logger), loop, coord, report},
		Checks:   checks,
	}, nil
}

// idleInTxTimeout is the Postgres parameter openPool sets (see there).
const idleInTxTimeout = "idle_in_transaction_session_timeout"

// openPool opens the Postgres pool every part shares.
func openPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	// Named like the relay's sessions, so pg_stat_activity (and a CPU
	// profile of the backends) tells the prefetcher's apart; a DSN that
	// names one wins.
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "sundial-prefetcher/" + cfg.NodeID
	}
	// A staging transaction's first statement locks its range's
	// leader_epochs row until commit. A prefetcher stalled inside one
	// (paused, frozen, a long GC) would hold that lock, and with it the
	// range's next leader, for as long as the stall lasts: Postgres does
	// not notice a silent client. Past its ZooKeeper session timeout the
	// stalled member has lost the range anyway, so its session is ended
	// when idle in a transaction that long, and the lock goes with it. A
	// DSN that sets the parameter wins.
	if _, ok := pcfg.ConnConfig.RuntimeParams[idleInTxTimeout]; !ok {
		pcfg.ConnConfig.RuntimeParams[idleInTxTimeout] = strconv.FormatInt(cfg.ZKSessionTimeout.Milliseconds(), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// newDrainer builds the ledger drainer, which moves ledger_pending rows
// into the Cassandra ledger over sessions it dials itself.
//
// Its rows live their tenant's TTL (tenant_ledger_ttl, reloaded by ttls).
func newDrainer(cfg Config, pool *pgxpool.Pool, deps Deps, clk clock.Clock, ttls *ledgerttl.Cache) (*ledgerdrain.Drainer, error) {
	keyspace, reg := cfg.CassandraKeyspace, deps.Registry
	cc := ledger.ConnectConfig{Hosts: splitList(cfg.CassandraHosts)}
	if err := cfg.CassandraSecurity.Apply(&cc); err != nil {
		return nil, fmt.Errorf("cassandra: %w", err)
	}
	dial := func(context.Context) (ledgerdrain.Ledger, func(), error) {
		// The api creates the ledger's keyspace and tables; until it has,
		// writes fail and the rows wait in ledger_pending.
		sess, err := ledger.Connect(cc)
		if err != nil {
			return nil, nil, err
		}
		sess = ledger.Instrumented(ledger.Retrying(sess, ledger.DefaultRetryPolicy), reg)
		return ledger.NewWriter(sess, keyspace, ledger.WithTenantTTL(ttls.For)), sess.Close, nil
	}
	// The drain's pace follows Cassandra's latency and errors, from a
	// start and up to a ceiling well below what the workers write at: it
	// replays a backlog the ledger could not take, so it must catch up
	// without pushing the node over again.
	tcfg := drainThrottle
	tcfg.Clock = clk
	tcfg.Max, tcfg.Min = cfg.Drain.MaxRate, cfg.Drain.MinRate
	tcfg.Initial = min(max(tcfg.Initial, tcfg.Min), tcfg.Max)
	throttle, err := ledger.NewThrottle(tcfg)
	if err != nil {
		return nil, err
	}
	dcfg := cfg.Drain
	dcfg.Throttle = throttle
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sundial_prefetcher_ledger_drain_rate", Help: "Records per second the ledger drain may write now (follows Cassandra's latency and errors).",
	}, throttle.Rate))
	return ledgerdrain.New(dcfg, pool, dial, deps.Logger, clk, ledgerdrain.NewMetrics(deps.Registry))
}

// drainThrottle paces the ledger drain: a fifth of a worker's pace to
// start, then between --ledger-drain-min-rate (100: probing a failing
// node) and --ledger-drain-max-rate (5,000 records a second).
var drainThrottle = func() ledger.ThrottleConfig {
	c := ledger.DefaultThrottleConfig
	c.Initial, c.Max = 1000, 5000
	return c
}()

// poolCloser closes the pool when the group stops, after everything that
// uses it.
type poolCloser struct{ pool *pgxpool.Pool }

func (poolCloser) Start(context.Context) error { return nil }
func (p poolCloser) Stop()                     { p.pool.Close() }

// zkStartupCheck is started just before the coordinator: an untrusted
// certificate, or credentials the group path's ACL does not admit, stop
// the prefetcher at start with an error naming ZooKeeper and the node
// (rangeleader.Check), where the coordinator would retry forever; with an
// identity, it first gives every world-writable node of the group's tree
// (left by an older version, or a prefetcher without one) the identity's
// ACL, logging each path. A ZooKeeper that is down is waited for by the
// coordinator. (New itself connects to nothing.)
func zkStartupCheck(zcfg rangeleader.Config, logger *slog.Logger) lifecycle.Service {
	return startupCheck(func(ctx context.Context) error {
		return connsec.AtStart(ctx, logger, func(ctx context.Context) error { return rangeleader.Check(ctx, zcfg) })
	})
}

// startupCheck is a service whose Start is a check and which owns nothing.
type startupCheck func(ctx context.Context) error

func (c startupCheck) Start(ctx context.Context) error { return c(ctx) }
func (startupCheck) Stop()                             {}
