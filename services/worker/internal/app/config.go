package app

import (
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"

	"github.com/sundialhq/sundial/services/worker/internal/completer"
	"github.com/sundialhq/sundial/services/worker/internal/lagexporter"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
)

// Config is every worker setting, loaded once in main from flags and
// SUNDIAL_* environment variables (see docs/architecture/README.md).
type Config struct {
	KafkaBrokers string
	TopicPrefix  string
	Group        string

	RedisAddr      string
	RedisKeyPrefix string

	CassandraHosts    string
	CassandraKeyspace string
	LedgerMigrate     bool

	PostgresDSN string
	// PostgresMaxConns bounds the settling pool (retries, dead letters,
	// completions).
	PostgresMaxConns int
	// CompletionRate paces the completer: jobs completed per second after
	// their last slot settled (package completer).
	CompletionRate      float64
	ClockOffset         time.Duration
	ClockSampleInterval time.Duration

	// SigningSecret (or SigningSecretFile) is the platform's secret, which
	// signs only during a migration from it: every request sent before
	// PlatformSignatureUntil also carries its signature. Zero: never.
	SigningSecret          string
	SigningSecretFile      string
	PlatformSignatureUntil time.Time
	// SigningKEKFile opens the tenants' own signing keys in Postgres
	// (pkg/postgres/signingkey), which sign every request. SigningKeyRefresh is how
	// often they are reloaded.
	SigningKEKFile    string
	SigningKeyRefresh time.Duration

	WorkerID string
	// InstanceID makes the worker a static member of the consumer group
	// (see GroupInstanceID): "auto", an explicit id, or empty for a
	// dynamic member.
	InstanceID string
	// adminAddr is the --admin-addr flag (pkg/process/daemon's, registered
	// before these), read by GroupInstanceID; nil outside main.
	adminAddr flag.Value
	Executors int
	// Procs is "auto" (GOMAXPROCS follows the load, see package procs), a
	// fixed GOMAXPROCS, or empty: leave GOMAXPROCS alone (a worker built in
	// a test process, beside others).
	Procs string
	// GCPercent is the collector's target (GOGC) the worker sets at
	// start; 0 leaves it alone (the GOGC variable's, or 100).
	GCPercent int
	// CriticalExecutors are executors on top of Executors that take only
	// CRITICAL firings.
	CriticalExecutors int
	// HighExecutorsPercent, MediumExecutorsPercent and LowExecutorsPercent
	// cap the share of Executors a priority may occupy together with the
	// less urgent ones (readyq.Limits): the rest is kept for the more
	// urgent.
	HighExecutorsPercent   int
	MediumExecutorsPercent int
	LowExecutorsPercent    int
	LeaseTTL               time.Duration
	// PrepareLead: how long before its instant a firing is leased;
	// PrepareGrain: prepare instants are rounded down to it, so spread
	// firings share lease calls; PrepareBatch: firings per lease call;
	// SettleBatch: attempts per marker call.
	PrepareLead  time.Duration
	PrepareGrain time.Duration
	PrepareBatch int
	SettleBatch  int
	SettleLinger time.Duration
	DoneTTL      time.Duration
	// LedgerRunningDelay: an attempt still running after it is recorded as
	// RUNNING; a shorter one by its outcome alone (one ledger write).
	LedgerRunningDelay time.Duration
	// LedgerLinger: how long the recorder gathers records into a group
	// before writing it; LedgerQuiet ends a group sooner when no record
	// came for that long; LedgerGroupSize caps a group.
	LedgerLinger time.Duration
	LedgerQuiet  time.Duration
	// LedgerMaxYield: how long the recorder may hold records back while
	// due firings wait for an executor (0: never).
	LedgerMaxYield time.Duration
	// LedgerSpillAfter: how long the ledger may keep refusing a group of
	// records before they are spilled to Postgres.
	LedgerSpillAfter time.Duration
	LedgerGroupSize  int
	SessionTimeout   time.Duration
	// LivenessTTL: how long after its last refresh this worker's leases
	// stay its own (lease.WithLiveness); 0 ties leases to their TTL only.
	LivenessTTL time.Duration
	// EvictDead: take a peer whose liveness key lapsed out of the consumer
	// group at once (package evict), instead of waiting out its session.
	EvictDead          bool
	RevokeDrainTimeout time.Duration
	CommitInterval     time.Duration
	// CatchUpRate paces catch-up firings that arrive after their
	// instants (per second; the prefetcher's --catch-up-rate).
	CatchUpRate float64
	// MisfireThreshold: a SCHEDULE firing reaching the fire stage later
	// than this after its instant is judged by its job's misfire policy
	// (package misfire; the prefetcher's --misfire-threshold).
	MisfireThreshold time.Duration
	MaxHeld          int
	// MediumHeldPercent and LowHeldPercent bound the firings a priority's
	// topic may hold, with the less urgent ones', to a share of MaxHeld
	// (consumer.Config.HeldShares); 0: no share of its own.
	MediumHeldPercent int
	LowHeldPercent    int
	FetchAhead        time.Duration
	// StagingWindow is the prefetcher's --window: a record the relay
	// produced longer ago than this is a firing past its instant, counted
	// in the due backlog (sundial_worker_due_backlog_firings).
	StagingWindow time.Duration
	// LagInterval is how often the group's lag and the due backlog are
	// read from the broker (lagexporter.Config.Interval).
	LagInterval       time.Duration
	AllowKafkaTargets string

	// Failure handling and safety.
	MaxDeliveries    int
	AllowTargetAddrs string
	DenyTargetAddrs  string
	HostRate         float64
	HostBurst        int
	BreakerFailures  int
	BreakerCooldown  time.Duration
	SecretsDir       string

	// Limits across the cluster: --host-rate, the breakers,
	// HostConcurrency and the tenants' firing-rate quotas held in Redis
	// (ClusterLimits), or by each worker alone.
	ClusterLimits     bool
	HostConcurrency   int
	TenantFiringRate  float64
	TenantFiringBurst int
	QuotasFile        string
	LimitsTimeout     time.Duration
	LimitsFallback    time.Duration
	BreakerSync       time.Duration
	quotas            *quotas.Tenants // loaded by Validate

	// MetricsMaxTenants bounds the tenant label of the firing metrics.
	MetricsMaxTenants int
	// MetricsJobIDs are the watched jobs, comma-separated: each gets
	// per-job firing and lateness series (see WatchedJobs).
	MetricsJobIDs string

	// TLS and credentials towards the components (--redis-*, --kafka-*,
	// --cassandra-*; see lease.Security, kafkaconn.Security and
	// ledger.Security). Off by default.
	RedisSecurity     lease.Security
	KafkaSecurity     kafkaconn.Security
	CassandraSecurity ledger.Security
}

// Register adds the worker's flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", "127.0.0.1:9092", "comma-separated Kafka seed brokers")
	fs.StringVar(&c.TopicPrefix, "topic-prefix", "sundial", "prefix of the priority topics (<prefix>.fire.critical …)")
	fs.StringVar(&c.Group, "group", "sundial-workers", "Kafka consumer group of the workers")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address for leases and fences; several, comma-separated, are a Redis Cluster's nodes")
	fs.StringVar(&c.RedisKeyPrefix, "redis-key-prefix", "sundial:", "prefix of every Redis key")
	fs.StringVar(&c.CassandraHosts, "cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points for the ledger")
	fs.StringVar(&c.CassandraKeyspace, "cassandra-keyspace", "sundial", "ledger keyspace")
	fs.BoolVar(&c.LedgerMigrate, "ledger-migrate", false, "create the ledger keyspace and tables at start (normally the api does)")
	fs.StringVar(&c.PostgresDSN, "postgres-dsn", "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable",
		"Postgres: its clock, and where attempts settle (retries and dead letters staged, one-off and last-slot jobs completed); empty: fire by the local clock, record failures FAILED without retrying")
	fs.IntVar(&c.PostgresMaxConns, "postgres-max-conns", 16,
		"connections for settling attempts; a herd of one-off jobs completes one transaction per firing, so this bounds how fast it drains")
	fs.Float64Var(&c.CompletionRate, "completion-rate", completer.DefaultRate,
		"most jobs per second this worker marks completed after their last slot settled (queued in job_completions meanwhile), so a burst of one-off jobs leaves Postgres's cores to the firings")
	fs.DurationVar(&c.ClockOffset, "clock-offset", 0, "for tests: shift this worker's own clock by this much, as if it were skewed")
	fs.DurationVar(&c.ClockSampleInterval, "clock-sample-interval", 30*time.Second, "how often the offset from the database clock is re-estimated")
	fs.StringVar(&c.SigningSecret, "signing-secret", "", "the platform's HMAC secret (or --signing-secret-file), which signs requests only before --platform-signature-until, beside the tenant's keys")
	fs.StringVar(&c.SigningSecretFile, "signing-secret-file", "", "file holding the platform's signing secret")
	fs.Func("platform-signature-until", "RFC 3339 instant, e.g. 2026-12-31T00:00:00Z: requests sent before it also carry a signature by the platform's --signing-secret, after their tenant's keys, while targets move from the platform secret to their tenant's key; from it on, and without it, the platform secret signs nothing", func(v string) error {
		if v == "" {
			c.PlatformSignatureUntil = time.Time{}
			return nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return fmt.Errorf("not an RFC 3339 instant such as 2026-12-31T00:00:00Z: %q", v)
		}
		c.PlatformSignatureUntil = t
		return nil
	})
	fs.StringVar(&c.WorkerID, "worker-id", instances.DefaultName(), "this worker's name in leases, ledger rows and the consumer group")
	fs.StringVar(&c.InstanceID, "instance-id", "auto", "static consumer-group member id: a worker killed and restarted with the same id gets its partitions back at once, without a rebalance, and a graceful stop leaves the group; it must be unique per worker and stable across its restarts. auto: <hostname>-<admin port> (workers on one host cannot share the admin port); empty: a dynamic member")
	if f := fs.Lookup("admin-addr"); f != nil {
		c.adminAddr = f.Value
	}
	fs.IntVar(&c.Executors, "executors", 128, "attempts in flight at most (executor pool size)")
	fs.IntVar(&c.GCPercent, "gc-percent", 200, "the garbage collector's target, as GOGC: a collection starts when the heap has grown this many percent past what the last one left live. A worker's live heap is mostly the firings it holds (about 1.3 KB each, up to --max-held), which every collection marks, so at 100 a worker holding a 5,000/s herd's window collected every 3-5 s and its fire holder fell up to 2.4 s behind; 200 collects half as often for about half again the memory (4.5 KB a held firing instead of 3). 0 leaves the runtime's (the GOGC variable's, else 100); the GOGC variable, when set, wins")
	fs.StringVar(&c.Procs, "procs", "auto", "GOMAXPROCS: auto runs on one core's worth of threads while the worker uses under 0.45 of a core over 10 s and on all of them (the CPU or container limit) from 0.6 of a core over 1 s or a herd on (fewer cross-thread wake-ups per firing at a light load); a number fixes it (the GOMAXPROCS variable, when set, wins over auto)")
	fs.IntVar(&c.CriticalExecutors, "critical-executors", 4, "executors on top of --executors reserved for CRITICAL firings, so one finds an executor free however busy the rest are")
	fs.IntVar(&c.HighExecutorsPercent, "high-executors-percent", 90,
		"HIGH, MEDIUM and LOW attempts together occupy at most this percentage of --executors; the rest is kept for CRITICAL (on top of --critical-executors)")
	fs.IntVar(&c.MediumExecutorsPercent, "medium-executors-percent", 80,
		"MEDIUM and LOW attempts together occupy at most this percentage of --executors, so slow MEDIUM and LOW targets never hold up a HIGH or CRITICAL firing")
	fs.IntVar(&c.LowExecutorsPercent, "low-executors-percent", 50,
		"LOW attempts occupy at most this percentage of --executors; LOW firings past it wait in the ready queue")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 5*time.Second, "execution lease lifetime past the instant; a crashed worker blocks an execution this long (keep it near --session-timeout: a dead worker's firings leased ahead are free when its partitions move), long attempts renew every third of it")
	fs.DurationVar(&c.PrepareLead, "prepare-lead", prepare.DefaultConfig.Lead,
		"lease firings this long before their instant, many per Redis call (0: at the instant); a Redis outage shorter than this does not delay firings already leased")
	fs.DurationVar(&c.PrepareGrain, "prepare-grain", prepare.DefaultConfig.Grain,
		"round each firing's prepare instant down to a multiple of this, so firings spread over time are leased together (each between --prepare-lead and --prepare-lead plus this ahead; 0: one by one)")
	fs.IntVar(&c.PrepareBatch, "prepare-batch", prepare.DefaultConfig.Batch, "firings leased by one Redis call at most")
	fs.IntVar(&c.SettleBatch, "settle-batch", settle.DefaultStageConfig.Batch, "finished attempts whose markers one Redis call writes at most")
	fs.DurationVar(&c.SettleLinger, "settle-linger", settle.DefaultStageConfig.Linger,
		"wait this long after an attempt ends for others to settle with it (one marker call for all); their leases are held meanwhile")
	fs.DurationVar(&c.LedgerRunningDelay, "ledger-running-delay", recorder.DefaultConfig.RunningDelay,
		"record an attempt as RUNNING in the ledger once it has run this long (0: at once); a shorter attempt is recorded by its outcome alone, one write instead of two")
	fs.DurationVar(&c.LedgerLinger, "ledger-linger", recorder.DefaultConfig.Linger,
		"gather ledger records at most this long before writing them as one group (many records per Cassandra batch); an attempt shows in history at most about this much later")
	fs.DurationVar(&c.LedgerQuiet, "ledger-quiet", recorder.DefaultConfig.Quiet,
		"write a gathered group sooner once no record has come for this long (a herd's records are written just after it; a steady stream fills groups for the whole --ledger-linger)")
	fs.DurationVar(&c.LedgerMaxYield, "ledger-max-yield", recorder.DefaultConfig.MaxYield,
		"while due firings wait for an executor (a burst, a backlog), hold the ledger records back for at most this long, so the cores go to the requests first; a firing is finished (its offset committed) once its record is written (0: never hold back)")
	fs.DurationVar(&c.LedgerSpillAfter, "ledger-spill-after", recorder.DefaultConfig.SpillAfter,
		"records Cassandra keeps refusing this long are parked in Postgres (ledger_pending) and written by the prefetcher's drainer once it answers, so a ledger outage holds up no firing (needs --postgres-dsn)")
	fs.IntVar(&c.LedgerGroupSize, "ledger-group-size", recorder.DefaultConfig.GroupSize, "ledger records written by one group at most")
	fs.DurationVar(&c.DoneTTL, "done-ttl", lease.DefaultMarkerTTL, "how long a done marker and a delivery counter live in Redis, rejecting redeliveries of a finished execution; a firing staged more than half of it ago, and every backfill, is checked against the ledger before it fires instead (about 400 bytes of Redis per firing for this long)")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", 2*time.Second, "Kafka group session timeout: how soon a dead worker's partitions move (raised to the brokers' group.min.session.timeout.ms, which is 6s unless lowered)")
	fs.DurationVar(&c.LivenessTTL, "liveness-ttl", time.Second, "this worker's liveness key in Redis lives this long, refreshed every quarter of it; another worker takes the leases of a worker whose key is gone (a killed worker's firings are free within it) and, with --evict-dead, takes it out of the consumer group; 0: leases end only with their TTL")
	fs.BoolVar(&c.EvictDead, "evict-dead", true, "take a worker whose liveness key lapsed out of the consumer group at once (a LeaveGroup by its instance id), so its partitions move within --liveness-ttl instead of the group's session timeout (at least the brokers' group.min.session.timeout.ms); needs --liveness-ttl and --instance-id")
	fs.DurationVar(&c.RevokeDrainTimeout, "revoke-drain-timeout", 20*time.Second, "how long a rebalance (and shutdown) waits for executing firings of revoked partitions; keep it below --drain-timeout")
	fs.DurationVar(&c.CommitInterval, "commit-interval", time.Second, "how often offsets are committed")
	fs.Float64Var(&c.CatchUpRate, "catch-up-rate", 100, "release catch-up firings that arrive after their instants at most this many per second, keeping the prefetcher's spacing (set it to the prefetcher's --catch-up-rate; 0: not paced)")
	fs.DurationVar(&c.MisfireThreshold, "misfire-threshold", 5*time.Second, "a firing of a job's schedule that reaches the fire stage later than this after its instant is judged by the job's misfire policy (SKIP, RUN_ONCE, RUN_ALL, grace), as the prefetcher judges unstaged slots; set it to the prefetcher's --misfire-threshold")
	fs.IntVar(&c.MaxHeld, "max-held", 800_000, "while this many HIGH, MEDIUM and LOW firings wait in memory (held, prepared, ready or executing), only the partitions furthest behind go on fetching, and past a quarter more none (CRITICAL always does; MEDIUM and LOW stop sooner, see --medium-held-percent, --low-held-percent); about 4.5 KB of memory each at the default --gc-percent (3 KB at 100). Keep it above rate × staging window: a worker that holds only part of the window leaves firings due now in Kafka behind later ones whenever staging is not in slot order (jobs registered together, several prefetch ranges)")
	fs.IntVar(&c.MediumHeldPercent, "medium-held-percent", 80,
		"MEDIUM and LOW firings together may hold at most this percentage of --max-held, then their topics pause; HIGH keeps fetching into the rest")
	fs.IntVar(&c.LowHeldPercent, "low-held-percent", 50,
		"LOW firings may hold at most this percentage of --max-held, then the LOW topic pauses and its backlog waits in Kafka; the other topics keep fetching")
	fs.DurationVar(&c.FetchAhead, "fetch-ahead", 0, "pause fetching a partition once its fetched firings reach this far past now; 0 (the default): fetch the whole staging window, bounded by --max-held. A horizon saves memory but a firing staged after later ones (a new, resumed or edited job's next slot, a trigger, a retry) waits in Kafka behind them until the horizon passes them: up to window minus horizon late")
	fs.DurationVar(&c.LagInterval, "lag-interval", lagexporter.DefaultInterval, "how often the group's lag and the due backlog (sundial_worker_group_lag_records, sundial_worker_due_backlog_firings) are read from the broker: a read is one ListOffsets and one OffsetFetch per worker")
	fs.DurationVar(&c.StagingWindow, "staging-window", 2*time.Minute, "the prefetcher's --window: records in Kafka produced longer ago than this are firings past their instant, counted in the due backlog the autoscaler reads (sundial_worker_due_backlog_firings); keep it equal to the prefetcher's")
	fs.StringVar(&c.AllowKafkaTargets, "allow-kafka-targets", "*", "topic prefixes jobs may produce to, comma-separated; * any, empty none (platform topics are always refused)")
	fs.IntVar(&c.MaxDeliveries, "max-deliveries", 5, "an attempt taken this many times without finishing (its workers crashed on it) is dead-lettered as poison on the next delivery; 0 never")
	fs.StringVar(&c.AllowTargetAddrs, "allow-target-addrs", "", "comma-separated CIDRs, IPs or IP:port that targets and callbacks may reach even though the outbound policy refuses them (loopback, link-local, metadata)")
	fs.StringVar(&c.DenyTargetAddrs, "deny-target-addrs", "", "comma-separated CIDRs or IPs targets and callbacks must not reach, on top of the built-in ones (e.g. private ranges)")
	fs.Float64Var(&c.HostRate, "host-rate", 0, "requests per second per target host, in bursts of --host-burst (pkg/domain/gcra); 0 no limit")
	fs.IntVar(&c.HostBurst, "host-burst", 100, "burst of the per-host rate limit")
	fs.IntVar(&c.BreakerFailures, "breaker-failures", 20, "consecutive failed attempts (connection, timeout, 5xx) to one host that open its circuit breaker; 0 disables breakers")
	fs.DurationVar(&c.BreakerCooldown, "breaker-cooldown", 30*time.Second, "how long an open circuit breaker fails attempts fast before letting a probe through")
	fs.IntVar(&c.MetricsMaxTenants, "metrics-max-tenants", metrics.DefaultMaxTenants, "tenants labelled by name on sundial_worker_firings_total and sundial_worker_fire_lateness_seconds; firings of any further tenant are labelled tenant=\"other\" (bounds the series count)")
	fs.StringVar(&c.MetricsJobIDs, "metrics-job-ids", "", "comma-separated job ids (UUIDs) to watch: their firings are also counted on sundial_worker_job_firings_total and sundial_worker_job_lateness_seconds, labelled by job_id (about 36 series per job); other jobs add none")
	fs.StringVar(&c.SigningKEKFile, "signing-key-encryption-key-file", "", "the api's --signing-key-encryption-key-file (required): sign each tenant's requests with its own keys from Postgres, making a tenant's first key if it has none")
	fs.DurationVar(&c.SigningKeyRefresh, "signing-key-refresh", 5*time.Second, "how often the tenants' signing keys are reloaded from Postgres (a new key is used within this; an expired one is dropped at its expiry)")
	fs.BoolVar(&c.ClusterLimits, "cluster-limits", true, "hold --host-rate, --host-concurrency, the circuit breakers and the tenants' firing-rate quotas across every worker, in Redis (a second worker does not double them); false: each worker counts alone")
	fs.IntVar(&c.HostConcurrency, "host-concurrency", 0, "attempts in flight to one target host at most (across the cluster with --cluster-limits); a firing over it waits for a slot; 0 no cap")
	fs.Float64Var(&c.TenantFiringRate, "tenant-firing-rate", 0, "firings per second each tenant's firings may go out at (across the cluster with --cluster-limits); a tenant over it has its firings delayed, in order, never dropped, while other tenants keep their timing; --quotas-file overrides it per tenant; 0 no quota")
	fs.IntVar(&c.TenantFiringBurst, "tenant-firing-burst", 10, "firings a tenant may fire at once above --tenant-firing-rate")
	fs.StringVar(&c.QuotasFile, "quotas-file", "", "the api's quotas file (YAML); the worker reads firing_rate_per_second and firing_burst from its defaults and tenants, over --tenant-firing-rate and --tenant-firing-burst")
	fs.DurationVar(&c.LimitsTimeout, "limits-timeout", 100*time.Millisecond, "bounds one Redis call of the cluster limits; a call that fails or takes longer falls back to per-process limits for --limits-fallback")
	fs.DurationVar(&c.LimitsFallback, "limits-fallback", time.Second, "after a Redis call of the cluster limits failed, how long each worker counts its limits alone before asking Redis again (no firing waits on Redis meanwhile)")
	fs.DurationVar(&c.BreakerSync, "breaker-sync", 250*time.Millisecond, "with --cluster-limits, how long a host's circuit breaker state read from Redis is trusted for firings no other limit needs a call for: a breaker another worker opened is seen within this")
	fs.StringVar(&c.SecretsDir, "secrets-dir", "", "directory with one sub-directory per tenant and one file per secret in it (<dir>/<tenant>/<NAME>) for {{secret:NAME}} header references; a job resolves only its own tenant's secrets")
	c.RedisSecurity.Register(fs)
	c.KafkaSecurity.Register(fs)
	c.CassandraSecurity.Register(fs)
}

// Validate records problems, each naming its flag.
func (c *Config) Validate(p *config.Problems) {
	if len(splitList(c.KafkaBrokers)) == 0 {
		p.Addf("kafka-brokers", "must name at least one broker")
	}
	if c.TopicPrefix == "" {
		p.Addf("topic-prefix", "must not be empty")
	}
	if c.Group == "" {
		p.Addf("group", "must not be empty")
	}
	if _, err := lease.ParseAddrs(c.RedisAddr); err != nil {
		p.Addf("redis-addr", "%v", err)
	}
	if len(splitList(c.CassandraHosts)) == 0 {
		p.Addf("cassandra-hosts", "must name at least one host")
	}
	if c.CassandraKeyspace == "" {
		p.Addf("cassandra-keyspace", "must not be empty")
	}
	switch {
	case c.SigningSecret != "" && c.SigningSecretFile != "":
		p.Addf("signing-secret", "give --signing-secret or --signing-secret-file, not both")
	case !c.PlatformSignatureUntil.IsZero() && c.SigningSecret == "" && c.SigningSecretFile == "":
		p.Addf("platform-signature-until", "needs the platform's secret (--signing-secret or --signing-secret-file) to sign with")
	}
	if c.WorkerID == "" {
		p.Addf("worker-id", "must not be empty")
	}
	if id := c.GroupInstanceID(); len(id) > 249 || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		p.Addf("instance-id", "must be at most 249 of [a-zA-Z0-9._-] (Kafka's rule), got %q", id)
	}
	if c.Executors < 1 {
		p.Addf("executors", "must be at least 1, got %d", c.Executors)
	}
	if _, _, err := c.procsSetting(); err != nil {
		p.Addf("procs", "%v", err)
	}
	if c.GCPercent < 0 {
		p.Addf("gc-percent", "must be 0 (leave the runtime's) or a percentage of at least 1, got %d", c.GCPercent)
	}
	if c.CriticalExecutors < 0 {
		p.Addf("critical-executors", "must not be negative, got %d", c.CriticalExecutors)
	}
	for _, share := range []struct {
		flag string
		pct  int
	}{{"high-executors-percent", c.HighExecutorsPercent}, {"medium-executors-percent", c.MediumExecutorsPercent}, {"low-executors-percent", c.LowExecutorsPercent}} {
		if share.pct < 1 || share.pct > 100 {
			p.Addf(share.flag, "must be between 1 and 100, got %d", share.pct)
		}
	}
	// Each cap counts its priority with the less urgent ones, so a larger
	// share below a smaller one would promise executors it cannot give.
	if c.MediumExecutorsPercent > c.HighExecutorsPercent {
		p.Addf("medium-executors-percent", "must not exceed --high-executors-percent (%d), got %d", c.HighExecutorsPercent, c.MediumExecutorsPercent)
	}
	if c.LowExecutorsPercent > c.MediumExecutorsPercent {
		p.Addf("low-executors-percent", "must not exceed --medium-executors-percent (%d), got %d", c.MediumExecutorsPercent, c.LowExecutorsPercent)
	}
	if c.PrepareLead < 0 || c.PrepareLead > 10*time.Minute {
		p.Addf("prepare-lead", "must be between 0 and 10m, got %s", c.PrepareLead)
	}
	if c.PrepareGrain < 0 || c.PrepareGrain > time.Second {
		p.Addf("prepare-grain", "must be between 0 and 1s, got %s", c.PrepareGrain)
	}
	if c.PrepareBatch < 1 || c.PrepareBatch > 4096 {
		p.Addf("prepare-batch", "must be between 1 and 4096, got %d", c.PrepareBatch)
	}
	if c.SettleLinger < 0 || c.SettleLinger > time.Second {
		p.Addf("settle-linger", "must be between 0 and 1s, got %s", c.SettleLinger)
	}
	if c.SettleBatch < 1 || c.SettleBatch > 4096 {
		p.Addf("settle-batch", "must be between 1 and 4096, got %d", c.SettleBatch)
	}
	if c.LeaseTTL < 100*time.Millisecond {
		p.Addf("lease-ttl", "must be at least 100ms, got %s", c.LeaseTTL)
	}
	if c.PostgresMaxConns < 1 {
		p.Addf("postgres-max-conns", "must be at least 1, got %d", c.PostgresMaxConns)
	}
	if c.CompletionRate < 10 || c.CompletionRate > 1_000_000 {
		p.Addf("completion-rate", "must be in [10, 1000000] jobs per second, got %v", c.CompletionRate)
	}
	if c.LedgerLinger < 0 || c.LedgerLinger > 10*time.Second {
		p.Addf("ledger-linger", "must be between 0 and 10s, got %s", c.LedgerLinger)
	}
	if c.LedgerSpillAfter <= 0 || c.LedgerSpillAfter > 10*time.Minute {
		p.Addf("ledger-spill-after", "must be more than 0 and at most 10m, got %s", c.LedgerSpillAfter)
	}
	if c.LedgerMaxYield < 0 || c.LedgerMaxYield > time.Minute {
		p.Addf("ledger-max-yield", "must be between 0 and 1m, got %s", c.LedgerMaxYield)
	}
	if c.LedgerQuiet < 0 || c.LedgerQuiet > 10*time.Second {
		p.Addf("ledger-quiet", "must be between 0 and 10s, got %s", c.LedgerQuiet)
	}
	if c.LedgerGroupSize < 1 {
		p.Addf("ledger-group-size", "must be at least 1, got %d", c.LedgerGroupSize)
	}
	if c.LedgerRunningDelay < 0 {
		p.Addf("ledger-running-delay", "must not be negative, got %s", c.LedgerRunningDelay)
	}
	if c.DoneTTL < time.Minute {
		p.Addf("done-ttl", "must be at least a minute, got %s", c.DoneTTL)
	}
	if c.SessionTimeout < time.Second {
		p.Addf("session-timeout", "must be at least 1s, got %s", c.SessionTimeout)
	}
	if c.RevokeDrainTimeout <= 0 {
		p.Addf("revoke-drain-timeout", "must be positive")
	}
	if c.LivenessTTL != 0 && c.LivenessTTL < 400*time.Millisecond {
		p.Addf("liveness-ttl", "must be 0 or at least 400ms, got %s", c.LivenessTTL)
	}
	if strings.Contains(c.WorkerID, "/") {
		p.Addf("worker-id", "must not contain '/' (it prefixes lease holders), got %q", c.WorkerID)
	}
	if math.IsNaN(c.CatchUpRate) || c.CatchUpRate < 0 || c.CatchUpRate > 1_000_000 {
		p.Addf("catch-up-rate", "must be in [0, 1000000] firings per second, got %v", c.CatchUpRate)
	}
	if c.MisfireThreshold <= 0 {
		p.Addf("misfire-threshold", "must be positive, got %s", c.MisfireThreshold)
	}
	if c.CommitInterval <= 0 {
		p.Addf("commit-interval", "must be positive")
	}
	if c.ClockSampleInterval < time.Second {
		p.Addf("clock-sample-interval", "must be at least 1s")
	}
	if c.LagInterval < time.Second || c.LagInterval > 5*time.Minute {
		p.Addf("lag-interval", "must be between 1s and 5m, got %s", c.LagInterval)
	}
	if c.StagingWindow <= 0 {
		p.Addf("staging-window", "must be positive, got %s", c.StagingWindow)
	}
	if c.FetchAhead < 0 {
		p.Addf("fetch-ahead", "must not be negative, got %s", c.FetchAhead)
	}
	if c.MaxHeld < 1 {
		p.Addf("max-held", "must be at least 1")
	}
	if c.MediumHeldPercent < 1 || c.MediumHeldPercent > 100 {
		p.Addf("medium-held-percent", "must be between 1 and 100, got %d", c.MediumHeldPercent)
	}
	if c.LowHeldPercent < 1 || c.LowHeldPercent > 100 {
		p.Addf("low-held-percent", "must be between 1 and 100, got %d", c.LowHeldPercent)
	} else if c.LowHeldPercent > c.MediumHeldPercent {
		p.Addf("low-held-percent", "must not exceed --medium-held-percent (%d), got %d", c.MediumHeldPercent, c.LowHeldPercent)
	}
	if c.MetricsMaxTenants < 0 {
		p.Addf("metrics-max-tenants", "must not be negative")
	}
	if _, err := c.WatchedJobs(); err != nil {
		p.Addf("metrics-job-ids", "%v", err)
	}
	if c.MaxDeliveries < 0 {
		p.Addf("max-deliveries", "must not be negative")
	}
	if _, err := netpolicy.New(splitList(c.AllowTargetAddrs), nil); err != nil {
		p.Addf("allow-target-addrs", "%v", err)
	}
	if _, err := netpolicy.New(nil, splitList(c.DenyTargetAddrs)); err != nil {
		p.Addf("deny-target-addrs", "%v", err)
	}
	if c.HostRate < 0 {
		p.Addf("host-rate", "must not be negative")
	}
	if c.HostRate > 0 && c.HostBurst < 1 {
		p.Addf("host-burst", "must be at least 1 with a rate limit")
	}
	if c.BreakerFailures < 0 {
		p.Addf("breaker-failures", "must not be negative")
	}
	if c.BreakerFailures > 0 && c.BreakerCooldown <= 0 {
		p.Addf("breaker-cooldown", "must be positive")
	}
	c.validateLimits(p)
	if c.SecretsDir != "" {
		if st, err := os.Stat(c.SecretsDir); err != nil || !st.IsDir() {
			p.Addf("secrets-dir", "%q is not a readable directory", c.SecretsDir)
		}
	}
	switch {
	case c.SigningKEKFile == "":
		p.Addf("signing-key-encryption-key-file", "required: every request is signed with its tenant's keys, which it opens (the api's file)")
	default:
		if c.PostgresDSN == "" {
			p.Addf("signing-key-encryption-key-file", "needs --postgres-dsn, where the keys are")
		}
		if _, err := signingkey.LoadKEK(c.SigningKEKFile); err != nil {
			p.Addf("signing-key-encryption-key-file", "%v", err)
		}
	}
	if c.SigningKeyRefresh < 0 {
		p.Addf("signing-key-refresh", "must not be negative, got %s", c.SigningKeyRefresh)
	}
	c.RedisSecurity.Validate(p)
	c.KafkaSecurity.Validate(p)
	c.CassandraSecurity.Validate(p)
}

// Secret returns the platform's signing secret from the flag or the file;
// nil when neither is given.
func (c *Config) Secret() ([]byte, error) {
	if c.SigningSecret != "" {
		return []byte(c.SigningSecret), nil
	}
	if c.SigningSecretFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.SigningSecretFile)
	if err != nil {
		return nil, fmt.Errorf("signing-secret-file: %w", err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return nil, fmt.Errorf("signing-secret-file: %s is empty", c.SigningSecretFile)
	}
	return []byte(s), nil
}

// WatchedJobs returns the job ids of --metrics-job-ids in the canonical
// form firings carry (lower case, hyphenated), without duplicates, so a
// watched job's label matches whichever way the operator wrote its id.
func (c *Config) WatchedJobs() ([]string, error) {
	var out []string
	for _, id := range splitList(c.MetricsJobIDs) {
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, fmt.Errorf("%q is not a job id (a UUID)", id)
		}
		if s := u.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// GroupInstanceID is the consumer's static member id: --instance-id, with
// auto resolved to <hostname>-<admin port>. The worker id would not do: it
// names the process (hostname-pid), and a restart must come back as the
// same member. The admin port does: it is stable across restarts of one
// worker and differs between workers on one host, which cannot share it.
// Without an admin address (a worker built in a test), or with port 0 (the
// system picks one), auto is the worker id.
func (c *Config) GroupInstanceID() string {
	if c.InstanceID != "auto" {
		return c.InstanceID
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "worker"
	}
	if c.adminAddr != nil {
		// Port 0 (the system picks one) names nothing stable, and every
		// worker of the host would share it: the worker id serves.
		if _, port, err := net.SplitHostPort(c.adminAddr.String()); err == nil && port != "" && port != "0" {
			return h + "-" + port
		}
	}
	return c.WorkerID
}

// procsSetting reads --procs: auto, a fixed GOMAXPROCS (> 0), or neither
// (empty: leave it alone).
func (c *Config) procsSetting() (auto bool, fixed int, err error) {
	switch c.Procs {
	case "auto":
		return true, 0, nil
	case "":
		return false, 0, nil
	}
	n, err := strconv.Atoi(c.Procs)
	if err != nil || n < 1 {
		return false, 0, fmt.Errorf("must be auto or a number of at least 1, got %q", c.Procs)
	}
	return false, n, nil
}

// validateLimits checks the limits' flags and resolves the tenants' quotas
// from --tenant-firing-rate, --tenant-firing-burst and --quotas-file.
func (c *Config) validateLimits(p *config.Problems) {
	if c.HostConcurrency < 0 {
		p.Addf("host-concurrency", "must not be negative, got %d", c.HostConcurrency)
	}
	if c.TenantFiringRate < 0 {
		p.Addf("tenant-firing-rate", "must not be negative, got %g", c.TenantFiringRate)
	}
	if c.TenantFiringBurst < 0 {
		p.Addf("tenant-firing-burst", "must not be negative, got %d", c.TenantFiringBurst)
	}
	if c.ClusterLimits {
		if c.LimitsTimeout <= 0 {
			p.Addf("limits-timeout", "must be positive, got %s", c.LimitsTimeout)
		}
		if c.LimitsFallback <= 0 {
			p.Addf("limits-fallback", "must be positive, got %s", c.LimitsFallback)
		}
		if c.BreakerSync < 0 {
			p.Addf("breaker-sync", "must not be negative, got %s", c.BreakerSync)
		}
	}
	q, err := c.resolveQuotas(quotas.FiringRate{Rate: max(c.TenantFiringRate, 0), Burst: max(c.TenantFiringBurst, 0)})
	if err != nil {
		p.Addf("quotas-file", "%v", err)
		return
	}
	c.quotas = q
}

// Quotas are the tenants' limits (the worker enforces their Firing): those
// Validate resolved, or resolved now from the flags and --quotas-file.
func (c *Config) Quotas() (*quotas.Tenants, error) {
	if c.quotas != nil {
		return c.quotas, nil
	}
	return c.resolveQuotas(quotas.FiringRate{Rate: c.TenantFiringRate, Burst: c.TenantFiringBurst})
}

// resolveQuotas resolves the quotas file over the firing-rate flags; the
// job limits' defaults are the api's flags, so the worker's view holds
// only those the file sets.
func (c *Config) resolveQuotas(firing quotas.FiringRate) (*quotas.Tenants, error) {
	var file quotas.File
	if c.QuotasFile != "" {
		f, err := quotas.LoadFile(c.QuotasFile)
		if err != nil {
			return nil, err
		}
		file = f
	}
	return quotas.Resolve(quotas.Limits{Firing: firing}, file)
}
