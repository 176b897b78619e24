package testinfra

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The cluster profile's ZooKeeper ensemble and Postgres primary/standby pair
// (deploy/local/cluster/zookeeper.sh and postgres.sh, started by
// `CLUSTER=1 make infra-up`), for the failover tests. Like every component,
// one that is not running fails the test, never skips it.
const (
	EnvZooKeeperEnsembleAddrs = "SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS"
	EnvPostgresHADSN          = "SUNDIAL_TEST_PG_HA_DSN"
)

// Defaults match the scripts' ports.
const (
	DefaultZooKeeperEnsembleAddrs = "127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193"
	DefaultPostgresHADSN          = "postgres://sundial:sundial@127.0.0.1:5441,127.0.0.1:5442/sundial?target_session_attrs=read-write&sslmode=disable"
)

// ZooKeeperEnsembleAddrs are the ensemble's client addresses
// (SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS or the default), each checked to accept
// connections: a failover test needs all three members at its start.
func ZooKeeperEnsembleAddrs(t testing.TB) []string {
	t.Helper()
	addrs := splitList(envOr(EnvZooKeeperEnsembleAddrs, DefaultZooKeeperEnsembleAddrs))
	for _, a := range addrs {
		requireReachable(t, "the ZooKeeper ensemble (CLUSTER=1 make infra-up)", EnvZooKeeperEnsembleAddrs, []string{a})
	}
	return addrs
}

// PostgresHADSN is the multi-host DSN of the primary/standby pair
// (SUNDIAL_TEST_PG_HA_DSN or the default), checked that a read-write
// session opens through it.
func PostgresHADSN(t testing.TB) string {
	t.Helper()
	dsn := envOr(EnvPostgresHADSN, DefaultPostgresHADSN)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testinfra: %s=%q is not a URL: %v", EnvPostgresHADSN, dsn, err)
	}
	requireReachable(t, "the Postgres primary/standby pair (CLUSTER=1 make infra-up)", EnvPostgresHADSN, strings.Split(u.Host, ","))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err == nil {
		err = pool.Ping(ctx)
		pool.Close()
	}
	if err != nil {
		t.Fatalf("%s", unreachable("the Postgres primary/standby pair (CLUSTER=1 make infra-up)", EnvPostgresHADSN, u.Host, "no read-write session: "+err.Error()))
	}
	return dsn
}

// PostgresHASchema creates a schema of the test's own on the pair's primary
// and returns the multi-host DSN with its search_path set to it. The schema
// is dropped when the test ends, on whichever node is the primary then.
func PostgresHASchema(t testing.TB) string {
	t.Helper()
	base := PostgresHADSN(t)
	schema := UniqueName(t, 63)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testinfra: connect to the Postgres pair: %v", err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testinfra: create schema %s on the Postgres pair: %v", schema, err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })
	return WithSearchPath(base, schema)
}

// ClusterScript runs deploy/local/cluster/<name>.sh with args (a fault drill:
// kill, kill-primary, promote; or up, to heal) and returns its standard
// output, trimmed; it fails the test when the script does.
func ClusterScript(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := RunClusterScript(name, args...)
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	return out
}

// RunClusterScript is ClusterScript for cleanups and goroutines, where a
// failure is to be reported rather than end the test.
func RunClusterScript(name string, args ...string) (string, error) {
	script := filepath.Join(checkoutRoot(), "deploy", "local", "cluster", name+".sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
