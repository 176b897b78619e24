package app

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"

	"github.com/sundialhq/sundial/services/prefetcher/internal/ledgerdrain"
	"github.com/sundialhq/sundial/services/prefetcher/internal/prefetch"
	"github.com/sundialhq/sundial/services/prefetcher/internal/retention"
)

// Config is every prefetcher setting, loaded once in main from flags and
// SUNDIAL_* environment variables (Register), then checked by Validate,
// which also resolves --chunk against --window.
type Config struct {
	PostgresDSN       string
	ZKAddrs           string
	ZKSessionTimeout  time.Duration
	CassandraHosts    string
	CassandraKeyspace string
	prefetch.Config
	Drain     ledgerdrain.Config
	Retention retention.Config
	// TLS and credentials towards ZooKeeper and Cassandra (--zk-*,
	// --cassandra-*; see rangeleader.Security, ledger.Security). Off by
	// default.
	ZKSecurity        rangeleader.Security
	CassandraSecurity ledger.Security
	// chunk is --chunk as given; Validate resolves it into Config.Chunk.
	chunk chunkFlag
	// Ranges is how many ranges the 256 partitions split into (default
	// 16), each led by one live prefetcher of the group at --election-path
	// (pkg/store/rangeleader); 1 is a single leader for every partition.
	Ranges int
}

// Register adds the prefetcher's flags to fs, with their defaults.
func (s *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.PostgresDSN, "postgres-dsn", "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable", "Postgres connection string (search_path selects the schema)")
	fs.StringVar(&s.ZKAddrs, "zk-addrs", "127.0.0.1:2181", "comma-separated ZooKeeper host:port list")
	fs.DurationVar(&s.ZKSessionTimeout, "zk-session-timeout", 3*time.Second, "ZooKeeper session timeout; a dead prefetcher's ranges move to the others about this long after it dies without closing its session")
	fs.StringVar(&s.Election, "election-path", "/sundial/elections/prefetcher", "ZooKeeper path of the range group (members under <election-path>/members, range locks under <election-path>/ranges)")
	fs.IntVar(&s.Ranges, "ranges", 16, "split the 256 job partitions into this many ranges (a divisor of 256; 16 is the tested choice) and spread them over every live prefetcher, each range with its own leader and epoch (each lock's path its leader_epochs key); 1: one leader stages every partition")
	fs.StringVar(&s.NodeID, "node-id", defaultNodeID(), "this member's name in ZooKeeper, leader_epochs and logs")
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
	fs.Float64Var(&s.Drain.MaxRate, "ledger-drain-max-rate", 5000, "most ledger records the drain writes per second, however healthy Cassandra is (its pace follows Cassandra's latency and errors below this)")
	fs.Float64Var(&s.Drain.MinRate, "ledger-drain-min-rate", 100, "ledger records per second the drain keeps writing while Cassandra fails, as probes that notice its recovery")
	fs.DurationVar(&s.Retention.Retention, "retention", 7*24*time.Hour, "completed and deleted jobs are purged this long after they completed or were deleted")
	fs.DurationVar(&s.Retention.Interval, "retention-interval", time.Minute, "interval between retention sweeps (run by range 0's leader)")
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

// Validate records every problem, each naming its flag.
func (s *Config) Validate(p *config.Problems) {
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
	switch {
	case s.Ranges == 0:
		// The single elected leader of earlier versions is one range now,
		// under another ZooKeeper layout and another fencing row: said at
		// start rather than mapped silently (docs/architecture/prefetcher.md).
		p.Addf("ranges", "0 (one elected leader) is gone: a single leader is --ranges 1; every prefetcher of the group must then run with it")
	case !prefetch.ValidRanges(s.Ranges):
		p.Addf("ranges", "must be a divisor of 256 (1 for a single leader), got %d", s.Ranges)
	}
	if len(splitList(s.CassandraHosts)) == 0 {
		p.Addf("cassandra-hosts", "must name at least one host")
	}
	if err := ledger.ValidKeyspace(s.CassandraKeyspace); err != nil {
		p.Addf("cassandra-keyspace", "%v", err)
	}
	if !(s.Drain.MinRate >= 1 && s.Drain.MinRate <= 1_000_000) {
		p.Addf("ledger-drain-min-rate", "must be in [1, 1000000] records per second, got %v", s.Drain.MinRate)
	} else if !(s.Drain.MaxRate >= s.Drain.MinRate && s.Drain.MaxRate <= 1_000_000) {
		p.Addf("ledger-drain-max-rate", "must be in [--ledger-drain-min-rate, 1000000] records per second, got %v", s.Drain.MaxRate)
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

func (s *Config) zkServers() []string { return splitList(s.ZKAddrs) }

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
