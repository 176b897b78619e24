//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialhq/sundial/pkg/auth"
	"github.com/sundialhq/sundial/pkg/testinfra"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// binDir holds the service binaries, built once for the whole run.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sundial-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, s := range []string{"api", "prefetcher", "relay", "worker"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "sundial-"+s), ".")
		cmd.Dir = filepath.Join(root, "services", s)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n", s, err)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("e2e: go.work not found above " + wd)
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

// platform is one isolated Sundial deployment: its own Postgres schema,
// topic prefix, consumer group, Redis key prefix, Cassandra keyspace and
// election path, shared by the processes it starts.
type platform struct {
	t        *testing.T
	dsn      string
	topics   string
	group    string
	redisPfx string
	keyspace string
	election string
	token    string
	secret   string
	grpcAddr string
	logDir   string

	mu    sync.Mutex
	procs []*proc
	conn  *grpc.ClientConn
}

// newPlatform starts the api and a relay; tests start the prefetchers and
// workers they need with the flags they need.
func newPlatform(t *testing.T) *platform {
	t.Helper()
	_, redisPfx := testinfra.Redis(t)
	p := &platform{
		t:        t,
		dsn:      testinfra.PostgresDSN(t),
		topics:   testinfra.UniqueName(t, 60),
		group:    testinfra.UniqueName(t, 60),
		redisPfx: redisPfx,
		keyspace: testinfra.CassandraKeyspace(t),
		election: "/sundial-e2e/" + testinfra.UniqueName(t, 60),
		token:    "e2e-token",
		secret:   "e2e-signing-secret",
	}
	// The log folder is made before stopAll is registered, so it outlives
	// the processes (cleanups run last-registered first) and their logs can
	// be shown when the test fails.
	p.logDir = t.TempDir()
	t.Cleanup(p.stopAll)
	p.grpcAddr = freeAddr(t)
	p.start("api", "api",
		"--grpc-addr", p.grpcAddr,
		"--tokens", p.token+"=e2e",
		"--cassandra-keyspace", p.keyspace,
	)
	// Topics are created by the relay at start; the workers subscribe after.
	p.start("relay", "relay", "--topic-partitions", "4", "--node-id", "relay-1")
	return p
}

// env is every process's environment: the infrastructure addresses and the
// platform's isolation settings, as SUNDIAL_* variables.
func (p *platform) env(admin string) []string {
	e := os.Environ()
	set := func(k, v string) { e = append(e, k+"="+v) }
	set("SUNDIAL_POSTGRES_DSN", p.dsn)
	set("SUNDIAL_REDIS_ADDR", testinfra.RedisAddr(p.t))
	set("SUNDIAL_REDIS_KEY_PREFIX", p.redisPfx)
	set("SUNDIAL_ZK_ADDRS", strings.Join(testinfra.ZooKeeperAddrs(p.t), ","))
	set("SUNDIAL_KAFKA_BROKERS", strings.Join(testinfra.KafkaBrokers(p.t), ","))
	set("SUNDIAL_CASSANDRA_HOSTS", strings.Join(testinfra.CassandraHosts(p.t), ","))
	set("SUNDIAL_CASSANDRA_KEYSPACE", p.keyspace)
	set("SUNDIAL_TOPIC_PREFIX", p.topics)
	set("SUNDIAL_GROUP", p.group)
	set("SUNDIAL_ELECTION_PATH", p.election)
	set("SUNDIAL_SIGNING_SECRET", p.secret)
	set("SUNDIAL_ADMIN_ADDR", admin)
	set("SUNDIAL_LOG_FORMAT", "text")
	set("SUNDIAL_LOG_LEVEL", "info")
	set("SUNDIAL_DRAIN_TIMEOUT", "20s")
	// The sinks are httptest servers on loopback, which the worker's
	// outbound-address policy refuses unless allowlisted.
	set("SUNDIAL_ALLOW_TARGET_ADDRS", "127.0.0.1")
	return e
}

// proc is one running service process.
type proc struct {
	name  string
	cmd   *exec.Cmd
	admin string
	log   string
	done  chan struct{}
	err   error
}

// start runs service bin (api, prefetcher, relay, worker) under name and
// waits for its /readyz.
func (p *platform) start(name, bin string, args ...string) *proc {
	t := p.t
	t.Helper()
	admin := freeAddr(t)
	logPath := filepath.Join(p.logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "sundial-"+bin), args...)
	cmd.Env = p.env(admin)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	pr := &proc{name: name, cmd: cmd, admin: admin, log: logPath, done: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait()
		f.Close()
		close(pr.done)
	}()
	p.mu.Lock()
	p.procs = append(p.procs, pr)
	p.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-pr.done:
			t.Fatalf("%s exited during start-up: %v\n%s", name, pr.err, tail(logPath, 40))
		default:
		}
		if httpOK("http://" + admin + "/readyz") {
			return pr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 90s\n%s", name, tail(logPath, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill sends SIGKILL: the process gets no chance to drain.
func (pr *proc) kill(t *testing.T) {
	t.Helper()
	_ = pr.cmd.Process.Signal(syscall.SIGKILL)
	<-pr.done
	t.Logf("%s killed with SIGKILL", pr.name)
}

// stop sends SIGTERM and waits for a graceful exit.
func (pr *proc) stop(t *testing.T) error {
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pr.done:
		return pr.err
	case <-time.After(40 * time.Second):
		_ = pr.cmd.Process.Kill()
		<-pr.done
		return fmt.Errorf("%s did not drain within 40s", pr.name)
	}
}

func (p *platform) stopAll() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.mu.Lock()
	procs := p.procs
	p.procs = nil
	p.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		pr := procs[i]
		select {
		case <-pr.done:
			continue
		default:
		}
		if err := pr.stop(p.t); err != nil {
			p.t.Errorf("%s: graceful stop: %v\n%s", pr.name, err, tail(pr.log, 30))
		}
	}
	if p.t.Failed() {
		for _, pr := range procs {
			p.t.Logf("---- %s log (tail) ----\n%s", pr.name, tail(pr.log, 60))
		}
	}
}

// client is a JobService client authenticated as the platform's tenant.
func (p *platform) client() sundialv1.JobServiceClient {
	p.t.Helper()
	if p.conn == nil {
		conn, err := grpc.NewClient(p.grpcAddr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(auth.Bearer(p.token)))
		if err != nil {
			p.t.Fatal(err)
		}
		p.conn = conn
	}
	return sundialv1.NewJobServiceClient(p.conn)
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
