// Command prefetcher is Sundial's prefetcher service: the ZooKeeper-elected
// leader stages every slot due within the window as outbox rows, fenced by
// its election epoch; with --ranges, the job partitions are split into
// ranges spread over every live prefetcher, each range staged by its own
// leader and fenced by its own epoch. See docs/architecture/prefetcher.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/jobwake"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/pkg/ledger"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/rangeleader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/ledgerdrain"
	"github.com/sundialhq/sundial/services/prefetcher/internal/prefetch"
	"github.com/sundialhq/sundial/services/prefetcher/internal/retention"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

type settings struct {
	PostgresDSN       string
	ZKAddrs           string
	ZKSessionTimeout  time.Duration
	CassandraHosts    string
	CassandraKeyspace string
	prefetch.Config
	Drain     ledgerdrain.Config
	Retention retention.Config
	// TLS and credentials towards ZooKeeper and Cassandra (--zk-*,
	// --cassandra-*; see leader.Security, ledger.Security). Off by default.
	ZKSecurity        leader.Security
	CassandraSecurity ledger.Security
	// chunk is --chunk as given; validate resolves it into Config.Chunk.
	chunk chunkFlag
	// Ranges > 0 turns on partitioned prefetch: the 256 partitions split
	// into this many ranges, each led by one live prefetcher of the group
	// at --election-path (pkg/rangeleader). 0: one elected leader for all.
	Ranges int
}

func (s *settings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.PostgresDSN, "postgres-dsn", "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable", "Postgres connection string (search_path selects the schema)")
	fs.StringVar(&s.ZKAddrs, "zk-addrs", "127.0.0.1:2181", "comma-separated ZooKeeper host:port list")
	fs.DurationVar(&s.ZKSessionTimeout, "zk-session-timeout", 3*time.Second, "ZooKeeper session timeout; a standby takes over about this long after a leader dies without closing its session")
	fs.StringVar(&s.Election, "election-path", "/sundial/elections/prefetcher", "ZooKeeper path of the election (also its leader_epochs key)")
	fs.IntVar(&s.Ranges, "ranges", 0, "partitioned prefetch: split the 256 job partitions into this many ranges (a divisor of 256; 16 is the tested choice) and spread them over every live prefetcher, each range with its own leader and epoch (members under <election-path>/members, range locks under <election-path>/ranges, each lock's path its leader_epochs key); 0: one elected leader stages every partition")
	fs.StringVar(&s.NodeID, "node-id", defaultNodeID(), "this candidate's name in ZooKeeper, leader_epochs and logs")
	fs.DurationVar(&s.Window, "window", 2*time.Minute, "stage slots due up to this far ahead of the database clock")
	s.chunk = chunkFlag{auto: true}
	fs.Var(&s.chunk, "chunk", "a job due within the window gets its slots staged this far beyond it too, so a frequent job is claimed about once per chunk instead of every tick; auto: a quarter of the window, at most 30s (0: up to the window only)")
	fs.DurationVar(&s.Tick, "tick", time.Second, "interval between prefetch passes (new terms and job notifications wake it sooner)")
	fs.IntVar(&s.BatchSize, "batch-size", 500, "jobs claimed per transaction")
	fs.DurationVar(&s.MisfireThreshold, "misfire-threshold", 5*time.Second, "a slot counts as missed (misfire policy applies) only when older than this")
	fs.IntVar(&s.MaxSlotsPerJob, "max-slots-per-job", 10000, "most slots of one job staged per transaction (the rest follow next pass)")
	fs.IntVar(&s.MaxSkipRecords, "skip-records-per-job", 100, "skipped slots of one job recorded in the ledger one by one per pass (the most recent); older ones share one summary row")
	fs.DurationVar(&s.FillStep, "fill-step", 10*time.Second, "a window far behind (many jobs registered at once, a leader back after an outage) is filled this far at a time across every due job, earliest slots first, instead of one job's whole window after another (0: job by job)")
	fs.Float64Var(&s.CatchUpRate, "catch-up-rate", 100, "platform-wide release rate of catch-up firings after an outage, per second (0: release at once)")
	fs.StringVar(&s.CassandraHosts, "cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points of the execution ledger (skipped-slot rows are drained into it)")
	fs.StringVar(&s.CassandraKeyspace, "cassandra-keyspace", "sundial", "Cassandra keyspace of the execution ledger")
	fs.DurationVar(&s.Drain.Interval, "ledger-drain-interval", time.Second, "interval between ledger_pending drain rounds")
	fs.IntVar(&s.Drain.BatchSize, "ledger-drain-batch-size", 500, "ledger_pending rows per drain transaction")
	fs.IntVar(&s.Drain.Concurrency, "ledger-drain-concurrency", 16, "ledger writes in flight while draining")
	fs.DurationVar(&s.Drain.BatchTimeout, "ledger-drain-timeout", 30*time.Second, "longest one drain transaction may take")
	fs.DurationVar(&s.Retention.Retention, "retention", 7*24*time.Hour, "completed and deleted jobs are purged this long after they completed or were deleted")
	fs.DurationVar(&s.Retention.Interval, "retention-interval", time.Minute, "interval between retention sweeps (leader only)")
	fs.IntVar(&s.Retention.BatchSize, "retention-batch-size", 100, "jobs purged per transaction")
	s.ZKSecurity.Register(fs)
	s.CassandraSecurity.Register(fs)
}

// maxAutoChunk bounds --chunk=auto: 30 s already cuts a per-second job's
// claims 31-fold, and more would only grow the outbox.
const maxAutoChunk = 30 * time.Second

// chunkFlag is --chunk: a duration, or auto (resolved against --window
// once every flag is read).
type chunkFlag struct {
	d    time.Duration
	auto bool
}

func (c *chunkFlag) String() string {
	if c.auto {
		return "auto"
	}
	return c.d.String()
}

func (c *chunkFlag) Set(v string) error {
	if v == "auto" {
		c.auto = true
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	c.d, c.auto = d, false
	return nil
}

// chunkFor is the chunk --chunk asks for with this window.
func (c chunkFlag) chunkFor(window time.Duration) time.Duration {
	if c.auto {
		return min(maxAutoChunk, window/4)
	}
	return c.d
}

func (s *settings) validate(p *config.Problems) {
	// Every flag is read by now: resolve --chunk against --window.
	s.Chunk = s.chunk.chunkFor(s.Window)
	if s.PostgresDSN == "" {
		p.Addf("postgres-dsn", "must not be empty")
	} else if _, err := pgxpool.ParseConfig(s.PostgresDSN); err != nil {
		p.Addf("postgres-dsn", "%v", err)
	}
	if len(s.zkServers()) == 0 {
		p.Addf("zk-addrs", "must list at least one host:port")
	}
	if s.ZKSessionTimeout < 500*time.Millisecond {
		p.Addf("zk-session-timeout", "must be at least 500ms, got %s", s.ZKSessionTimeout)
	}
	if s.Ranges != 0 && !prefetch.ValidRanges(s.Ranges) {
		p.Addf("ranges", "must be 0 or a divisor of 256, got %d", s.Ranges)
	}
	if len(splitList(s.CassandraHosts)) == 0 {
		p.Addf("cassandra-hosts", "must name at least one host")
	}
	if err := ledger.ValidKeyspace(s.CassandraKeyspace); err != nil {
		p.Addf("cassandra-keyspace", "%v", err)
	}
	s.ZKSecurity.Validate(p)
	s.CassandraSecurity.Validate(p)
	for _, err := range []error{s.Config.Validate(), s.Drain.Validate(), s.Retention.Validate()} {
		if err == nil {
			continue
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			name, msg, _ := strings.Cut(line, ": ")
			p.Addf(name, "%s", msg)
		}
	}
}

func (s *settings) zkServers() []string { return splitList(s.ZKAddrs) }

func splitList(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "prefetcher"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func main() {
	var s settings
	daemon.Main("prefetcher",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8082")
			s.register(fs)
		},
		s.validate,
		func(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) { return build(ctx, env, s) },
	)
}

// build composes the service. The group starts them in order and stops
// them in reverse. With one leader: the prefetch loop stops first (ending
// the term's work, the retention sweep included, and rolling back an
// in-flight transaction), then the elector (closing the session hands
// leadership over at once). With ranges: the coordinator stops first
// (ending every range's work, then closing the session), then the loop's
// notification fan-out. Then the ledger drainer, the listener, the pool.
func build(ctx context.Context, env daemon.Env, s settings) ([]lifecycle.Service, error) {
	clk := clock.Real{}
	pcfg, err := pgxpool.ParseConfig(s.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	// Named like the relay's sessions, so pg_stat_activity (and a CPU
	// profile of the backends) tells the prefetcher's apart; a DSN that
	// names one wins.
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "sundial-prefetcher/" + s.NodeID
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	metrics := prefetch.NewMetrics(env.Registry, s.Election)
	lcfg := leader.Config{
		Servers:        s.zkServers(),
		Path:           s.Election,
		NodeID:         s.NodeID,
		SessionTimeout: s.ZKSessionTimeout,
		Logger:         env.Logger,
		Clock:          clk,
		OnTransition:   metrics.ObserveElection,
	}
	if err := s.ZKSecurity.Apply(&lcfg); err != nil {
		pool.Close()
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	store := stage.New(pool, env.Logger, stage.WithTracer(env.Tracing.Tracer("github.com/sundialhq/sundial/services/prefetcher")))
	listener := prefetch.NewListener(pool.Config().ConnConfig.Copy(), jobwake.Channel, env.Logger, clk)
	sweeper, err := retention.New(s.Retention, pool, env.Logger, clk, retention.NewMetrics(env.Registry))
	if err != nil {
		pool.Close()
		return nil, err
	}
	// staging is what stages: the single leader's elector and loop, or the
	// range group's coordinator and the loop it runs per range. The first
	// item starts first and stops last.
	var staging []lifecycle.Service
	var zkCheck func(context.Context) error
	if s.Ranges > 0 {
		loop, err := prefetch.NewRanges(s.Config, s.Ranges, store, listener.C(), env.Logger, clk, metrics, sweeper)
		if err != nil {
			pool.Close()
			return nil, err
		}
		coord, err := rangeleader.New(rangeleader.Config{
			Servers: lcfg.Servers, Path: s.Election, NodeID: s.NodeID, Ranges: s.Ranges,
			SessionTimeout: s.ZKSessionTimeout, Logger: env.Logger, Clock: clk,
			Dialer: lcfg.Dialer, Credentials: lcfg.Credentials,
			Work: loop.Work, OnChange: metrics.ObserveRanges,
		})
		if err != nil {
			pool.Close()
			return nil, err
		}
		// The coordinator stops first: it ends every range's work (rolling
		// back in-flight transactions) and closes the session, which hands
		// the ranges to the others at once.
		staging, zkCheck = []lifecycle.Service{loop, coord}, coord.Check
	} else {
		elector, err := leader.New(lcfg)
		if err != nil {
			pool.Close()
			return nil, err
		}
		loop, err := prefetch.New(s.Config, elector, store, listener.C(), env.Logger, clk, metrics, sweeper)
		if err != nil {
			pool.Close()
			return nil, err
		}
		staging, zkCheck = []lifecycle.Service{elector, loop}, elector.Check
	}
	keyspace, reg := s.CassandraKeyspace, env.Registry
	cc := ledger.ConnectConfig{Hosts: splitList(s.CassandraHosts)}
	if err := s.CassandraSecurity.Apply(&cc); err != nil {
		pool.Close()
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
		return ledger.NewWriter(sess, keyspace), sess.Close, nil
	}
	drainer, err := ledgerdrain.New(s.Drain, pool, dial, env.Logger, clk, ledgerdrain.NewMetrics(env.Registry))
	if err != nil {
		pool.Close()
		return nil, err
	}
	env.Admin.AddCheck("postgres", store.Ping)
	env.Admin.AddCheck("zookeeper", zkCheck)
	env.Logger.Info("prefetcher configured", "node_id", s.NodeID, "election", s.Election, "ranges", s.Ranges,
		"window", s.Window, "chunk", s.Chunk, "tick", s.Tick, "batch_size", s.BatchSize, "zk_session_timeout", s.ZKSessionTimeout,
		"catch_up_rate", s.CatchUpRate, "fill_step", s.FillStep, "retention", s.Retention.Retention)
	return append([]lifecycle.Service{poolCloser{pool}, listener, drainer}, staging...), nil
}

// poolCloser closes the pool when the group stops, after everything that
// uses it.
type poolCloser struct{ pool *pgxpool.Pool }

func (poolCloser) Start(context.Context) error { return nil }
func (p poolCloser) Stop()                     { p.pool.Close() }
