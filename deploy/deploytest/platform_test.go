package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// platformEnv runs `platform.sh env instance` with only the environment
// given (no SUNDIAL_* or CLUSTER of the caller's: make test sets CLUSTER
// for its own components) and a run folder of its own, and returns the
// settings it printed, or its error output when it failed.
func platformEnv(t *testing.T, run, instance string, env ...string) (map[string]string, string, error) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("..", "local", "platform.sh"), "env", instance)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SUNDIAL_") && !strings.HasPrefix(kv, "CLUSTER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SUNDIAL_RUN_DIR="+run, "SUNDIAL_INFRA_DIR="+filepath.Join(run, "infra"))
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got, stderr.String(), err
}

// make run CLUSTER=… runs the services on the components of the cluster
// profile it names, each from what its deploy/local/cluster script's env
// prints, and on the single nodes otherwise; a ring gets the ledger
// keyspace at replication factor 3. The choice is remembered for later
// starts (CLUSTER=0 forgets it), and a name with no script is refused.
func TestPlatformRunsServicesOnTheClusterNamed(t *testing.T) {
	single := map[string]string{
		"SUNDIAL_POSTGRES_DSN":    "127.0.0.1:5432/",
		"SUNDIAL_REDIS_ADDR":      "127.0.0.1:6379",
		"SUNDIAL_ZK_ADDRS":        "127.0.0.1:2181",
		"SUNDIAL_KAFKA_BROKERS":   "127.0.0.1:9092",
		"SUNDIAL_CASSANDRA_HOSTS": "127.0.0.1:9042",
	}
	clustered := map[string]string{
		"SUNDIAL_POSTGRES_DSN":    "127.0.0.1:5441,127.0.0.1:5442/sundial?target_session_attrs=read-write",
		"SUNDIAL_REDIS_ADDR":      "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103",
		"SUNDIAL_ZK_ADDRS":        "127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193",
		"SUNDIAL_KAFKA_BROKERS":   "127.0.0.1:9191,127.0.0.1:9192,127.0.0.1:9193",
		"SUNDIAL_CASSANDRA_HOSTS": "127.0.0.2:9142,127.0.0.3:9142,127.0.0.4:9142",
	}
	component := map[string]string{"SUNDIAL_POSTGRES_DSN": "postgres", "SUNDIAL_REDIS_ADDR": "redis",
		"SUNDIAL_ZK_ADDRS": "zookeeper", "SUNDIAL_KAFKA_BROKERS": "kafka", "SUNDIAL_CASSANDRA_HOSTS": "cassandra"}
	check := func(t *testing.T, got map[string]string, on map[string]bool) {
		t.Helper()
		for k, c := range component {
			want := single[k]
			if on[c] {
				want = clustered[k]
			}
			if !strings.Contains(got[k], want) {
				t.Errorf("%s=%q, want it to hold %q (%s clustered: %v)", k, got[k], want, c, on[c])
			}
		}
		repl, ok := got["SUNDIAL_CASSANDRA_REPLICATION"]
		if on["cassandra"] != ok || (ok && !strings.Contains(repl, "'replication_factor': 3")) {
			t.Errorf("SUNDIAL_CASSANDRA_REPLICATION=%q (set: %v), want replication factor 3 exactly when the ring is used", repl, ok)
		}
	}
	all := map[string]bool{"postgres": true, "redis": true, "zookeeper": true, "kafka": true, "cassandra": true}
	for _, tc := range []struct {
		cluster string
		on      map[string]bool
	}{
		{"", nil},
		{"0", nil},
		{"redis,postgres", map[string]bool{"redis": true, "postgres": true}},
		{"zookeeper, cassandra", map[string]bool{"zookeeper": true, "cassandra": true}},
		{"1", all},
		{"all", all},
	} {
		t.Run("CLUSTER="+tc.cluster, func(t *testing.T) {
			for _, inst := range []string{"api", "worker-2"} {
				got, stderr, err := platformEnv(t, t.TempDir(), inst, "CLUSTER="+tc.cluster)
				if err != nil {
					t.Fatalf("%s: %v: %s", inst, err, stderr)
				}
				check(t, got, tc.on)
			}
		})
	}

	t.Run("remembered", func(t *testing.T) {
		run := t.TempDir()
		if err := os.WriteFile(filepath.Join(run, "platform.env"), []byte("SUNDIAL_PLATFORM_CLUSTER=kafka,redis\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		got, stderr, err := platformEnv(t, run, "relay")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		check(t, got, map[string]bool{"kafka": true, "redis": true})
		got, stderr, err = platformEnv(t, run, "relay", "CLUSTER=0")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		check(t, got, nil)
	})

	t.Run("unknown name", func(t *testing.T) {
		_, stderr, err := platformEnv(t, t.TempDir(), "api", "CLUSTER=redis,mongodb")
		if err == nil || !strings.Contains(stderr, `no cluster script "mongodb"`) {
			t.Fatalf("CLUSTER=redis,mongodb: err %v, stderr %q; want a refusal naming mongodb", err, stderr)
		}
	})
}
