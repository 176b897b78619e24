package testinfra

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// Environment variables naming the components, as printed by
// `deploy/local/infra.sh env` (shared with testkit/harness, which reads the
// same ones for the benchmark).
const (
	EnvPostgresDSN    = harness.EnvPostgresDSN
	EnvRedisAddr      = harness.EnvRedisAddr
	EnvZooKeeperAddrs = harness.EnvZooKeeperAddrs
	EnvKafkaBrokers   = harness.EnvKafkaBrokers
	EnvCassandraHosts = harness.EnvCassandraHosts
)

// Defaults match deploy/local/infra.sh's default ports.
const (
	DefaultPostgresDSN    = harness.DefaultPostgresDSN
	DefaultRedisAddr      = harness.DefaultRedisAddr
	DefaultZooKeeperAddrs = harness.DefaultZooKeeperAddrs
	DefaultKafkaBrokers   = harness.DefaultKafkaBrokers
	DefaultCassandraHosts = harness.DefaultCassandraHosts
)

// dialTimeout bounds the reachability probe each helper makes before using a
// component, so a stopped component fails fast with a useful message instead
// of a driver's retry loop running into the test timeout.
const dialTimeout = 3 * time.Second

func envOr(name, def string) string { return harness.EnvOr(name, def) }

func splitList(s string) []string { return harness.SplitList(s) }

// requireReachable fails the test unless at least one of addrs accepts a TCP
// connection.
func requireReachable(t testing.TB, component, env string, addrs []string) {
	t.Helper()
	var errs []string
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, dialTimeout)
		if err == nil {
			_ = c.Close()
			return
		}
		errs = append(errs, err.Error())
	}
	t.Fatalf("%s", unreachable(component, env, strings.Join(addrs, ","), strings.Join(errs, "; ")))
}

// unreachable is the one message every helper fails with when its component
// does not answer.
func unreachable(component, env, addr, detail string) string {
	return "testinfra: " + component + " at " + addr + " is not reachable (" + detail + ").\n" +
		"Start the local infrastructure with `make infra-up` (or deploy/local/infra.sh up) and check it with `make infra-status`;\n" +
		"if it runs on other ports, set " + env + " (source <(deploy/local/infra.sh env)). See docs/operations.md."
}

// UniqueName is a name for a resource of this test: the test's name reduced
// to lower-case letters, digits and '_', cut to leave room, then '_' and 8
// random hex digits. At most maxLen bytes (at least 12). It is a valid
// identifier for Postgres schemas and Cassandra keyspaces, and a safe Kafka
// topic, group or ZooKeeper node name.
func UniqueName(t testing.TB, maxLen int) string {
	n, err := harness.UniqueName(t.Name(), maxLen)
	if err != nil {
		t.Fatalf("testinfra: random name: %v", err)
	}
	return n
}
