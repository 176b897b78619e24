package app

import (
	"flag"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/kafkaconn"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"

	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
	"github.com/sundialhq/sundial/services/api/internal/server"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
)

// DefaultPostgresDSN is --postgres-dsn's default, for serving and for the
// migrate subcommand.
const DefaultPostgresDSN = "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable"

// Config is every api setting but the common ones (daemon.Common), loaded
// once in main from flags and SUNDIAL_* environment variables (Register),
// then checked by Validate, which also loads the bearer tokens, the quotas
// and the signing keys' key-encryption key that New builds with.
type Config struct {
	GRPCAddr string
	HTTPAddr string
	// ConsoleKeyFile is accepted and ignored, so deployments that still
	// pass it start (sessions live in Postgres, console_sessions);
	// ConsoleIdle and ConsoleTTL end a session after that long without a
	// request and after sign-in; ConsoleSecure marks the cookie Secure
	// behind a TLS-terminating proxy;
	// ConsolePrometheus is where the overview reads each tenant's series,
	// and ConsoleOperators the tenants shown the whole platform's.
	ConsoleKeyFile    string
	ConsoleIdle       time.Duration
	ConsoleTTL        time.Duration
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
	QuotaDefaults     quotas.Limits
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
	// signing keys in Postgres (pkg/postgres/signingkey), which a tenant's first
	// job makes. Empty: SigningKeyService is off and the api makes no
	// key; the workers make each tenant's at its first firing, unseen.
	SigningKEKFile string
	// TLS is the certificate both ports serve (--tls-*, pkg/process/connsec) and
	// the gRPC port's client CAs; HTTPClientCAFile the HTTP port's, apart
	// because a browser on the console seldom has a client certificate
	// while a service calling gRPC can. AllowPlaintext lets a port that
	// is not on loopback serve without TLS.
	TLS              connsec.ServerTLS
	HTTPClientCAFile string
	AllowPlaintext   bool

	fs     *flag.FlagSet // to tell flags given from defaults
	tokens *auth.Tokens  // --tokens, loaded by Validate
	// bootstrap is --tokens-file's set, loaded by Validate.
	bootstrap *tokens.BootstrapSet
	kek       *signingkey.KEK // loaded by Validate
	quotas    *quotas.Tenants // loaded by Validate
	// ledgerTTLs: the quotas file's ledger_ttl settings, loaded by
	// Validate (ledgerttl.go).
	ledgerTTLs ledgerttl.TTLs
}

// Register adds the api's flags to fs, with their defaults.
func (s *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "address the gRPC JobService listens on")
	fs.StringVar(&s.HTTPAddr, "http-addr", "", "address the HTTP/JSON API (/v1/) and the web console (/) listen on, e.g. 127.0.0.1:8080; empty (the default): no HTTP listener")
	fs.StringVar(&s.ConsoleKeyFile, "console-session-key-file", "", "deprecated and ignored: console sessions live in Postgres and need no shared key")
	fs.DurationVar(&s.ConsoleIdle, "console-idle-timeout", 30*time.Minute, "end a console session this long after its last request")
	fs.DurationVar(&s.ConsoleTTL, "console-session-ttl", 12*time.Hour, "end a console session this long after sign-in, however busy")
	fs.BoolVar(&s.ConsoleSecure, "console-secure-cookies", false, "mark the console's session cookie Secure even on plain HTTP (TLS terminated in front of the api); always set over TLS")
	fs.StringVar(&s.ConsoleOperators, "console-operator-tenants", "", "comma-separated tenants whose console sessions also see the whole platform on the overview (every tenant's firings, consumer lag, outbox, components, leaders; needs --console-prometheus-url): the platform team's tenant, not its users'")
	fs.StringVar(&s.ConsolePrometheus, "console-prometheus-url", "", "base URL of a Prometheus that scrapes the workers, e.g. http://127.0.0.1:9091; the console's overview charts each tenant's firings and lateness of the last hour from it (empty: no charts)")
	fs.StringVar(&s.PostgresDSN, "postgres-dsn", DefaultPostgresDSN, "Postgres connection string (its search_path picks the schema)")
	fs.StringVar(&s.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address, where job versions are published for workers; several, comma-separated, are a Redis Cluster's nodes")
	fs.StringVar(&s.RedisKeyPrefix, "redis-key-prefix", lease.DefaultPrefix, "prefix of every Redis key (must match the workers')")
	fs.StringVar(&s.CassandraHosts, "cassandra-hosts", "127.0.0.1:9042", "comma-separated Cassandra contact points of the execution ledger")
	fs.StringVar(&s.CassandraKeyspace, "cassandra-keyspace", "sundial", "Cassandra keyspace of the execution ledger")
	fs.StringVar(&s.CassandraRepl, "cassandra-replication", ledger.DefaultReplication, "replication map of the ledger keyspace when the api creates it")
	fs.StringVar(&s.TokensFile, "tokens-file", "", "YAML or JSON file mapping the argon2id hashes of static (bootstrap) bearer tokens (schedctl token hash) to tenant, tenant:name or tenant:name:role (role admin, read-only or operator; admin when not given); a plain token in it is refused. Read again within seconds when it changes. More tokens are made through the api (schedctl token create)")
	fs.StringVar(&s.Tokens, "tokens", "", "deprecated (accepted with a warning until 2027-03-01): plain static bearer tokens as token=tenant[:name[:role]],… (added to --tokens-file, never reloaded); use --tokens-file with hashes")
	fs.BoolVar(&s.MigrateOnStart, "migrate-on-start", true, "apply the Postgres migrations and create the ledger's keyspace and tables before serving")
	fs.DurationVar(&s.GRPCStopTimeout, "grpc-stop-timeout", 15*time.Second, "how long a shutdown waits for in-flight gRPC calls before cutting them off")
	fs.StringVar(&s.QuotasFile, "quotas-file", "", "YAML file of quota defaults and per-tenant overrides (see docs/architecture/api.md)")
	d := quotas.DefaultLimits()
	fs.IntVar(&s.QuotaDefaults.MaxJobs, "quota-max-jobs", d.MaxJobs, "default per-tenant limit of jobs not deleted (0: no limit)")
	fs.DurationVar(&s.QuotaDefaults.MinInterval, "quota-min-interval", d.MinInterval, "default per-tenant minimum gap between two slots of a schedule (0: no minimum)")
	fs.IntVar(&s.QuotaDefaults.CreatesPerMinute, "quota-create-rate-per-minute", d.CreatesPerMinute, "default per-tenant limit of job creations in any sliding minute (0: no limit)")
	fs.Float64Var(&s.RateLimit.PerSecond, "rate-limit", ratelimit.DefaultPerSecond, "calls per second each bearer token may make, sustained; more are refused with ResourceExhausted and a retry delay (0: no limit; per api replica)")
	fs.IntVar(&s.RateLimit.Burst, "rate-limit-burst", ratelimit.DefaultBurst, "calls a token may make at once after being idle (the size of its bucket; at least 1 with --rate-limit)")
	fs.DurationVar(&s.IdempotencyKeyTTL, "idempotency-key-ttl", server.DefaultIdempotencyKeyTTL, "how long a CreateJob idempotency key lasts from the create that used it: until then a repeat with the same job returns that job and one with a different job is refused; after it the key creates a new job")
	fs.DurationVar(&s.ReleaseLead, "release-lead", server.DefaultReleaseLead, "how long before its paced fire instant a backfilled or re-driven firing is published")
	fs.StringVar(&s.KafkaBrokers, "kafka-brokers", "", "comma-separated brokers of the cluster Kafka targets produce to; when set, a job whose target topic does not exist there is refused (empty: no check)")
	fs.StringVar(&s.SecretsDir, "secrets-dir", "", "the workers' target-secret directory (<dir>/<tenant>/<NAME>, the workers' --secrets-dir), whose file names (never contents) say which secrets each tenant has; a job referencing a secret its tenant lacks is refused (empty: every {{secret:NAME}} reference is refused)")
	fs.StringVar(&s.SigningKEKFile, "signing-key-encryption-key-file", "", "file of at least 32 bytes sealing tenants' webhook signing keys in Postgres (the workers need the same file): a tenant's first job makes its key, which SigningKeyService shows (empty: SigningKeyService is off and the workers make each tenant's key at its first firing, which the tenant cannot see)")
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

// Validate records every problem, each naming its flag.
func (s *Config) Validate(p *config.Problems) {
	if s.GRPCAddr == "" {
		p.Addf("grpc-addr", "must not be empty")
	}
	if s.PostgresDSN == "" {
		p.Addf("postgres-dsn", "must not be empty")
	} else if _, err := pgxpool.ParseConfig(s.PostgresDSN); err != nil {
		p.Addf("postgres-dsn", "cannot be parsed: %v", err)
	}
	if _, err := lease.ParseAddrs(s.RedisAddr); err != nil {
		p.Addf("redis-addr", "%v", err)
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
	if s.ConsoleIdle < time.Minute {
		p.Addf("console-idle-timeout", "must be at least 1m, got %s", s.ConsoleIdle)
	}
	if s.ConsoleTTL < time.Minute {
		p.Addf("console-session-ttl", "must be at least 1m, got %s", s.ConsoleTTL)
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
	s.validateLedgerTTLs(p)
	if err := s.RateLimit.Validate(); err != nil {
		p.Addf("rate-limit", "%v", err)
	}
	s.validateTokens(p)
}

// validateTokens loads the bearer tokens of --tokens-file (argon2id
// hashes; a plain token there is refused, naming its line) and --tokens
// (plain, deprecated): at least one, or nobody can call.
func (s *Config) validateTokens(p *config.Problems) {
	n := 0
	if s.TokensFile != "" {
		set, err := tokens.LoadBootstrap(s.TokensFile)
		if err != nil {
			p.Addf("tokens-file", "%v", err)
		} else {
			s.bootstrap = set
			n += set.Len()
		}
	}
	all := map[string]string{}
	if s.Tokens != "" {
		m, err := auth.ParseTokens(s.Tokens)
		if err != nil {
			p.Addf("tokens", "%v", err)
		}
		for k, v := range m {
			all[k] = v
		}
	}
	static, err := auth.NewTokens(all)
	switch {
	case err != nil:
		p.Addf("tokens", "%v", err)
	case static.Len()+n == 0 && s.TokensFile != "" && s.bootstrap == nil:
		// the file's own problem is already recorded
	case static.Len()+n == 0:
		p.Addf("tokens", "no bearer tokens configured: set --tokens-file (or the deprecated --tokens), or nobody can call the api")
	default:
		s.tokens = static
	}
}

// validateTLS checks the api's own TLS and refuses plaintext where a bearer
// token would cross a network: a port on anything but loopback needs a
// certificate or an explicit --allow-plaintext.
func (s *Config) validateTLS(p *config.Problems) {
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

func (s *Config) validateQuotas(p *config.Problems) {
	if err := s.QuotaDefaults.Validate(); err != nil {
		p.Addf("quota", "%v", err)
		return
	}
	var file quotas.File
	if s.QuotasFile != "" {
		f, err := quotas.LoadFile(s.QuotasFile)
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
	q, err := quotas.Resolve(s.QuotaDefaults, file)
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
