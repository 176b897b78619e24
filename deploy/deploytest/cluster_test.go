package deploytest

import (
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

// The servers ci/cluster-values.yaml names for each component.
var (
	clusterPostgres  = []string{"pg-0.pg.db.svc:5432", "pg-1.pg.db.svc:5432"}
	clusterRedis     = []string{"redis-0.redis.cache.svc:6379", "redis-1.redis.cache.svc:6379", "redis-2.redis.cache.svc:6379"}
	clusterZooKeeper = []string{"zk-0.zk.coord.svc:2181", "zk-1.zk.coord.svc:2181", "zk-2.zk.coord.svc:2181"}
	clusterKafka     = []string{"kafka-0.kafka.stream.svc:9092", "kafka-1.kafka.stream.svc:9092", "kafka-2.kafka.stream.svc:9092"}
	clusterCassandra = []string{"cass-0.cass.ledger.svc:9042", "cass-1.cass.ledger.svc:9042", "cass-2.cass.ledger.svc:9042"}
)

// settingsOf returns a service's SUNDIAL_* settings: its ConfigMap's data,
// or for the migration Job (svc "migrate") its literal env entries.
func settingsOf(t *testing.T, objs []object, svc string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if svc == "migrate" {
		jobs := byKind(objs, "Job")
		if len(jobs) != 1 {
			t.Fatalf("%d migration Jobs rendered, want 1", len(jobs))
		}
		for _, c := range list(dig(jobs[0], "spec", "template", "spec", "containers")) {
			for _, e := range list(dig(c, "env")) {
				if v := dig(e, "value"); v != nil {
					out[str(dig(e, "name"))] = str(v)
				}
			}
		}
		return out
	}
	cm := find(objs, "ConfigMap", "-"+svc)
	if cm == nil {
		t.Fatalf("no ConfigMap for %s", svc)
	}
	for k, v := range mapOf(dig(cm, "data")) {
		out[k] = str(v)
	}
	return out
}

// pgHosts parses a DSN as the services do (pgx) and returns the host:port
// of each server it tries, in order, and the parsed config.
func pgHosts(t *testing.T, who, dsn string) ([]string, *pgconn.Config) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s: pgx cannot parse SUNDIAL_POSTGRES_DSN %q: %v", who, dsn, err)
	}
	var hosts []string
	add := func(host string, port uint16) {
		hp := net.JoinHostPort(host, strconv.Itoa(int(port)))
		if !slices.Contains(hosts, hp) {
			hosts = append(hosts, hp)
		}
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	return hosts, cfg
}

func sameFunc(a, b any) bool {
	return a != nil && b != nil && reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TestChartClusteredComponents: with every component in its clustered
// form (ci/cluster-values.yaml), each service that uses a component is
// given all of its servers, in the form the service's own parser takes
// as several: the multi-host Postgres DSN that pgx tries in order and
// that only accepts a read-write session, the comma-separated Redis
// nodes that make the services run a Redis Cluster client, the ensemble,
// the brokers and the ring; and the credentials and TLS of each apply to
// it whatever the number of servers.
func TestChartClusteredComponents(t *testing.T) {
	objs, err := render(t, valuesFiles(t)["cluster"])
	if err != nil {
		t.Fatal(err)
	}

	t.Run("postgres", func(t *testing.T) {
		for _, svc := range append(slices.Clone(services), "migrate") {
			dsn := settingsOf(t, objs, svc)["SUNDIAL_POSTGRES_DSN"]
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatalf("%s: SUNDIAL_POSTGRES_DSN %q: %v", svc, dsn, err)
			}
			if want := strings.Join(clusterPostgres, ","); u.Host != want {
				t.Errorf("%s: the DSN names %q, want the primary and the standby %q", svc, u.Host, want)
			}
			if got := u.Query()["target_session_attrs"]; !slices.Equal(got, []string{"read-write"}) {
				t.Errorf("%s: target_session_attrs=%v in %q, want read-write once", svc, got, dsn)
			}
			if u.User.Username() != "sundial_app" || u.Path != "/scheduler" {
				t.Errorf("%s: the DSN %q lost the user or the database", svc, dsn)
			}
			hosts, cfg := pgHosts(t, svc, dsn)
			if !slices.Equal(hosts, clusterPostgres) {
				t.Errorf("%s: pgx would try %v, want %v in that order", svc, hosts, clusterPostgres)
			}
			if !sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsReadWrite) {
				t.Errorf("%s: pgx would accept a session on a standby (no read-write check)", svc)
			}
			if cfg.ConnectTimeout != 5*time.Second {
				t.Errorf("%s: pgx connect timeout %s, want 5s (postgres.params.connect_timeout)", svc, cfg.ConnectTimeout)
			}
		}
	})

	t.Run("redis cluster", func(t *testing.T) {
		for _, svc := range []string{"api", "worker"} {
			s := settingsOf(t, objs, svc)
			addrs, err := lease.ParseAddrs(s["SUNDIAL_REDIS_ADDR"])
			if err != nil {
				t.Fatalf("%s: SUNDIAL_REDIS_ADDR %q: %v", svc, s["SUNDIAL_REDIS_ADDR"], err)
			}
			// Several addresses: the services make a cluster client.
			if !slices.Equal(addrs, clusterRedis) {
				t.Errorf("%s: Redis nodes %v, want %v", svc, addrs, clusterRedis)
			}
			for k, want := range map[string]string{
				"SUNDIAL_REDIS_USERNAME":        "sundial",
				"SUNDIAL_REDIS_PASSWORD_FILE":   "/etc/sundial/credentials/redis/password",
				"SUNDIAL_REDIS_TLS":             "true",
				"SUNDIAL_REDIS_TLS_CA_FILE":     "/etc/sundial/tls/redis/ca.crt",
				"SUNDIAL_REDIS_TLS_SERVER_NAME": "redis.cache.svc",
			} {
				if s[k] != want {
					t.Errorf("%s: %s=%q, want %q", svc, k, s[k], want)
				}
			}
		}
		for _, svc := range []string{"prefetcher", "relay"} {
			if v, ok := settingsOf(t, objs, svc)["SUNDIAL_REDIS_ADDR"]; ok {
				t.Errorf("%s uses no Redis but is given SUNDIAL_REDIS_ADDR=%q", svc, v)
			}
		}
	})

	t.Run("zookeeper, kafka, cassandra", func(t *testing.T) {
		checkList := func(svc, key string, want []string) map[string]string {
			t.Helper()
			s := settingsOf(t, objs, svc)
			if got := splitComma(s[key]); !slices.Equal(got, want) {
				t.Errorf("%s: %s=%q, want %v", svc, key, s[key], want)
			}
			return s
		}
		s := checkList("prefetcher", "SUNDIAL_ZK_ADDRS", clusterZooKeeper)
		if s["SUNDIAL_ZK_USERNAME"] != "sundial" {
			t.Errorf("prefetcher: no ZooKeeper identity on the ensemble")
		}
		for _, svc := range []string{"api", "relay", "worker"} {
			s := checkList(svc, "SUNDIAL_KAFKA_BROKERS", clusterKafka)
			if s["SUNDIAL_KAFKA_SASL_MECHANISM"] != "SCRAM-SHA-512" || s["SUNDIAL_KAFKA_SASL_USERNAME"] != "sundial" {
				t.Errorf("%s: SASL %q as %q, want SCRAM-SHA-512 as sundial", svc, s["SUNDIAL_KAFKA_SASL_MECHANISM"], s["SUNDIAL_KAFKA_SASL_USERNAME"])
			}
		}
		if r := settingsOf(t, objs, "relay")["SUNDIAL_TOPIC_REPLICATION"]; r != "3" {
			t.Errorf("relay: SUNDIAL_TOPIC_REPLICATION=%q, want 3 on three brokers", r)
		}
		for _, svc := range []string{"api", "prefetcher", "worker", "migrate"} {
			s := checkList(svc, "SUNDIAL_CASSANDRA_HOSTS", clusterCassandra)
			if s["SUNDIAL_CASSANDRA_USERNAME"] != "sundial" || s["SUNDIAL_CASSANDRA_PASSWORD_FILE"] == "" {
				t.Errorf("%s: no Cassandra credentials on the ring", svc)
			}
		}
		for _, svc := range []string{"api", "migrate"} {
			if r := settingsOf(t, objs, svc)["SUNDIAL_CASSANDRA_REPLICATION"]; !strings.Contains(r, "NetworkTopologyStrategy") || !strings.Contains(r, "'datacenter1': 3") {
				t.Errorf("%s: SUNDIAL_CASSANDRA_REPLICATION=%q, want three replicas in datacenter1", svc, r)
			}
		}
	})
}

// TestChartPostgresHosts: how postgres.hosts shapes the DSN beyond the
// cluster values: a target_session_attrs in params wins over the
// read-write default, a single entry is a plain one-host DSN with no
// session requirement, and without hosts, host and port are used.
func TestChartPostgresHosts(t *testing.T) {
	def := valuesFiles(t)["default"]
	dsnOf := func(t *testing.T, values string, set ...string) string {
		t.Helper()
		objs, err := render(t, values, set...)
		if err != nil {
			t.Fatal(err)
		}
		dsn := settingsOf(t, objs, "worker")["SUNDIAL_POSTGRES_DSN"]
		if job := settingsOf(t, objs, "migrate")["SUNDIAL_POSTGRES_DSN"]; job != dsn {
			t.Errorf("the migration Job's DSN %q differs from the worker's %q", job, dsn)
		}
		return dsn
	}
	t.Run("params override the default", func(t *testing.T) {
		dsn := dsnOf(t, valuesFiles(t)["cluster"], "postgres.params.target_session_attrs=primary")
		u, _ := url.Parse(dsn)
		if got := u.Query()["target_session_attrs"]; !slices.Equal(got, []string{"primary"}) {
			t.Errorf("target_session_attrs=%v in %q, want primary alone", got, dsn)
		}
		_, cfg := pgHosts(t, "worker", dsn)
		if !sameFunc(cfg.ValidateConnect, pgconn.ValidateConnectTargetSessionAttrsPrimary) {
			t.Errorf("pgx does not check for the primary with %q", dsn)
		}
	})
	t.Run("one entry", func(t *testing.T) {
		dsn := dsnOf(t, def, "postgres.hosts={pg-0.pg:6432}")
		if want := "postgres://sundial@pg-0.pg:6432/sundial?sslmode=disable"; dsn != want {
			t.Errorf("DSN %q, want %q", dsn, want)
		}
	})
	t.Run("IPv6 entries", func(t *testing.T) {
		dsn := dsnOf(t, def, "postgres.hosts={[fd00::1]:5432,[fd00::2]:5433}")
		hosts, _ := pgHosts(t, "worker", dsn)
		if want := []string{"[fd00::1]:5432", "[fd00::2]:5433"}; !slices.Equal(hosts, want) {
			t.Errorf("pgx would try %v from %q, want %v", hosts, dsn, want)
		}
	})
	t.Run("host and port without hosts", func(t *testing.T) {
		dsn := dsnOf(t, def, "postgres.host=pg.db.svc", "postgres.port=6432")
		if want := "postgres://sundial@pg.db.svc:6432/sundial?sslmode=disable"; dsn != want {
			t.Errorf("DSN %q, want %q", dsn, want)
		}
	})
}
