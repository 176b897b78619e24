package harness

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables naming the components, as printed by
// `deploy/local/infra.sh env`.
const (
	EnvPostgresDSN    = "SUNDIAL_TEST_POSTGRES_DSN"
	EnvRedisAddr      = "SUNDIAL_TEST_REDIS_ADDR"
	EnvZooKeeperAddrs = "SUNDIAL_TEST_ZK_ADDRS"
	EnvKafkaBrokers   = "SUNDIAL_TEST_KAFKA_BROKERS"
	EnvCassandraHosts = "SUNDIAL_TEST_CASSANDRA_HOSTS"
	// EnvCAFile is the development CA's certificate; its key, ca.key, is
	// beside it.
	EnvCAFile = "SUNDIAL_TEST_SECURE_CA_FILE"
)

// Defaults match deploy/local/infra.sh's default ports.
const (
	DefaultPostgresDSN    = "postgres://sundial:sundial@127.0.0.1:5432/sundial?sslmode=disable"
	DefaultRedisAddr      = "127.0.0.1:6379"
	DefaultZooKeeperAddrs = "127.0.0.1:2181"
	DefaultKafkaBrokers   = "127.0.0.1:9092"
	DefaultCassandraHosts = "127.0.0.1:9042"
)

// Infra is where the five components listen.
type Infra struct {
	PostgresDSN    string // the shared database, without a per-deployment schema
	RedisAddr      string
	ZooKeeperAddrs []string
	KafkaBrokers   []string
	CassandraHosts []string
	// CAFile is the one development CA (infra.sh's .infra/tls/ca.crt, its
	// key ca.key beside it): it signs the components' secure listeners
	// and, under Config.TLS, the api's certificates.
	CAFile string
}

// InfraFromEnv reads the SUNDIAL_TEST_* variables, falling back to the
// local defaults for each one unset (for CAFile, .infra/tls/ca.crt in the
// checkout holding the working directory).
func InfraFromEnv() Infra {
	return Infra{
		CAFile:         EnvOr(EnvCAFile, defaultCAFile()),
		PostgresDSN:    EnvOr(EnvPostgresDSN, DefaultPostgresDSN),
		RedisAddr:      EnvOr(EnvRedisAddr, DefaultRedisAddr),
		ZooKeeperAddrs: SplitList(EnvOr(EnvZooKeeperAddrs, DefaultZooKeeperAddrs)),
		KafkaBrokers:   SplitList(EnvOr(EnvKafkaBrokers, DefaultKafkaBrokers)),
		CassandraHosts: SplitList(EnvOr(EnvCassandraHosts, DefaultCassandraHosts)),
	}
}

// defaultCAFile is .infra/tls/ca.crt in the checkout holding the working
// directory (where infra.sh makes it), or empty outside a checkout.
func defaultCAFile() string {
	root, err := RepoRoot(".")
	if err != nil {
		return ""
	}
	return filepath.Join(root, ".infra", "tls", "ca.crt")
}

// EnvOr is the trimmed value of the environment variable name, or def when
// it is unset or blank.
func EnvOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// SplitList splits a comma-separated list, dropping empty entries.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// UniqueName is base reduced to lower-case letters, digits and '_', cut to
// leave room, then '_' and 8 random hex digits: at most maxLen bytes (at
// least 12). It is a valid identifier for Postgres schemas and Cassandra
// keyspaces, and a safe Kafka topic, group or ZooKeeper node name.
func UniqueName(base string, maxLen int) (string, error) {
	if maxLen < 12 {
		maxLen = 12
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	suffix := hex.EncodeToString(b[:])
	room := maxLen - len(suffix) - 1
	base = sanitize(base)
	if len(base) > room {
		base = strings.TrimRight(base[:room], "_")
	}
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		// identifiers must start with a letter
		base = "t" + base
		if len(base) > room {
			base = base[:room]
		}
	}
	return base + "_" + suffix, nil
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
