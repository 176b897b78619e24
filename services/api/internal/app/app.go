// Package app composes the api from its parts, from the settings main has
// loaded and validated (Config): the Postgres pool (migrated first unless
// --migrate-on-start=false), the Redis version publisher, the lazy ledger
// reader, the Kafka topic check, the gRPC services and server, and the
// HTTP/JSON API with the console.
//
// No store has to answer for the api to start. Postgres, and with
// --migrate-on-start the ledger's Cassandra schema, are prepared at start
// when they answer; when they do not, the api starts anyway, logs that it
// waits, names them in /readyz and prepares them once they answer
// (awaited), and until Postgres is prepared every call but the health
// checks answers Unavailable. A store that refuses the api's settings (a
// wrong password, an untrusted certificate) stops it at start, naming it.
//
// The services are started in order and stopped in reverse: the closers of
// the pool and the waits for the stores, the Redis client and the topic
// check, the ledger reader, the gRPC server, then the HTTP server (a
// client of the gRPC server). So the HTTP server stops first, and the
// stores close after every server that uses them has stopped.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/secrets"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/services/api/internal/deniedaudit"
	"github.com/sundialhq/sundial/services/api/internal/history"
	"github.com/sundialhq/sundial/services/api/internal/httpapi"
	"github.com/sundialhq/sundial/services/api/internal/server"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
	"github.com/sundialhq/sundial/services/api/internal/topiccheck"
)

// Deps is what the api takes from its process rather than its settings.
type Deps struct {
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Tracer makes every call a server span; nil: tracing off.
	Tracer trace.Tracer
}

// App is the composed api.
type App struct {
	// Services are started in order and stopped in reverse (daemon.Run).
	Services []lifecycle.Service
	// Checks are the readiness checks, by name, for the admin server.
	Checks map[string]admin.Check
}

// New builds the api from a validated Config. Nothing serves until its
// Services are started; what New opened is closed by their Stop, and by
// New itself when it fails.
func New(ctx context.Context, cfg Config, deps Deps) (a *App, err error) {
	var u undo
	defer func() {
		if err != nil {
			u.run()
		}
	}()
	pool, pg, cass, err := openStores(ctx, cfg, deps.Logger)
	if err != nil {
		return nil, err
	}
	u.add(pool.Close)
	// A tenant's first job makes its signing key, in the job's
	// transaction (pkg/postgres/signingkey).
	var storeOpts []store.Option
	if cfg.kek != nil {
		keys := signingkey.NewStore(pool, cfg.kek)
		storeOpts = append(storeOpts, store.WithCreateHook(func(ctx context.Context, tx pgx.Tx, tenant string) error {
			_, err := keys.EnsureTx(ctx, tx, tenant, FirstJobActor)
			return err
		}))
	} else {
		deps.Logger.Warn("no --signing-key-encryption-key-file: the api makes no tenant's signing key and cannot show one; the workers make each tenant's at its first firing")
	}
	st := store.New(pool, storeOpts...)
	b, err := openBackends(cfg, deps, &u)
	if err != nil {
		return nil, err
	}
	h, err := newHandlers(cfg, deps, pool, st, b)
	if err != nil {
		return nil, err
	}
	// The bootstrap tokens of --tokens-file (hashed, reloaded when the
	// file changes) and the api-made ones (TokenService) beside the plain
	// ones of --tokens: all resolve through cfg.tokens from here on, and
	// the calls it refuses go to access_denied_audit.
	var tokenServices []lifecycle.Service
	if cfg.bootstrap != nil {
		boot, err := tokens.NewBootstrap(tokens.BootstrapConfig{Initial: cfg.bootstrap, Logger: deps.Logger})
		if err != nil {
			return nil, err
		}
		cfg.tokens = cfg.tokens.WithVerifier(boot)
		tokenServices = append(tokenServices, boot)
	}
	if cfg.tokens.Len() > 0 {
		deps.Logger.Warn("plain bootstrap tokens given by --tokens (SUNDIAL_TOKENS) are deprecated: they are accepted until 2027-03-01, then refused; "+
			"put their hashes (schedctl token hash) in --tokens-file instead", "tokens", cfg.tokens.Len())
	}
	tokenStore := tokens.NewStore(pool)
	verifier, err := tokens.NewVerifier(tokens.VerifierConfig{Store: tokenStore, Logger: deps.Logger})
	if err != nil {
		return nil, err
	}
	cfg.tokens = cfg.tokens.WithVerifier(verifier)
	denied, err := deniedaudit.New(deniedaudit.Config{Pool: pool, Logger: deps.Logger, Registry: deps.Registry})
	if err != nil {
		return nil, err
	}
	cfg.tokens = cfg.tokens.WithRefusals(denied.Record)
	tokenServices = append(tokenServices, verifier, denied)
	listDenied := func(ctx context.Context, tenant string, before int64, limit int) ([]deniedaudit.Entry, error) {
		return deniedaudit.List(ctx, pool, tenant, before, limit)
	}
	if h.tokens, err = tokens.NewService(tokenStore, clock.Real{}, deps.Logger, tokens.WithDenied(listDenied)); err != nil {
		return nil, err
	}
	grpcSrv, httpTLS, err := newGRPC(cfg, deps, h, func(ctx context.Context) error {
		if pg.Ready(ctx) != nil {
			return errWaitingForPostgres // the details are /readyz's, not every caller's
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	tenants := cfg.tokens.Tenants()
	if cfg.bootstrap != nil {
		tenants = append(tenants, cfg.bootstrap.Tenants()...)
		slices.Sort(tenants)
		tenants = slices.Compact(tenants)
	}
	deps.Logger.Info("tenants configured", "tenants", tenants)
	d := cfg.quotas.Defaults()
	deps.Logger.Info("quotas configured", "max_jobs", d.MaxJobs, "min_interval", d.MinInterval.String(),
		"create_rate_per_minute", d.CreatesPerMinute, "tenant_overrides", cfg.quotas.Overridden())
	// Started in order, stopped in reverse: the server stops before the
	// stores it uses close.
	services := []lifecycle.Service{closer(pool.Close), pg}
	checks := map[string]admin.Check{"postgres": func(ctx context.Context) error {
		if err := pg.Ready(ctx); err != nil {
			return err
		}
		return st.Ping(ctx)
	}}
	if cass != nil {
		services = append(services, cass)
		checks["cassandra"] = cass.Ready
	}
	services = append(services, redisOwner{rdb: b.redis, logger: deps.Logger}, b.closeTopics, b.ledger)
	services = append(services, tokenServices...)
	services = append(services, grpcSrv)
	if cfg.HTTPAddr != "" {
		// The HTTP/JSON API and console: a client of the gRPC server, so
		// started after it and stopped before it.
		// The console's operator panel probes what the api reaches:
		// the readiness checks, and Redis.
		probes := map[string]func(context.Context) error{"redis": func(ctx context.Context) error { return b.redis.Ping(ctx).Err() }}
		for n, c := range checks {
			probes[n] = c
		}
		httpSrv, con, err := newHTTP(cfg, deps, pool, grpcSrv, httpTLS, probes)
		if err != nil {
			return nil, err
		}
		// The console's sweep of expired sessions beside the server.
		services = append(services, con, httpSrv)
	}
	// This instance's report, as every service writes one (the console's
	// services panel): started last, stopped first.
	services = append(services, instances.NewReporter(pool, "api", instances.DefaultName(), checks, instances.Options{Logger: deps.Logger.With("component", "instances")}))
	return &App{Services: services, Checks: checks}, nil
}

// errWaitingForPostgres is what a call made before Postgres answered and
// was migrated gets, as Unavailable.
var errWaitingForPostgres = errors.New("waiting for postgres")

// openStores opens the Postgres pool, which connects on demand, and the
// waits for the stores the api prepares: Postgres (migrations unless
// --migrate-on-start=false, then the ledger TTLs) and, with
// --migrate-on-start, the ledger's Cassandra schema (cass, else nil). A
// store that answers is prepared here, before anything serves; one that
// refuses the api's settings stops it, naming the store; one that does
// not answer is waited for once the services start.
func openStores(ctx context.Context, cfg Config, logger *slog.Logger) (pool *pgxpool.Pool, pg, cass *awaited, err error) {
	pool, err = pgxpool.New(ctx, cfg.PostgresDSN)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: %w", err)
	}
	pg = newAwaited("postgres", func(ctx context.Context) error { return pingPostgres(ctx, pool) }, func(ctx context.Context) error {
		if cfg.MigrateOnStart {
			if err := migrations.Up(ctx, pool, logger); err != nil {
				return err
			}
		}
		return syncLedgerTTLs(ctx, pool, cfg.ledgerTTLs, logger)
	}, logger)
	if err := pg.atStart(ctx); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	if !cfg.MigrateOnStart {
		return pool, pg, nil, nil
	}
	// The api is the one writer of the ledger's schema: concurrent
	// CREATE TABLE from many workers can leave a multi-node cluster
	// disagreeing about a table's id.
	reach, migrate := ledgerSchema(splitList(cfg.CassandraHosts), cfg.CassandraSecurity, cfg.CassandraKeyspace, cfg.CassandraRepl)
	cass = newAwaited("cassandra", reach, func(ctx context.Context) error {
		if err := migrate(ctx); err != nil {
			return err
		}
		logger.Info("ledger schema is up to date", "keyspace", cfg.CassandraKeyspace)
		return nil
	}, logger)
	if err := cass.atStart(ctx); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, pg, cass, nil
}

// backends are the api's clients of the other stores.
type backends struct {
	redis    redis.UniversalClient
	versions *lease.Store
	ledger   *history.Lazy
	// topics is nil without --kafka-brokers; closeTopics closes it.
	topics      server.TopicChecker
	closeTopics closer
	// secrets is nil without --secrets-dir.
	secrets server.SecretCatalog
}

// openBackends makes the clients of Redis, the Cassandra ledger and Kafka;
// none connects yet. u closes those that need it should New fail later.
func openBackends(cfg Config, deps Deps, u *undo) (b backends, err error) {
	addrs, err := lease.ParseAddrs(cfg.RedisAddr)
	if err != nil {
		return b, fmt.Errorf("redis-addr: %w", err)
	}
	// One address: a single Redis; several: a Redis Cluster's nodes.
	rdb, err := lease.NewClient(addrs, cfg.RedisSecurity, nil)
	if err != nil {
		return b, fmt.Errorf("redis: %w", err)
	}
	u.add(func() { _ = rdb.Close() })
	b.redis, b.versions = rdb, lease.New(rdb, lease.WithPrefix(cfg.RedisKeyPrefix))

	var ledgerSession ledger.ConnectConfig
	if err := cfg.CassandraSecurity.Apply(&ledgerSession); err != nil {
		return b, fmt.Errorf("cassandra: %w", err)
	}
	b.ledger, err = history.NewLazy(history.Config{
		Hosts:    splitList(cfg.CassandraHosts),
		Keyspace: cfg.CassandraKeyspace,
		Session:  ledgerSession,
		Registry: deps.Registry,
	})
	if err != nil {
		return b, err
	}
	b.closeTopics = closer(func() {})
	if brokers := splitList(cfg.KafkaBrokers); len(brokers) > 0 {
		kopts, err := cfg.KafkaSecurity.Opts()
		if err != nil {
			return b, fmt.Errorf("kafka: %w", err)
		}
		tc, err := topiccheck.New(brokers, kopts...)
		if err != nil {
			return b, fmt.Errorf("kafka: %w", err)
		}
		u.add(tc.Close)
		b.topics, b.closeTopics = tc, closer(tc.Close)
	}
	if cfg.SecretsDir != "" {
		b.secrets = secrets.Dir(cfg.SecretsDir)
	}
	return b, nil
}

// FirstJobActor is who the signing-key audit trail says made the key a
// tenant's first job made.
const FirstJobActor = "sundial-api (first job)"

// handlers are the gRPC services the server registers.
type handlers struct {
	metrics     *server.Metrics
	jobs        *server.JobService
	deadLetters *server.DeadLetterService
	calendars   *server.CalendarService
	// signingKeys is nil without --signing-key-encryption-key-file.
	signingKeys sundialv1.SigningKeyServiceServer
	tokens      sundialv1.TokenServiceServer
	forecast    *server.ForecastService
	audit       *server.AuditService
}

func newHandlers(cfg Config, deps Deps, pool *pgxpool.Pool, st *store.Store, b backends) (h handlers, err error) {
	h.metrics = server.NewMetrics(deps.Registry)
	calendars := calendarstore.NewStore(pool)
	h.calendars, err = server.NewCalendarService(server.CalendarConfig{Store: calendars, Logger: deps.Logger, Metrics: h.metrics})
	if err != nil {
		return h, err
	}
	h.jobs, err = server.NewJobService(server.Config{
		Store:             st,
		Executions:        b.ledger,
		Versions:          b.versions,
		Cancels:           b.versions,
		Clock:             clock.Real{},
		Logger:            deps.Logger,
		Metrics:           h.metrics,
		Quotas:            cfg.quotas,
		ReleaseLead:       cfg.ReleaseLead,
		IdempotencyKeyTTL: cfg.IdempotencyKeyTTL,
		Tracer:            deps.Tracer,
		Topics:            b.topics,
		Secrets:           b.secrets,
		Calendars:         calendars,
	})
	if err != nil {
		return h, err
	}
	if cfg.kek != nil {
		svc, err := server.NewSigningKeyService(signingkey.NewStore(pool, cfg.kek), deps.Logger, h.metrics)
		if err != nil {
			return h, err
		}
		h.signingKeys = svc
	}
	h.deadLetters, err = server.NewDeadLetterService(server.DeadLetterConfig{
		Store:       st,
		Logger:      deps.Logger,
		Metrics:     h.metrics,
		ReleaseLead: cfg.ReleaseLead,
		Tracer:      deps.Tracer,
	})
	if err != nil {
		return h, err
	}
	h.forecast, err = server.NewForecastService(server.ForecastConfig{Store: st, Logger: deps.Logger, Clock: clock.Real{}})
	if err != nil {
		return h, err
	}
	h.audit, err = server.NewAuditService(server.AuditConfig{Store: st, Logger: deps.Logger, Metrics: h.metrics})
	return h, err
}

// newGRPC builds the gRPC server over the handlers, and the HTTP port's TLS
// (nil when TLS is off) beside the gRPC port's.
func newGRPC(cfg Config, deps Deps, h handlers, storesReady func(context.Context) error) (*server.GRPC, *tls.Config, error) {
	grpcTLS, httpTLS, err := cfg.serverTLS(deps.Logger, deps.Registry)
	if err != nil {
		return nil, nil, err
	}
	srv, err := server.NewGRPC(server.GRPCConfig{
		Addr:            cfg.GRPCAddr,
		Tokens:          cfg.tokens,
		Jobs:            h.jobs,
		DeadLetters:     h.deadLetters,
		SigningKeys:     h.signingKeys,
		Calendars:       h.calendars,
		TokenService:    h.tokens,
		Forecast:        h.forecast,
		Audit:           h.audit,
		Metrics:         h.metrics,
		Logger:          deps.Logger,
		GracefulTimeout: cfg.GRPCStopTimeout,
		Tracer:          deps.Tracer,
		RateLimit:       cfg.RateLimit,
		TLS:             grpcTLS,
		StoresReady:     storesReady,
	})
	if err != nil {
		return nil, nil, err
	}
	return srv, httpTLS, nil
}

// newHTTP builds the HTTP/JSON API and the console over an in-process
// connection to the gRPC server.
func newHTTP(cfg Config, deps Deps, pool *pgxpool.Pool, grpcSrv *server.GRPC, tlsCfg *tls.Config, probes map[string]func(context.Context) error) (*httpapi.Server, *console.Console, error) {
	conn, err := httpapi.Dial(grpcSrv.DialLocal)
	if err != nil {
		return nil, nil, err
	}
	if cfg.ConsoleKeyFile != "" {
		deps.Logger.Warn("--console-session-key-file is ignored: console sessions live in Postgres and need no shared key")
	}
	con, err := console.New(console.Config{Conn: conn, Tokens: cfg.tokens, Pool: pool, SessionTTL: cfg.ConsoleTTL, IdleTimeout: cfg.ConsoleIdle,
		SecureCookies: cfg.ConsoleSecure, Registerer: deps.Registry,
		PrometheusURL: cfg.ConsolePrometheus, OperatorTenants: splitList(cfg.ConsoleOperators), Components: probes, Logger: deps.Logger, Clock: clock.Real{}})
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	// httpapi.New owns conn from here: it closes it on failure and on Stop.
	srv, err := httpapi.New(httpapi.Config{
		Addr:        cfg.HTTPAddr,
		Conn:        conn,
		Console:     con,
		Logger:      deps.Logger,
		StopTimeout: cfg.GRPCStopTimeout,
		TLS:         tlsCfg,
	})
	return srv, con, err
}

// closer is a lifecycle.Service whose Stop releases a client.
type closer func()

// redisOwner closes the Redis client on Stop; its Start checks Redis (a
// wrong password or an untrusted certificate stops the api at start,
// naming Redis, where every version publish would fail; a Redis that is
// down is logged and waited for, as before).
type redisOwner struct {
	rdb    redis.UniversalClient
	logger *slog.Logger
}

func (o redisOwner) Start(ctx context.Context) error {
	return connsec.AtStart(ctx, o.logger, func(ctx context.Context) error { return lease.Check(ctx, o.rdb) })
}

func (o redisOwner) Stop() { _ = o.rdb.Close() }

func (closer) Start(context.Context) error { return nil }
func (c closer) Stop()                     { c() }

// undo is what New has opened so far, closed newest first when it fails.
type undo []func()

func (u *undo) add(f func()) { *u = append(*u, f) }

func (u undo) run() {
	for _, f := range slices.Backward(u) {
		f()
	}
}
