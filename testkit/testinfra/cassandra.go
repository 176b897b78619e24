package testinfra

import (
	"context"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/sundialhq/sundial/testkit/harness"
)

// CassandraHosts is the test Cassandra's contact points (SUNDIAL_TEST_CASSANDRA_HOSTS,
// comma-separated host:port, or the default), checked to accept connections.
func CassandraHosts(t testing.TB) []string {
	t.Helper()
	hosts := splitList(envOr(EnvCassandraHosts, DefaultCassandraHosts))
	requireReachable(t, "Cassandra", EnvCassandraHosts, hosts)
	return hosts
}

// CassandraCluster is a gocql configuration for the test Cassandra: protocol
// v4 (what gocql v1.x speaks to Cassandra 5.0), consistency ONE (one node),
// and timeouts generous enough for schema changes on a busy 2-core machine.
// Set Keyspace on it and call CreateSession for sessions of your own.
func CassandraCluster(t testing.TB) *gocql.ClusterConfig {
	t.Helper()
	return harness.Infra{CassandraHosts: CassandraHosts(t)}.CassandraCluster()
}

// CassandraSession opens a session on cluster and closes it when the test ends.
func CassandraSession(t testing.TB, cluster *gocql.ClusterConfig) *gocql.Session {
	t.Helper()
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("%s", unreachable("Cassandra", EnvCassandraHosts, cluster.Hosts[0], "create session: "+err.Error()))
	}
	t.Cleanup(s.Close)
	return s
}

// CassandraKeyspace creates a keyspace of the test's own (SimpleStrategy, one
// replica) and drops it when the test ends; it returns the keyspace's name.
// Use it when the code under test creates its own sessions or tables.
func CassandraKeyspace(t testing.TB) string {
	t.Helper()
	ks := UniqueName(t, 48) // Cassandra's limit for keyspace names
	admin := CassandraSession(t, CassandraCluster(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := admin.Query(`CREATE KEYSPACE ` + ks +
		` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`).WithContext(ctx).Exec(); err != nil {
		t.Fatalf("testinfra: create keyspace %s: %v", ks, err)
	}
	// Registered after the admin session's Close, so it runs before it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := admin.Query(`DROP KEYSPACE IF EXISTS ` + ks).WithContext(ctx).Exec(); err != nil {
			t.Logf("testinfra: cassandra keyspace %s left behind: %v", ks, err)
		}
	})
	return ks
}

// Cassandra returns a session bound to a fresh keyspace of the test's own
// (see CassandraKeyspace) and the keyspace's name. The session is closed and
// the keyspace dropped when the test ends.
func Cassandra(t testing.TB) (*gocql.Session, string) {
	t.Helper()
	ks := CassandraKeyspace(t)
	c := CassandraCluster(t)
	c.Keyspace = ks
	return CassandraSession(t, c), ks
}
