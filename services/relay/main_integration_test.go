//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/services/relay/internal/itest"
)

// buildRelay compiles this command once per test.
func buildRelay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sundial-relay")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// proc is a running relay process.
type proc struct {
	cmd   *exec.Cmd
	admin chan string // the admin address, once logged
	logs  sync.WaitGroup
	done  chan error
}

func startRelay(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{admin: make(chan string, 1), done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--admin-addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	p.cmd.Env = os.Environ()
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	p.logs.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "admin server listening" {
				p.admin <- line.Addr
			}
			if testing.Verbose() && !strings.Contains(sc.Text(), `"level":"DEBUG"`) {
				t.Logf("relay pid %d: %s", p.cmd.Process.Pid, sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	})
	go func() { p.logs.Wait(); p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill sends SIGKILL (kill -9) and reaps the process.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for a second wait
		return err
	case <-time.After(time.Minute):
		t.Fatal("relay process did not exit")
		return nil
	}
}

func (p *proc) adminAddr(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.admin:
		p.admin <- a
		return a
	case <-time.After(time.Minute):
		t.Fatal("relay never logged its admin address")
		return ""
	}
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Relay processes killed with SIGKILL in the middle of their work lose
// nothing: every staged row ends up in Kafka, some perhaps twice (a kill
// between the ack and the commit), and the duplicates are counted.
func TestKilledRelayLosesNothing(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	prefix := itest.TopicPrefix(t)
	bin := buildRelay(t)
	args := []string{"--postgres-dsn", dsn, "--kafka-brokers", strings.Join(itest.Brokers(t), ","),
		"--topic-prefix", prefix, "--topic-replication", "1", "--batch-size", "50", "--poll-interval", "100ms"}

	const n = 6000
	var staged []itest.Staged
	for range n / 500 {
		staged = append(staged, itest.Stage(t, pool, 500, 0, false)...)
	}
	left := n
	for kill := 1; kill <= 3; kill++ {
		p := startRelay(t, bin, append(args, "--node-id", "victim")...)
		// Let it get going, then kill it while rows are still flowing.
		before := left
		require.Eventually(t, func() bool {
			left = itest.Count(t, pool)
			return left <= before-n/8
		}, 2*time.Minute, 2*time.Millisecond)
		p.kill(t)
		left = itest.Count(t, pool)
		t.Logf("kill -9 #%d with %d rows left", kill, left)
		require.NotZero(t, left, "the relay finished before it could be killed; stage more rows")
	}

	// A survivor drains the rest and stops cleanly on SIGTERM.
	p := startRelay(t, bin, append(args, "--node-id", "survivor")...)
	addr := p.adminAddr(t)
	require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == http.StatusOK },
		time.Minute, 20*time.Millisecond)
	require.Eventually(t, func() bool { return itest.Count(t, pool) == 0 }, 2*time.Minute, 20*time.Millisecond)
	_, metrics := get("http://" + addr + "/metrics")
	require.Contains(t, metrics, "sundial_relay_rows_published_total")
	require.Contains(t, metrics, "sundial_relay_publish_latency_seconds_bucket")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t), "graceful stop must exit 0")

	count := map[string]int{}
	for _, rec := range itest.ReadAll(t, prefix) {
		f, err := firing.Decode(rec.Value)
		require.NoError(t, err)
		count[f.ExecutionId]++
	}
	dups := 0
	for _, s := range staged {
		require.GreaterOrEqual(t, count[s.ExecutionID], 1, "execution %s lost", s.ExecutionID)
		dups += count[s.ExecutionID] - 1
	}
	require.Len(t, count, n, "records of executions never staged")
	t.Logf("%d rows, 3 kills: %d duplicate records (%.2f%%)", n, dups, 100*float64(dups)/n)
}
