//go:build integration

package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sundial-prefetcher")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// proc is one prefetcher process; its log is kept and printed if the test
// fails.
type proc struct {
	id    string
	admin string
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   bytes.Buffer
	done  chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func startProc(t *testing.T, bin, id, dsn, election string, extra ...string) *proc {
	t.Helper()
	zk := strings.Join(testinfra.ZooKeeperAddrs(t), ",")
	p := &proc{id: id, admin: freeAddr(t), done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{
		"--node-id", id,
		"--postgres-dsn", dsn,
		"--zk-addrs", zk,
		"--election-path", election,
		"--admin-addr", p.admin,
		"--log-format", "text",
	}, extra...)...) // unless extra says otherwise, --zk-session-timeout, --window, --tick and --batch-size at their defaults
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("--- log of %s ---\n%s", id, p.log.String())
			p.mu.Unlock()
		}
	})
	return p
}

func (p *proc) metric(t *testing.T, name string) string {
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

type epochRow struct {
	leader  string
	epoch   int64
	updated time.Time
}

func leaderRow(t *testing.T, pool *pgxpool.Pool, election string) epochRow {
	var r epochRow
	err := pool.QueryRow(context.Background(), `SELECT leader, epoch, updated_at FROM leader_epochs WHERE election = $1`, election).
		Scan(&r.leader, &r.epoch, &r.updated)
	if err != nil && err != pgx.ErrNoRows {
		require.NoError(t, err)
	}
	return r
}

// The crash test of a single leader (--ranges 1): kill -9 the leader while
// a standby runs. No slot is lost or doubled, and the standby takes the
// range over within 5 s.
func TestKillDashNineLeaderStandbyTakesOver(t *testing.T) {
	bin := buildBinary(t)
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	conn, root := testinfra.ZooKeeper(t)
	group := root + "/election"
	election := group + "/ranges/r0000" // the only range's leader_epochs row

	var jobs []uuid.UUID
	for range 50 {
		jobs = append(jobs, pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `date_trunc('second', now()) + interval '1 second'`))
	}

	// A single leader is one range; ranges_integration_test kills one of
	// several range leaders.
	pa := startProc(t, bin, "proc-a", dsn, group, "--ranges", "1")
	require.Eventually(t, func() bool { return leaderRow(t, pool, election).leader == "proc-a" }, 30*time.Second, 20*time.Millisecond)
	pb := startProc(t, bin, "proc-b", dsn, group, "--ranges", "1")
	require.Eventually(t, func() bool {
		members, _, err := conn.Children(group + "/members")
		return err == nil && len(members) == 2
	}, 30*time.Second, 20*time.Millisecond, "proc-b never joined the group as standby")
	first := leaderRow(t, pool, election)
	// The leader gauge names its group; only the leader's is 1.
	require.Equal(t, "1", pa.metric(t, `sundial_prefetcher_leader{election="`+group+`"}`))
	require.Equal(t, "1", pa.metric(t, `sundial_prefetcher_ranges_led`))
	require.Equal(t, "0", pb.metric(t, `sundial_prefetcher_leader{election="`+group+`"}`))

	// Let the leader run a few passes, then kill it without warning.
	require.Eventually(t, func() bool { return leaderRow(t, pool, election).updated.After(first.updated.Add(2 * time.Second)) }, 30*time.Second, 20*time.Millisecond)
	killed := time.Now()
	require.NoError(t, pa.cmd.Process.Signal(syscall.SIGKILL))
	<-pa.done

	var second epochRow
	require.Eventually(t, func() bool {
		second = leaderRow(t, pool, election)
		return second.leader == "proc-b"
	}, 30*time.Second, 5*time.Millisecond)
	takeover := time.Since(killed)
	t.Logf("kill -9 of the leader: standby's first committed pass %s later (zk session timeout 3s, tick 1s)", takeover)
	require.Less(t, takeover, 5*time.Second, "standby must take over within 5 s")
	require.Greater(t, second.epoch, first.epoch)

	// The standby keeps staging, then shuts down gracefully.
	require.Eventually(t, func() bool { return leaderRow(t, pool, election).updated.After(second.updated.Add(2 * time.Second)) }, 30*time.Second, 20*time.Millisecond)
	last := leaderRow(t, pool, election)
	require.NoError(t, pb.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-pb.done:
	case <-time.After(30 * time.Second):
		t.Fatal("proc-b did not drain on SIGTERM")
	}
	require.Equal(t, 0, pb.cmd.ProcessState.ExitCode())

	// Every per-second slot from the first to the last staged is there
	// exactly once, and staging reached the end of the last window.
	for _, id := range jobs {
		var n, distinct int
		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &lo, &hi))
		require.Equal(t, n, distinct, "job %s: slot doubled", id)
		require.Equal(t, int(hi.Sub(lo)/time.Second)+1, n, "job %s: slot lost between %s and %s", id, lo, hi)
		require.False(t, hi.Before(last.updated.Add(2*time.Minute-2*time.Second)), "job %s: staged only to %s", id, hi)
	}
}
