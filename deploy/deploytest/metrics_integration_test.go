//go:build integration

package deploytest

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sundialhq/sundial/pkg/client"
	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// TestQueriedMetricsAreExported runs the four services as processes against
// the real components (isolated like tests/e2e: own schema, topics, group,
// Redis prefix, keyspace, election path), fires a job every second at a
// local sink, scrapes every /metrics, and checks that each metric the
// dashboards and alert rules query is among the names the services
// actually export.
func TestQueriedMetricsAreExported(t *testing.T) {
	queried := queriedMetrics(t)
	bins := buildServices(t)

	_, redisPrefix := testinfra.Redis(t)
	topics := testinfra.UniqueName(t, 60)
	// The tenants' signing keys are sealed with it (api and worker).
	kek := filepath.Join(t.TempDir(), "signing-kek")
	if err := os.WriteFile(kek, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"SUNDIAL_POSTGRES_DSN=" + testinfra.PostgresDSN(t),
		"SUNDIAL_REDIS_ADDR=" + testinfra.RedisAddr(t),
		"SUNDIAL_REDIS_KEY_PREFIX=" + redisPrefix,
		"SUNDIAL_ZK_ADDRS=" + strings.Join(testinfra.ZooKeeperAddrs(t), ","),
		"SUNDIAL_KAFKA_BROKERS=" + strings.Join(testinfra.KafkaBrokers(t), ","),
		"SUNDIAL_CASSANDRA_HOSTS=" + strings.Join(testinfra.CassandraHosts(t), ","),
		"SUNDIAL_CASSANDRA_KEYSPACE=" + testinfra.CassandraKeyspace(t),
		"SUNDIAL_TOPIC_PREFIX=" + topics,
		"SUNDIAL_GROUP=" + testinfra.UniqueName(t, 60),
		"SUNDIAL_ELECTION_PATH=/sundial-deploytest/" + testinfra.UniqueName(t, 60),
		"SUNDIAL_SIGNING_KEY_ENCRYPTION_KEY_FILE=" + kek,
		"SUNDIAL_LOG_FORMAT=text",
		"SUNDIAL_DRAIN_TIMEOUT=20s",
		// The sink is an httptest server on loopback, which the worker's
		// outbound-address policy refuses unless allowlisted.
		"SUNDIAL_ALLOW_TARGET_ADDRS=127.0.0.1",
	}
	grpcAddr := freeAddr(t)
	// The api serves TLS, as the chart deploys it, so its certificate
	// expiry gauge (an alert's) is exported like everything else.
	ca := tlstest.NewCA(t, "deploytest")
	apiCert := ca.Server("api")
	admins := map[string]string{}
	// api first (migrations), the relay creates the topics, then the rest.
	for _, s := range []string{"api", "relay", "prefetcher", "worker"} {
		var args []string
		switch s {
		case "api":
			args = []string{"--grpc-addr", grpcAddr, "--tokens", "deploytest-token=deploytest",
				"--tls-cert-file", apiCert.CertFile, "--tls-key-file", apiCert.KeyFile}
		case "relay":
			args = []string{"--topic-partitions", "2"}
		case "worker":
			// The per-job series exist only for watched jobs, created at
			// zero on start, so any id makes the worker export them.
			args = []string{"--metrics-job-ids", watchedJob}
		}
		admins[s] = startService(t, bins[s], s, env, args...)
	}

	var hits atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	createJob(t, grpcAddr, ca.CertFile, sink.URL)

	deadline := time.Now().Add(2 * time.Minute)
	var missing []string
	for {
		exported := map[string]string{}
		for _, addr := range admins {
			for name, typ := range scrape(t, addr) {
				exported[name] = typ
			}
		}
		missing = missing[:0]
		// Every queried family must be there on a healthy run, failure
		// counters included: the services create their failure-only series
		// at zero (client_golang prints no family for a vector without
		// children), so dashboards show 0 rather than no data.
		for name, where := range queried {
			if !isExported(name, exported) {
				missing = append(missing, fmt.Sprintf("%s (queried by %s)", name, strings.Join(where, "; ")))
			}
		}
		if len(missing) == 0 && hits.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Fatalf("after 2 minutes (%d requests reached the sink), no service exports:\n  %s", hits.Load(), strings.Join(missing, "\n  "))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("all %d queried metrics are exported; the sink got %d requests", len(queried), hits.Load())
}

// watchedJob is the job id the test's worker watches (--metrics-job-ids).
const watchedJob = "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b"

// isExported: a series name is exported as itself (counter, gauge) or as
// part of a histogram family (_bucket, _sum, _count).
func isExported(name string, exported map[string]string) bool {
	if _, ok := exported[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && (exported[base] == "histogram" || exported[base] == "summary") {
			return true
		}
	}
	return false
}

// scrape returns the metric families (name → type) one /metrics serves.
func scrape(t *testing.T, addr string) map[string]string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Logf("scrape %s: %v", addr, err)
		return nil
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

func buildServices(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for _, s := range services {
		bin := filepath.Join(dir, "sundial-"+s)
		run(t, repoPath(t, "services", s), "go", "build", "-o", bin, ".")
		out[s] = bin
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startService runs one service until the test ends (SIGTERM, then its
// drain) and returns its admin address once /readyz answers.
func startService(t *testing.T, bin, name string, env []string, args ...string) string {
	t.Helper()
	admin := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), env...), "SUNDIAL_ADMIN_ADDR="+admin)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			t.Logf("---- %s log (tail) ----\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	c := http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited during start-up:\n%s", name, b)
		default:
		}
		if resp, err := c.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return admin
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 90s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createJob registers a job firing the sink every second.
func createJob(t *testing.T, grpcAddr, caFile, url string) {
	t.Helper()
	creds, err := client.TLSCredentials(client.TLSFiles{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(grpcAddr,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(auth.Bearer("deploytest-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = sundialv1.NewJobServiceClient(conn).CreateJob(ctx, &sundialv1.CreateJobRequest{
		Job: &sundialv1.Job{
			Name:     "deploytest-every-second",
			Schedule: &sundialv1.Schedule{Timezone: "UTC", Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}
