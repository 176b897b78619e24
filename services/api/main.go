// Command sundial-api is Sundial's api service: the gRPC JobService and
// DeadLetterService, job validation, tenants, quotas and the Postgres
// schema. See docs/architecture/api.md.
//
//	sundial-api [flags]          serve (applies migrations first unless --migrate-on-start=false)
//	sundial-api migrate [flags]  apply the Postgres migrations and the ledger schema, then exit
//	sundial-api dev-tls [flags]  make a development CA and loopback certificates (make run), then exit
//
// Every flag can also be set as SUNDIAL_<FLAG> (upper case, '-' as '_').
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/auth"
	"github.com/sundialhq/sundial/pkg/calendar"
	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/connsec"
	"github.com/sundialhq/sundial/pkg/daemon"
	"github.com/sundialhq/sundial/pkg/kafkaconn"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/ledger"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/migrations"
	"github.com/sundialhq/sundial/pkg/secrets"
	"github.com/sundialhq/sundial/pkg/signingkey"
	"github.com/sundialhq/sundial/pkg/telemetry"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/services/api/internal/history"
	"github.com/sundialhq/sundial/services/api/internal/httpapi"
	"github.com/sundialhq/sundial/services/api/internal/quota"
	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
	"github.com/sundialhq/sundial/services/api/internal/server"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/services/api/internal/topiccheck"
)

const defaultPostgresDSN = "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable"

// settings are the api's own flags, next to daemon.Common.
type settings struct {
	GRPCAddr string
	HTTPAddr string
	// ConsoleKeyFile holds the key sealing console sessions; ConsoleSecure
	// marks the cookie Secure behind a TLS-terminating proxy;
	// ConsolePrometheus is where the overview reads each tenant's series,
	// and ConsoleOperators the tenants shown the whole platform's.
	ConsoleKeyFile    string
	ConsoleSecure     bool
	ConsolePrometheus string
	ConsoleOperators  string
	PostgresDSN       string
	RedisAddr         string
	RedisKeyPrefix    string
	CassandraHosts    string
	CassandraKeyspace string
	CassandraRepl     string
	TokensFile        string
	Tokens            string
	MigrateOnStart    bool
	GRPCStopTimeout   time.Duration
	QuotasFile        string
	QuotaDefaults     quota.Limits
	RateLimit         ratelimit.Config
	ReleaseLead       time.Duration
	// IdempotencyKeyTTL is how long a CreateJob idempotency key lasts.
	IdempotencyKeyTTL time.Duration
	// TLS and credentials towards Redis and Cassandra (--redis-*,
	// --cassandra-*; see lease.Security, ledger.Security). Off by default.
	RedisSecurity     lease.Security
	CassandraSecurity ledger.Security
	// KafkaBrokers, when set, is the cluster Kafka targets produce to: a
	// job naming a topic missing there is refused (InvalidArgument on
	// target.kafka.topic) rather than dead-lettering every firing.
	KafkaBrokers  string
	KafkaSecurity kafkaconn.Security
	// SecretsDir is the workers' target-secret directory
	// (<dir>/<tenant>/<name>), read for names only: a job referencing a
	// secret its tenant lacks is refused.
	SecretsDir string
	// SigningKEKFile holds the key-encryption key sealing tenants' webhook
	// signing keys in Postgres (pkg/signingkey); empty: SigningKeyService
	// is off.
	SigningKEKFile string
	// TLS is the certificate both ports serve (--tls-*, pkg/connsec) and
	// the gRPC port's client CAs; HTTPClientCAFile the HTTP port's, apart
	// because a browser on the console seldom has a client certificate
	// while a service calling gRPC can. AllowPlaintext lets a port that
	// is not on loopback serve without TLS.
	TLS              connsec.ServerTLS
	HTTPClientCAFile string
	AllowPlaintext   bool

	fs     *flag.FlagSet   // to tell flags given from defaults
	tokens *auth.Tokens    // loaded by validate
	kek    *signingkey.KEK // loaded by validate
	quotas *quota.Quotas   // loaded by validate
}

func (s *settings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "address the gRPC JobService listens on")
	fs.StringVar(&s.HTTPAddr, "http-addr", "", "address the HTTP/JSON API (/v1/) and the web console (/) listen on, e.g. 127.0.0.1:8080; empty (the default): no HTTP listener")
	fs.StringVar(&s.ConsoleKeyFile, "console-session-key-file", "", "file of at least 32 bytes sealing the console's session cookies; replicas behind one load balancer need the same (empty: a random key, sessions end on restart)")
	fs.BoolVar(&s.ConsoleSecure, "console-secure-cookies", false, "mark the console's session cookie Secure even on plain HTTP (TLS terminated in front of the api); always set over TLS")
	fs.StringVar(&s.ConsoleOperators, "console-operator-tenants", "", "comma-separated tenants whose console sessions also see the whole platform on the overview (every tenant's firings, consumer lag, outbox, components, leaders; needs --console-prometheus-url): the platform team's tenant, not its users'")
	fs.StringVar(&s.ConsolePrometheus, "console-prometheus-url", "", "base URL of a Prometheus that scrapes the workers, e.g. http://127.0.0.1:9091; the console's overview charts each tenant's firings and lateness of the last hour from it (empty: no charts)")
	fs.StringVar(&s.PostgresDSN, "postgres-dsn", defaultPostgresDSN, "Postgres connection string (its search_path picks the schema)")
	fs.StringVar(&s.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address, where job versions are published for workers")
	fs.StringVar(&s.RedisKeyPrefix, "redis-key-prefix", lease.DefaultPrefix, "prefix of every Redis key (must match the workers')")
	fs.StringVar(&s.CassandraHosts, "cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points of the execution ledger")
	fs.StringVar(&s.CassandraKeyspace, "cassandra-keyspace", "sundial", "Cassandra keyspace of the execution ledger")
	fs.StringVar(&s.CassandraRepl, "cassandra-replication", ledger.DefaultReplication, "replication map of the ledger keyspace when the api creates it")
	fs.StringVar(&s.TokensFile, "tokens-file", "", "YAML or JSON file mapping bearer token to tenant")
	fs.StringVar(&s.Tokens, "tokens", "", "bearer tokens as token=tenant,token=tenant (added to --tokens-file)")
	fs.BoolVar(&s.MigrateOnStart, "migrate-on-start", true, "apply the Postgres migrations and create the ledger's keyspace and tables before serving")
	fs.DurationVar(&s.GRPCStopTimeout, "grpc-stop-timeout", 15*time.Second, "how long a shutdown waits for in-flight gRPC calls before cutting them off")
	fs.StringVar(&s.QuotasFile, "quotas-file", "", "YAML file of quota defaults and per-tenant overrides (see docs/architecture/api.md)")
	d := quota.DefaultLimits()
	fs.IntVar(&s.QuotaDefaults.MaxJobs, "quota-max-jobs", d.MaxJobs, "default per-tenant limit of jobs not deleted (0: no limit)")
	fs.DurationVar(&s.QuotaDefaults.MinInterval, "quota-min-interval", d.MinInterval, "default per-tenant minimum gap between two slots of a schedule (0: no minimum)")
	fs.IntVar(&s.QuotaDefaults.CreatesPerMinute, "quota-create-rate-per-minute", d.CreatesPerMinute, "default per-tenant limit of job creations in any sliding minute (0: no limit)")
	fs.Float64Var(&s.RateLimit.PerSecond, "rate-limit", ratelimit.DefaultPerSecond, "calls per second each bearer token may make, sustained; more are refused with ResourceExhausted and a retry delay (0: no limit; per api replica)")
	fs.IntVar(&s.RateLimit.Burst, "rate-limit-burst", ratelimit.DefaultBurst, "calls a token may make at once after being idle (the size of its bucket; at least 1 with --rate-limit)")
	fs.DurationVar(&s.IdempotencyKeyTTL, "idempotency-key-ttl", server.DefaultIdempotencyKeyTTL, "how long a CreateJob idempotency key lasts from the create that used it: until then a repeat with the same job returns that job and one with a different job is refused; after it the key creates a new job")
	fs.DurationVar(&s.ReleaseLead, "release-lead", server.DefaultReleaseLead, "how long before its paced fire instant a backfilled or re-driven firing is published")
	fs.StringVar(&s.KafkaBrokers, "kafka-brokers", "", "comma-separated brokers of the cluster Kafka targets produce to; when set, a job whose target topic does not exist there is refused (empty: no check)")
	fs.StringVar(&s.SecretsDir, "secrets-dir", "", "the workers' target-secret directory (<dir>/<tenant>/<NAME>, the workers' --secrets-dir), whose file names (never contents) say which secrets each tenant has; a job referencing a secret its tenant lacks is refused (empty: every {{secret:NAME}} reference is refused)")
	fs.StringVar(&s.SigningKEKFile, "signing-key-encryption-key-file", "", "file of at least 32 bytes sealing tenants' webhook signing keys in Postgres (the workers need the same file); enables SigningKeyService (empty: off, every tenant is signed for with the workers' --signing-secret)")
	s.TLS.Register(fs, "the gRPC port and the HTTP port (--http-addr)")
	fs.StringVar(&s.HTTPClientCAFile, "http-tls-client-ca-file", "", "PEM CAs whose client certificates the HTTP port requires (mutual TLS on the HTTP/JSON API and the console; --tls-client-ca-file covers the gRPC port only); empty: none asked for. Read again when the file changes")
	fs.BoolVar(&s.AllowPlaintext, "allow-plaintext", false, "serve without TLS on an address that is not loopback (--grpc-addr, --http-addr): every call carries a bearer token, so only where something else encrypts the path (a service mesh's mutual TLS); without it, such an address and no certificate stop the api at start")
	s.RedisSecurity.Register(fs)
	s.CassandraSecurity.Register(fs)
	s.KafkaSecurity.Register(fs)
	s.fs = fs
}

// quotaFlags are the flags a quotas file's defaults section may not also
// set: one place per value, so nobody wonders which one won.
var quotaFlags = map[string]string{
	"quota-max-jobs":               "max_jobs",
	"quota-min-interval":           "min_interval",
	"quota-create-rate-per-minute": "create_rate_per_minute",
}

func (s *settings) validate(p *config.Problems) {
	if s.GRPCAddr == "" {
		p.Addf("grpc-addr", "must not be empty")
	}
	if s.PostgresDSN == "" {
		p.Addf("postgres-dsn", "must not be empty")
	} else if _, err := pgxpool.ParseConfig(s.PostgresDSN); err != nil {
		p.Addf("postgres-dsn", "cannot be parsed: %v", err)
	}
	if s.RedisAddr == "" {
		p.Addf("redis-addr", "must not be empty")
	}
	if len(splitList(s.CassandraHosts)) == 0 {
		p.Addf("cassandra-hosts", "must name at least one host")
	}
	if s.CassandraKeyspace == "" {
		p.Addf("cassandra-keyspace", "must not be empty")
	}
	if s.GRPCStopTimeout <= 0 {
		p.Addf("grpc-stop-timeout", "must be positive, got %s", s.GRPCStopTimeout)
	}
	if s.ReleaseLead < 0 {
		p.Addf("release-lead", "must not be negative, got %s", s.ReleaseLead)
	}
	if s.IdempotencyKeyTTL < time.Minute {
		// Shorter than a client's retries through a blip, a key would
		// stop protecting the very retries it exists for.
		p.Addf("idempotency-key-ttl", "must be at least 1m, got %s", s.IdempotencyKeyTTL)
	}
	if s.SecretsDir != "" {
		if st, err := os.Stat(s.SecretsDir); err != nil || !st.IsDir() {
			p.Addf("secrets-dir", "%q is not a readable directory", s.SecretsDir)
		}
	}
	if s.SigningKEKFile != "" {
		kek, err := signingkey.LoadKEK(s.SigningKEKFile)
		if err != nil {
			p.Addf("signing-key-encryption-key-file", "%v", err)
		}
		s.kek = kek
	}
	s.validateTLS(p)
	s.RedisSecurity.Validate(p)
	s.CassandraSecurity.Validate(p)
	s.KafkaSecurity.Validate(p)
	s.validateQuotas(p)
	if err := s.RateLimit.Validate(); err != nil {
		p.Addf("rate-limit", "%v", err)
	}
	all := map[string]string{}
	if s.TokensFile != "" {
		m, err := auth.LoadTokensFile(s.TokensFile)
		if err != nil {
			p.Addf("tokens-file", "%v", err)
		}
		for k, v := range m {
			all[k] = v
		}
	}
	if s.Tokens != "" {
		m, err := auth.ParseTokens(s.Tokens)
		if err != nil {
			p.Addf("tokens", "%v", err)
		}
		for k, v := range m {
			all[k] = v
		}
	}
	tokens, err := auth.NewTokens(all)
	switch {
	case err != nil:
		p.Addf("tokens", "%v", err)
	case tokens.Len() == 0:
		p.Addf("tokens", "no bearer tokens configured: set --tokens or --tokens-file, or nobody can call the api")
	default:
		s.tokens = tokens
	}
}

// validateTLS checks the api's own TLS and refuses plaintext where a bearer
// token would cross a network: a port on anything but loopback needs a
// certificate or an explicit --allow-plaintext.
func (s *settings) validateTLS(p *config.Problems) {
	s.TLS.Validate(p)
	s.TLS.ValidateClientCA(p, "http-tls-client-ca-file", s.HTTPClientCAFile)
	if s.TLS.Enabled() {
		if s.AllowPlaintext {
			p.Addf("allow-plaintext", "contradicts --tls-cert-file; give one of them")
		}
		return
	}
	if s.AllowPlaintext {
		return
	}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", s.GRPCAddr}, {"http-addr", s.HTTPAddr}} {
		if a.addr != "" && !connsec.IsLoopback(a.addr) {
			p.Addf("tls-cert-file", "required: --%s %s is not a loopback address, and every call carries a bearer token; give --tls-cert-file and --tls-key-file, or --allow-plaintext where a mesh encrypts the path", a.flag, a.addr)
		}
	}
}

func (s *settings) validateQuotas(p *config.Problems) {
	if err := s.QuotaDefaults.Validate(); err != nil {
		p.Addf("quota", "%v", err)
		return
	}
	var file quota.File
	if s.QuotasFile != "" {
		f, err := quota.LoadFile(s.QuotasFile)
		if err != nil {
			p.Addf("quotas-file", "%v", err)
			return
		}
		file = f
	}
	if s.fs != nil {
		given := map[string]bool{}
		s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		d := file.Defaults
		inFile := map[string]bool{"max_jobs": d.MaxJobs != nil, "min_interval": d.MinInterval != nil, "create_rate_per_minute": d.CreatesPerMinute != nil}
		for flagName, key := range quotaFlags {
			if given[flagName] && inFile[key] {
				p.Addf(flagName, "is also set by defaults.%s in --quotas-file; set it in one place", key)
			}
		}
	}
	q, err := quota.New(s.QuotaDefaults, file)
	if err != nil {
		p.Addf("quotas-file", "%v", err)
		return
	}
	s.quotas = q
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "migrate" {
		os.Exit(migrateMain(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "dev-tls" {
		os.Exit(devTLSMain(os.Args[2:], os.Stdout, os.Stderr, time.Now()))
	}
	var s settings
	daemon.Main("api",
		func(fs *flag.FlagSet, c *daemon.Common) {
			c.Register(fs, "127.0.0.1:8081")
			s.register(fs)
		},
		s.validate,
		s.build,
	)
}

// migrateMain is `sundial-api migrate`: apply the migrations and exit 0, or
// say why not and exit 1 (2 for bad flags).
func migrateMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sundial-api migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("postgres-dsn", defaultPostgresDSN, "Postgres connection string (its search_path picks the schema)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long (waiting for another replica's migration lock included)")
	withLedger := fs.Bool("ledger", true, "also create the Cassandra ledger's keyspace and tables")
	cassHosts := fs.String("cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points of the execution ledger")
	cassKeyspace := fs.String("cassandra-keyspace", "sundial", "Cassandra keyspace of the execution ledger")
	cassRepl := fs.String("cassandra-replication", ledger.DefaultReplication, "replication map of the ledger keyspace when it is created")
	var cassSec ledger.Security
	cassSec.Register(fs)
	if err := config.Load(fs, args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 2
	}
	var problems config.Problems
	if *withLedger {
		cassSec.Validate(&problems)
	}
	if err := problems.Err(); err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: invalid configuration:\n%v\n", err)
		return 2
	}
	logger, err := telemetry.NewLogger(stderr, *logFormat, *logLevel, "api")
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 1
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, logger); err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 1
	}
	v, err := migrations.Version(ctx, pool)
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
		return 1
	}
	logger.Info("schema is up to date", "version", v)
	if *withLedger {
		if err := migrateLedger(ctx, splitList(*cassHosts), cassSec, *cassKeyspace, *cassRepl); err != nil {
			fmt.Fprintf(stderr, "sundial-api migrate: %v\n", err)
			return 1
		}
		logger.Info("ledger schema is up to date", "keyspace", *cassKeyspace)
	}
	return 0
}

// migrateLedger creates the ledger's keyspace and tables if missing.
func migrateLedger(ctx context.Context, hosts []string, sec ledger.Security, keyspace, replication string) error {
	cc := ledger.ConnectConfig{Hosts: hosts, Timeout: 30 * time.Second}
	if err := sec.Apply(&cc); err != nil {
		return fmt.Errorf("cassandra: %w", err)
	}
	sess, err := ledger.Connect(cc)
	if err != nil {
		return err
	}
	defer sess.Close()
	return ledger.Migrate(ctx, sess, keyspace, replication)
}

// build composes the api: the Postgres pool, the version publisher, the
// lazy ledger reader and the gRPC server, stopped in reverse order.
func (s *settings) build(ctx context.Context, env daemon.Env) ([]lifecycle.Service, error) {
	pool, err := pgxpool.New(ctx, s.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	closePool := closer(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if s.MigrateOnStart {
		if err := migrations.Up(ctx, pool, env.Logger); err != nil {
			pool.Close()
			return nil, err
		}
		// The api is the one writer of the ledger's schema: concurrent
		// CREATE TABLE from many workers can leave a multi-node cluster
		// disagreeing about a table's id.
		if err := migrateLedger(ctx, splitList(s.CassandraHosts), s.CassandraSecurity, s.CassandraKeyspace, s.CassandraRepl); err != nil {
			pool.Close()
			return nil, err
		}
		env.Logger.Info("ledger schema is up to date", "keyspace", s.CassandraKeyspace)
	}
	st := store.New(pool)
	env.Admin.AddCheck("postgres", st.Ping)

	ropts := &redis.Options{Addr: s.RedisAddr}
	if err := s.RedisSecurity.Apply(ropts); err != nil {
		pool.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	rdb := redis.NewClient(ropts)
	closeRedis := closer(func() { _ = rdb.Close() })
	versions := lease.New(rdb, lease.WithPrefix(s.RedisKeyPrefix))

	var ledgerSession ledger.ConnectConfig
	if err := s.CassandraSecurity.Apply(&ledgerSession); err != nil {
		pool.Close()
		_ = rdb.Close()
		return nil, fmt.Errorf("cassandra: %w", err)
	}
	ledgerReader, err := history.NewLazy(history.Config{
		Hosts:    splitList(s.CassandraHosts),
		Keyspace: s.CassandraKeyspace,
		Session:  ledgerSession,
		Registry: env.Registry,
	})
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		return nil, err
	}

	metrics := server.NewMetrics(env.Registry)
	tracer := env.Tracing.Tracer("github.com/sundialhq/sundial/services/api")
	var topics server.TopicChecker
	closeTopics := closer(func() {})
	if brokers := splitList(s.KafkaBrokers); len(brokers) > 0 {
		kopts, err := s.KafkaSecurity.Opts()
		if err == nil {
			var tc *topiccheck.Checker
			if tc, err = topiccheck.New(brokers, kopts...); err == nil {
				topics, closeTopics = tc, closer(tc.Close)
			}
		}
		if err != nil {
			pool.Close()
			_ = rdb.Close()
			return nil, fmt.Errorf("kafka: %w", err)
		}
	}
	var catalog server.SecretCatalog
	if s.SecretsDir != "" {
		catalog = secrets.Dir(s.SecretsDir)
	}
	calendars := calendar.NewStore(pool)
	calendarSvc, err := server.NewCalendarService(server.CalendarConfig{Store: calendars, Logger: env.Logger, Metrics: metrics})
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		closeTopics()
		return nil, err
	}
	jobs, err := server.NewJobService(server.Config{
		Store:             st,
		Executions:        ledgerReader,
		Versions:          versions,
		Clock:             clock.Real{},
		Logger:            env.Logger,
		Metrics:           metrics,
		Quotas:            s.quotas,
		ReleaseLead:       s.ReleaseLead,
		IdempotencyKeyTTL: s.IdempotencyKeyTTL,
		Tracer:            tracer,
		Topics:            topics,
		Secrets:           catalog,
		Calendars:         calendars,
	})
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		closeTopics()
		return nil, err
	}
	var signingKeys sundialv1.SigningKeyServiceServer
	if s.kek != nil {
		svc, err := server.NewSigningKeyService(signingkey.NewStore(pool, s.kek), env.Logger, metrics)
		if err != nil {
			pool.Close()
			_ = rdb.Close()
			closeTopics()
			return nil, err
		}
		signingKeys = svc
	}
	deadLetters, err := server.NewDeadLetterService(server.DeadLetterConfig{
		Store:       st,
		Logger:      env.Logger,
		Metrics:     metrics,
		ReleaseLead: s.ReleaseLead,
		Tracer:      tracer,
	})
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		closeTopics()
		return nil, err
	}
	grpcTLS, httpTLS, err := s.serverTLS(env.Logger, env.Registry)
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		closeTopics()
		return nil, err
	}
	grpcSrv, err := server.NewGRPC(server.GRPCConfig{
		Addr:            s.GRPCAddr,
		Tokens:          s.tokens,
		Jobs:            jobs,
		DeadLetters:     deadLetters,
		SigningKeys:     signingKeys,
		Calendars:       calendarSvc,
		Metrics:         metrics,
		Logger:          env.Logger,
		GracefulTimeout: s.GRPCStopTimeout,
		Tracer:          tracer,
		RateLimit:       s.RateLimit,
		TLS:             grpcTLS,
	})
	if err != nil {
		pool.Close()
		_ = rdb.Close()
		closeTopics()
		return nil, err
	}
	env.Logger.Info("tenants configured", "tenants", s.tokens.Tenants())
	d := s.quotas.Defaults()
	env.Logger.Info("quotas configured", "max_jobs", d.MaxJobs, "min_interval", d.MinInterval.String(),
		"create_rate_per_minute", d.CreatesPerMinute, "tenant_overrides", s.quotas.Overridden())
	// Started in order, stopped in reverse: the server stops before the
	// stores it uses close.
	services := []lifecycle.Service{closePool, closeRedis, closeTopics, ledgerReader, grpcSrv}
	if s.HTTPAddr != "" {
		// The HTTP/JSON API and console: a client of the gRPC server, so
		// started after it and stopped before it.
		conn, err := httpapi.Dial(grpcSrv.DialLocal)
		if err != nil {
			pool.Close()
			_ = rdb.Close()
			return nil, err
		}
		var key []byte
		if s.ConsoleKeyFile != "" {
			if key, err = os.ReadFile(s.ConsoleKeyFile); err != nil {
				pool.Close()
				_ = rdb.Close()
				return nil, fmt.Errorf("console-session-key-file: %w", err)
			}
		} else {
			env.Logger.Warn("console sessions use a random key: they end when this process does and do not span replicas (set --console-session-key-file)")
		}
		con, err := console.New(console.Config{Conn: conn, Tokens: s.tokens, SessionKey: key, SecureCookies: s.ConsoleSecure,
			PrometheusURL: s.ConsolePrometheus, OperatorTenants: splitList(s.ConsoleOperators), Logger: env.Logger, Clock: clock.Real{}})
		if err != nil {
			_ = conn.Close()
			pool.Close()
			_ = rdb.Close()
			return nil, err
		}
		httpSrv, err := httpapi.New(httpapi.Config{
			Addr:        s.HTTPAddr,
			Conn:        conn,
			Console:     con,
			Logger:      env.Logger,
			StopTimeout: s.GRPCStopTimeout,
			TLS:         httpTLS,
		})
		if err != nil {
			pool.Close()
			_ = rdb.Close()
			return nil, err
		}
		services = append(services, httpSrv)
	}
	return services, nil
}

// serverTLS loads the certificate and client CAs of each port: nil, nil
// when TLS is off. The gRPC port offers HTTP/2 alone through ALPN (gRPC
// clients require it), the HTTP port HTTP/2 and HTTP/1.1.
//
// Each port's certificate expiry is a gauge, so an alert can fire before a
// renewal that did not happen becomes an outage.
func (s *settings) serverTLS(logger *slog.Logger, reg prometheus.Registerer) (grpcTLS, httpTLS *tls.Config, err error) {
	if !s.TLS.Enabled() {
		// Validation allowed it: on loopback, or with --allow-plaintext,
		// which is worth a warning at every start.
		level := slog.LevelInfo
		if s.AllowPlaintext {
			level = slog.LevelWarn
		}
		logger.Log(context.Background(), level, "the gRPC and HTTP ports serve plaintext (set --tls-cert-file and --tls-key-file for TLS)",
			"grpc_addr", s.GRPCAddr, "http_addr", s.HTTPAddr, "allow_plaintext", s.AllowPlaintext)
		return nil, nil, nil
	}
	g, err := s.TLS.Load(logger.With("listener", "grpc"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls-cert-file: %w", err)
	}
	httpSide := s.TLS
	httpSide.ClientCAFile = s.HTTPClientCAFile
	h, err := httpSide.Load(logger.With("listener", "http"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls-cert-file: %w", err)
	}
	for port, certs := range map[string]*connsec.ServerCerts{"grpc": g, "http": h} {
		expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sundial_api_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate the port serves expires (Unix seconds); read when scraped, after a reload if its files changed.",
			ConstLabels: prometheus.Labels{"port": port},
		}, func() float64 { return float64(certs.Leaf().NotAfter.Unix()) })
		if err := reg.Register(expiry); err != nil {
			return nil, nil, fmt.Errorf("tls: %w", err)
		}
	}
	leaf := g.Leaf()
	logger.Info("tls on the gRPC and HTTP ports", "subject", leaf.Subject.String(), "dns_names", leaf.DNSNames,
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "grpc_client_certificates", g.MutualTLS(),
		"http_client_certificates", h.MutualTLS(), "min_version", cmp.Or(s.TLS.MinVersion, "1.2"))
	return g.Config("h2"), h.Config("h2", "http/1.1"), nil
}

// closer is a lifecycle.Service whose Stop releases a client.
type closer func()

func (closer) Start(context.Context) error { return nil }
func (c closer) Stop()                     { c() }
