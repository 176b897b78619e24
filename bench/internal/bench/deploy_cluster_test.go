package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"
)

// With --redis-cluster the services get the cluster's nodes (after the
// platform's single Redis, so they win) and the workers no liveness, the
// tables say so, and the cluster's nodes are measured as one "redis".
func TestRedisClusterDeployment(t *testing.T) {
	infra := t.TempDir()
	for _, port := range []string{"7101", "7102"} {
		dir := filepath.Join(infra, "redis-cluster", port)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// This test's own pid stands for each node.
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{clock: clock.Real{}, opts: Options{InfraDir: infra, Executors: 128, Deploy: Deploy{Ranges: 16, RedisCluster: "127.0.0.1:7101,127.0.0.1:7102"}}}
	env := r.serviceEnv("127.0.0.1:9")
	for _, want := range []string{"SUNDIAL_REDIS_ADDR=127.0.0.1:7101,127.0.0.1:7102"} {
		if !slices.Contains(env, want) {
			t.Errorf("service env %v lacks %s", env, want)
		}
	}
	d := &deployment{r: r, topo: topology{ranges: 16}}
	if got := d.describe(); !strings.Contains(got, "a Redis Cluster of 2 nodes") {
		t.Errorf("describe = %q", got)
	}
	u, ok := r.clusterUsage(time.Now(), "redis")
	if !ok || u.RSS <= 0 {
		t.Fatalf("cluster usage %+v, %v; want both nodes read", u, ok)
	}
	self, err := harness.ReadUsage(os.Getpid(), false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS < self.RSS*3/2 {
		t.Errorf("the cluster's RSS %d, want the two nodes summed (each %d)", u.RSS, self.RSS)
	}
	r.opts.Deploy.RedisCluster = "127.0.0.1:7101,127.0.0.1:7199"
	if _, ok := r.clusterUsage(time.Now(), "redis"); ok {
		t.Error("a node without a pid file was measured")
	}
}

// A clustered ZooKeeper, Kafka, Cassandra or Postgres is measured as one
// component: its nodes' pid files, where deploy/local/cluster/*.sh keeps
// them, summed; a missing node leaves the component out rather than read
// as CPU given back.
func TestClusteredComponentsMeasuredAsOne(t *testing.T) {
	infra := t.TempDir()
	pid := []byte(strconv.Itoa(os.Getpid()))
	write := func(rel string) {
		t.Helper()
		f := filepath.Join(infra, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, pid, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"1", "2", "3"} {
		write(filepath.Join("zk-ensemble", n, "pid"))
	}
	write(filepath.Join("pg-ha", "a", "data", "postmaster.pid"))
	write(filepath.Join("pg-ha", "b", "data", "postmaster.pid"))
	r := &Runner{clock: clock.Real{}, opts: Options{InfraDir: infra, Deploy: Deploy{Clustered: []string{"zookeeper", "postgres", "kafka"}}}}
	self, err := harness.ReadUsage(os.Getpid(), false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snap := r.snapUsage(&deployment{r: r, plat: &harness.Platform{}})
	zk, ok := snap["zookeeper"]
	if !ok || zk.RSS < self.RSS*5/2 {
		t.Errorf("zookeeper %+v (found %v), want three nodes summed (each %d)", zk, ok, self.RSS)
	}
	if pg, ok := snap["postgres"]; !ok || pg.RSS < self.RSS*3/2 {
		t.Errorf("postgres %+v (found %v), want two nodes summed", pg, ok)
	}
	if k, ok := snap["kafka"]; ok {
		t.Errorf("kafka measured as %+v with no broker's pid file", k)
	}
	if err := os.Remove(filepath.Join(infra, "zk-ensemble", "2", "pid")); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.snapUsage(&deployment{r: r, plat: &harness.Platform{}})["zookeeper"]; ok {
		t.Error("zookeeper measured with a node missing")
	}
}
