package testinfra

import (
	"net"
	"net/url"
	"os"
	"testing"

	"github.com/sundialhq/sundial/testkit/harness"
)

// The secure listeners deploy/local/infra.sh runs beside the open ones, as
// `infra.sh env` prints them (docs/operations.md, "TLS and credentials"):
// every one serves the local CA's server certificate (for 127.0.0.1 and
// localhost), and the user the script creates in each component is
// SecureUser (Cassandra's secure node has its default superuser instead).
const (
	EnvSecureCAFile            = harness.EnvCAFile
	EnvSecurePostgresDSN       = "SUNDIAL_TEST_SECURE_POSTGRES_DSN"
	EnvSecureRedisAddr         = "SUNDIAL_TEST_SECURE_REDIS_ADDR"
	EnvSecureZooKeeperAddrs    = "SUNDIAL_TEST_SECURE_ZK_ADDRS"
	EnvSecureKafkaBrokers      = "SUNDIAL_TEST_SECURE_KAFKA_BROKERS"
	EnvSecureCassandraHosts    = "SUNDIAL_TEST_SECURE_CASSANDRA_HOSTS"
	EnvSecureUsername          = "SUNDIAL_TEST_SECURE_USERNAME"
	EnvSecurePassword          = "SUNDIAL_TEST_SECURE_PASSWORD"
	EnvSecureCassandraUsername = "SUNDIAL_TEST_SECURE_CASSANDRA_USERNAME"
	EnvSecureCassandraPassword = "SUNDIAL_TEST_SECURE_CASSANDRA_PASSWORD"
)

// Defaults match deploy/local/infra.sh's default ports and users.
const (
	DefaultSecureRedisAddr         = "127.0.0.1:6380"
	DefaultSecureZooKeeperAddrs    = "127.0.0.1:2182"
	DefaultSecureKafkaBrokers      = "127.0.0.1:9094"
	DefaultSecureCassandraHosts    = "127.0.0.1:9043"
	DefaultSecureUsername          = "sundial_secure"
	DefaultSecurePassword          = "sundial-secure-local"
	DefaultSecureCassandraUsername = "cassandra"
	DefaultSecureCassandraPassword = "cassandra"
)

// SecureUser is a component user and its password.
type SecureUser struct{ Username, Password string }

// SecureCAFile is the PEM file of the development CA that signs every
// secure listener's certificate and the api's under make run
// (harness.Infra.CAFile: SUNDIAL_TEST_SECURE_CA_FILE, or .infra/tls/ca.crt
// at the repository root), checked to be readable.
func SecureCAFile(t testing.TB) string {
	t.Helper()
	f := harness.InfraFromEnv().CAFile
	if _, err := os.Stat(f); err != nil {
		t.Fatalf("testinfra: the local CA (%s) is missing: %v.\n"+
			"deploy/local/infra.sh up makes it with the secure listeners; set %s if the infrastructure lives elsewhere (source <(deploy/local/infra.sh env)).",
			f, err, EnvSecureCAFile)
	}
	return f
}

// SecureCredentials is the user infra.sh creates for the secure modes of
// Postgres (SCRAM over TLS only), Redis (an ACL user limited to the t: and
// sundial: key prefixes) and Kafka (SCRAM-SHA-512 on the SASL_SSL listener).
func SecureCredentials() SecureUser {
	return SecureUser{envOr(EnvSecureUsername, DefaultSecureUsername), envOr(EnvSecurePassword, DefaultSecurePassword)}
}

// SecureCassandraCredentials is the login of the secure Cassandra node.
func SecureCassandraCredentials() SecureUser {
	return SecureUser{envOr(EnvSecureCassandraUsername, DefaultSecureCassandraUsername), envOr(EnvSecureCassandraPassword, DefaultSecureCassandraPassword)}
}

// SecurePostgresDSN is a DSN for the secure Postgres user: sslmode=verify-full
// against the local CA, the user's SCRAM password. pg_hba.conf refuses this
// user without TLS.
func SecurePostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvSecurePostgresDSN)
	if dsn == "" {
		u, err := url.Parse(PostgresBaseDSN())
		if err != nil {
			t.Fatalf("testinfra: %s: %v", EnvPostgresDSN, err)
		}
		c := SecureCredentials()
		u.User = url.UserPassword(c.Username, c.Password)
		q := u.Query()
		q.Set("sslmode", "verify-full")
		q.Set("sslrootcert", SecureCAFile(t))
		u.RawQuery = q.Encode()
		dsn = u.String()
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testinfra: %s is not a URL: %v", EnvSecurePostgresDSN, err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	requireReachable(t, "PostgreSQL", EnvSecurePostgresDSN, []string{addr})
	return dsn
}

// SecureRedisAddr is Redis's TLS port, checked to accept connections.
func SecureRedisAddr(t testing.TB) string {
	t.Helper()
	addr := envOr(EnvSecureRedisAddr, DefaultSecureRedisAddr)
	requireReachable(t, "Redis (TLS port)", EnvSecureRedisAddr, []string{addr})
	return addr
}

// SecureZooKeeperAddrs is ZooKeeper's secureClientPort, checked to accept
// connections.
func SecureZooKeeperAddrs(t testing.TB) []string {
	t.Helper()
	addrs := splitList(envOr(EnvSecureZooKeeperAddrs, DefaultSecureZooKeeperAddrs))
	requireReachable(t, "ZooKeeper (secureClientPort)", EnvSecureZooKeeperAddrs, addrs)
	return addrs
}

// SecureKafkaBrokers is the broker's SASL_SSL listener, checked to accept
// connections.
func SecureKafkaBrokers(t testing.TB) []string {
	t.Helper()
	brokers := splitList(envOr(EnvSecureKafkaBrokers, DefaultSecureKafkaBrokers))
	requireReachable(t, "Kafka (SASL_SSL listener)", EnvSecureKafkaBrokers, brokers)
	return brokers
}

// SecureCassandraHosts is the secure Cassandra node (PasswordAuthenticator,
// TLS required), checked to accept connections.
func SecureCassandraHosts(t testing.TB) []string {
	t.Helper()
	hosts := splitList(envOr(EnvSecureCassandraHosts, DefaultSecureCassandraHosts))
	requireReachable(t, "Cassandra (the cassandra-secure node, which infra.sh starts only when asked: SECURE_CASSANDRA=1 make infra-up)", EnvSecureCassandraHosts, hosts)
	return hosts
}

// checkoutRoot is the directory holding go.work above the working directory
// (a test runs in its package's directory), or "." if there is none.
func checkoutRoot() string {
	root, err := harness.RepoRoot(".")
	if err != nil {
		return "."
	}
	return root
}
