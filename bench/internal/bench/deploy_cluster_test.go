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
	u, ok := r.clusterUsage(time.Now())
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
	if _, ok := r.clusterUsage(time.Now()); ok {
		t.Error("a node without a pid file was measured")
	}
}
