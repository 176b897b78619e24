package testinfra

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/testkit/harness"
)

// PostgresBaseDSN is the DSN of the shared test database (SUNDIAL_TEST_POSTGRES_DSN
// or the default), without any per-test schema. Tests should use PostgresDSN.
func PostgresBaseDSN() string { return envOr(EnvPostgresDSN, DefaultPostgresDSN) }

// PostgresDSN creates a schema of the test's own and returns a DSN whose
// search_path is that schema alone, so unqualified names (and migrations)
// land in it. The search_path travels as the libpq `options` parameter, so the
// DSN works for pgx, psql and child processes alike. The schema is dropped,
// with everything in it, when the test ends; close connections made from the
// DSN before that (t.Cleanup runs last-registered first).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := PostgresBaseDSN()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testinfra: %s=%q is not a URL: %v", EnvPostgresDSN, base, err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	requireReachable(t, "PostgreSQL", EnvPostgresDSN, []string{addr})

	schema := UniqueName(t, 63) // Postgres truncates identifiers at 63 bytes
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testinfra: connect to PostgreSQL at %s: %v (is `make infra-up` done?)", addr, err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testinfra: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })
	return WithSearchPath(base, schema)
}

// WithSearchPath returns dsn with its search_path set to schema through the
// `options` parameter (-c search_path=schema), replacing any options it had.
func WithSearchPath(dsn, schema string) string { return harness.WithSearchPath(dsn, schema) }

func dropSchema(t testing.TB, base, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Logf("testinfra: schema %s left behind: connect: %v", schema, err)
		return
	}
	defer func() { _ = c.Close(context.Background()) }()
	// A connection still open in the schema (a child process not yet stopped)
	// could hold a lock forever; give up after a while rather than hang.
	if _, err := c.Exec(ctx, "SET lock_timeout = '20s'"); err != nil {
		t.Logf("testinfra: schema %s left behind: %v", schema, err)
		return
	}
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("testinfra: schema %s left behind: drop: %v", schema, err)
	}
}

// PostgresPool opens a pool on dsn (normally from PostgresDSN), checks that it
// answers, and closes it when the test ends.
func PostgresPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("testinfra: postgres pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("testinfra: postgres ping: %v", err)
	}
	t.Cleanup(func() { closeWithin(t, pool, 10*time.Second) })
	return pool
}

// closeWithin closes pool, giving up after d: pgxpool's Close waits for
// every acquired connection, and a test that failed (FailNow) inside a
// transaction never returns its connection, which hung the whole package
// until its timeout. The connection is left to the process's exit.
func closeWithin(t testing.TB, pool *pgxpool.Pool, d time.Duration) {
	done := make(chan struct{})
	go func() { pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Logf("testinfra: a postgres connection was not returned (a transaction left open by a failed test?); not waiting for it")
	}
}

// Postgres returns a pool whose connections use a fresh schema of the test's
// own (see PostgresDSN); the pool is closed and the schema dropped when the
// test ends. To share the schema with a child process, call PostgresDSN and
// PostgresPool yourself.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PostgresPool(t, PostgresDSN(t))
}

// PostgresSchema reports the schema a pool from Postgres or PostgresPool uses.
func PostgresSchema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&s); err != nil {
		t.Fatalf("testinfra: current_schema: %v", err)
	}
	if s == "" {
		t.Fatalf("testinfra: the pool has no current schema (options %q)", pool.Config().ConnConfig.RuntimeParams["options"])
	}
	return s
}
