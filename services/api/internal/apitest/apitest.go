// Package apitest runs the api's real gRPC and HTTP servers over real
// Postgres, Redis and (optionally) Cassandra for the tests of the packages
// that sit on top of the gRPC server: the HTTP/JSON gateway, the Go client
// and the console. Each API gets a fresh Postgres schema and Redis key
// prefix of its own (testkit/testinfra), so tests can run side by side against
// the shared components.
package apitest

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/httpapi"
	"github.com/sundialhq/sundial/services/api/internal/ratelimit"
	"github.com/sundialhq/sundial/services/api/internal/server"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/services/api/internal/tokens"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Tokens of the two tenants every API knows, and of a platform operator
// (tenant "platform"). All are static; the api-made ones come from the
// API's TokenService.
const (
	TokenAcme     = "tok-acme"
	TokenGlobex   = "tok-globex"
	TokenOperator = "tok-platform-operator"
)

// Options vary what Start builds.
type Options struct {
	// Ledger, when true, reads history from a fresh Cassandra keyspace
	// (Writer records into it).
	Ledger bool
	// Console builds the console on the loopback connection, over the
	// api's Postgres; nil: none.
	Console func(conn *grpc.ClientConn, tokens *auth.Tokens, pool *pgxpool.Pool) (http.Handler, error)
	// RateLimit limits each token's calls; the zero value (the default)
	// is no limit. RateClock times it (nil: the real clock).
	RateLimit ratelimit.Config
	RateClock clock.Clock
	// ForecastClock is the ForecastService's "now" (nil: the real clock).
	ForecastClock clock.Clock
	// Tracer, when set, sees every statement run on the API's Postgres
	// pool (the store's and the console's), for tests of query plans.
	Tracer pgx.QueryTracer
}

// API is a running api.
type API struct {
	// GRPCAddr and HTTPAddr are the bound addresses.
	GRPCAddr, HTTPAddr string
	Store              *store.Store
	// Pool is the API's Postgres schema, for rows other services write.
	Pool *pgxpool.Pool
	// Writer records ledger rows when Options.Ledger was set.
	Writer *ledger.Writer
	// Verifier checks the api-made tokens (its poll runs).
	Verifier *tokens.Verifier
	// SigningKEK seals the tenants' signing keys SigningKeyService
	// creates (TestKEKMaterial's), for tests that open them as a worker.
	SigningKEK *signingkey.KEK
}

// TestKEKMaterial is the key-encryption key material of every API's
// SigningKeyService.
const TestKEKMaterial = "apitest-signing-key-encryption-key-0123456789"

// Start runs the api for the test; everything stops when it ends.
func Start(t testing.TB, o Options) *API {
	t.Helper()
	ctx := context.Background()
	pool := testinfra.Postgres(t)
	if o.Tracer != nil {
		pool = tracedPool(t, testinfra.PostgresSchema(t, pool), o.Tracer)
	}
	if err := migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testinfra.Redis(t)
	kek, err := signingkey.NewKEK([]byte(TestKEKMaterial))
	if err != nil {
		t.Fatal(err)
	}
	// As the api's app wires it: a tenant's first job makes its key.
	keyStore := signingkey.NewStore(pool, kek)
	st := store.New(pool, store.WithCreateHook(func(ctx context.Context, tx pgx.Tx, tenant string) error {
		_, err := keyStore.EnsureTx(ctx, tx, tenant, "sundial-api (first job)")
		return err
	}))
	api := &API{Store: st, Pool: pool, SigningKEK: kek}
	calendars := calendarstore.NewStore(pool)
	leases := lease.New(rdb, lease.WithPrefix(prefix))
	cfg := server.Config{
		Store:     st,
		Versions:  leases,
		Cancels:   leases,
		Clock:     clock.Real{},
		Calendars: calendars,
	}
	if o.Ledger {
		keyspace := testinfra.CassandraKeyspace(t)
		session, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("cassandra: %v", err)
		}
		t.Cleanup(session.Close)
		mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := ledger.Migrate(mctx, session, keyspace, ""); err != nil {
			t.Fatal(err)
		}
		cfg.Executions = ledger.NewReader(session, keyspace)
		api.Writer = ledger.NewWriter(session, keyspace)
	}
	jobs, err := server.NewJobService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := server.NewDeadLetterService(server.DeadLetterConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	static, err := auth.NewTokens(map[string]string{TokenAcme: "acme:ops", TokenGlobex: "globex", TokenOperator: "platform:oncall:operator"})
	if err != nil {
		t.Fatal(err)
	}
	tokenStore := tokens.NewStore(pool)
	if api.Verifier, err = tokens.NewVerifier(tokens.VerifierConfig{Store: tokenStore}); err != nil {
		t.Fatal(err)
	}
	if err := api.Verifier.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Verifier.Stop)
	tokenSvc, err := tokens.NewService(tokenStore, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens := static.WithVerifier(api.Verifier)
	keys, err := server.NewSigningKeyService(signingkey.NewStore(pool, api.SigningKEK), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cals, err := server.NewCalendarService(server.CalendarConfig{Store: calendars})
	if err != nil {
		t.Fatal(err)
	}
	forecasts, err := server.NewForecastService(server.ForecastConfig{Store: st, Clock: o.ForecastClock})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := server.NewAuditService(server.AuditConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	grpcSrv, err := server.NewGRPC(server.GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: jobs, DeadLetters: dlq,
		SigningKeys: keys, Calendars: cals, TokenService: tokenSvc, Forecast: forecasts, Audit: audit, RateLimit: o.RateLimit, Clock: o.RateClock})
	if err != nil {
		t.Fatal(err)
	}
	if err := grpcSrv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(grpcSrv.Stop)
	conn, err := httpapi.Dial(grpcSrv.DialLocal)
	if err != nil {
		t.Fatal(err)
	}
	var console http.Handler
	if o.Console != nil {
		if console, err = o.Console(conn, tokens, pool); err != nil {
			t.Fatal(err)
		}
	}
	httpSrv, err := httpapi.New(httpapi.Config{Addr: "127.0.0.1:0", Conn: conn, Console: console, StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := httpSrv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpSrv.Stop)
	api.GRPCAddr, api.HTTPAddr = grpcSrv.Addr(), httpSrv.Addr()
	return api
}

// tracedPool opens a second pool on the test's schema whose connections
// report every statement to tracer; it closes before the schema is dropped.
func tracedPool(t testing.TB, schema string, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testinfra.WithSearchPath(testinfra.PostgresBaseDSN(), schema))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DeadLetter writes a dead_letters row as a worker does when the last
// attempt of the job's slot dies with an HTTP 503 (its target's host
// stored beside the envelope, firing.TargetHost), and returns its
// execution id.
func (a *API) DeadLetter(t testing.TB, job *sundialv1.Job, slot time.Time, class string) string {
	t.Helper()
	execID := firing.ExecutionID(uuid.MustParse(job.GetId()), slot).String()
	f := firing.New(job, firing.Attempt{
		Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: execID,
		Scheduled: slot, Fire: slot, Number: 1, FirstAttempt: 1,
	})
	env, err := firing.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Pool.Exec(context.Background(), `
		INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at, target_host)
		VALUES ($1, $2, $3, $4, 'HTTP 503 from target', 503, 1, 1, $5, now(), $6)`,
		execID, job.GetTenant(), job.GetId(), class, env, firing.TargetHost(f.GetTarget()))
	if err != nil {
		t.Fatal(err)
	}
	return execID
}
