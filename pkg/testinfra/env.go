package testinfra

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Environment variables naming the components, as printed by `deploy/local/infra.sh env`.
const (
	EnvPostgresDSN    = "SUNDIAL_TEST_POSTGRES_DSN"
	EnvRedisAddr      = "SUNDIAL_TEST_REDIS_ADDR"
	EnvZooKeeperAddrs = "SUNDIAL_TEST_ZK_ADDRS"
	EnvKafkaBrokers   = "SUNDIAL_TEST_KAFKA_BROKERS"
	EnvCassandraHosts = "SUNDIAL_TEST_CASSANDRA_HOSTS"
)

// Defaults match deploy/local/infra.sh's default ports.
const (
	DefaultPostgresDSN    = "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable"
	DefaultRedisAddr      = "127.0.0.1:6379"
	DefaultZooKeeperAddrs = "127.0.0.1:2181"
	DefaultKafkaBrokers   = "127.0.0.1:9092"
	DefaultCassandraHosts = "127.0.0.1:9042"
)

// dialTimeout bounds the reachability probe each helper makes before using a
// component, so a stopped component fails fast with a useful message instead
// of a driver's retry loop running into the test timeout.
const dialTimeout = 3 * time.Second

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// splitList splits a comma-separated address list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

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
	if maxLen < 12 {
		maxLen = 12
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testinfra: random name: %v", err)
	}
	suffix := hex.EncodeToString(b[:])
	base := sanitize(t.Name())
	if room := maxLen - len(suffix) - 1; len(base) > room {
		base = strings.TrimRight(base[:room], "_")
	}
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		// identifiers must start with a letter
		base = "t" + base
		if room := maxLen - len(suffix) - 1; len(base) > room {
			base = base[:room]
		}
	}
	return base + "_" + suffix
}

func sanitize(s string) string {
	var b strings.Builder
	lastUnderscore := false
	for _, r := range strings.ToLower(s) {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		switch {
		case ok:
			b.WriteRune(r)
			lastUnderscore = false
		case !lastUnderscore && b.Len() > 0:
			b.WriteByte('_')
			lastUnderscore = true
		}
	}
	return strings.TrimRight(b.String(), "_")
}
