//go:build integration

package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// An upgrade onto a range group an older prefetcher left world-writable:
// a prefetcher given an identity (--zk-username, --zk-password-file)
// tightens the group's nodes at start, logging each path, then joins and
// leads its ranges; an anonymous client can then neither join, take or
// delete a lock, nor reopen a node's ACL; and a prefetcher with a wrong
// password refuses to start, naming the node.
func TestPrefetcherTightensAnOpenTreeAtStart(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	election := root + "/prefetcher"
	// What an older version left: every node world:anyone:cdrwa.
	for _, p := range []struct{ path, data string }{{election, ""}, {election + "/members", ""}, {election + "/ranges", "16"}} {
		_, err := conn.Create(p.path, []byte(p.data), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	pwFile := filepath.Join(t.TempDir(), "zk-password")
	require.NoError(t, os.WriteFile(pwFile, []byte(testinfra.ZooKeeperDigestPassword+"\n"), 0o600))

	start := func(t *testing.T, logs *logbuf.Buffer, args ...string) (*App, error) {
		cfg := validConfig(t, append([]string{
			"--postgres-dsn", testinfra.PostgresDSN(t), "--zk-addrs", testinfra.ZooKeeperAddrs(t)[0],
			"--election-path", election, "--zk-username", testinfra.ZooKeeperDigestUser,
		}, args...)...)
		a, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		var g lifecycle.Group
		g.Add(a.Services...)
		if err := g.Start(context.Background()); err != nil {
			return nil, err
		}
		t.Cleanup(g.Stop)
		return a, nil
	}

	logs := &logbuf.Buffer{}
	a, err := start(t, logs, "--zk-password-file", pwFile)
	require.NoError(t, err)
	for _, p := range []string{election, election + "/members", election + "/ranges"} {
		require.Contains(t, logs.String(), "path="+p+"\n", "the log names each node it tightened")
	}
	require.NotContains(t, logs.String(), testinfra.ZooKeeperDigestPassword, "the password never reaches the log")
	require.NotContains(t, logs.String(), "zookeeper ACLs are open")
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return a.Checks["zookeeper"](ctx) == nil
	}, 30*time.Second, 100*time.Millisecond)

	// The prefetcher joins and locks every range, on nodes only it may
	// change.
	var locks []string
	require.Eventually(t, func() bool {
		locks, _, err = conn.Children(election + "/ranges")
		return err == nil && len(locks) == 16
	}, 30*time.Second, 100*time.Millisecond, "the prefetcher never locked its ranges")
	members, _, err := conn.Children(election + "/members")
	require.NoError(t, err)
	require.Len(t, members, 1)
	lock, member := election+"/ranges/"+locks[0], election+"/members/"+members[0]
	for _, n := range []string{election, election + "/members", election + "/ranges", member, lock} {
		_, err := conn.SetACL(n, zk.WorldACL(zk.PermAll), -1)
		require.ErrorIs(t, err, zk.ErrNoAuth, "%s: setAcl", n)
		_, err = conn.Set(n, []byte("intruder"), -1)
		require.ErrorIs(t, err, zk.ErrNoAuth, "%s: set", n)
	}
	require.ErrorIs(t, conn.Delete(lock, -1), zk.ErrNoAuth, "delete a range lock")
	require.ErrorIs(t, conn.Delete(member, -1), zk.ErrNoAuth, "delete a member")
	_, err = conn.CreateProtectedEphemeralSequential(election+"/members/m_", []byte("intruder"), zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth, "a fake member")

	wrongLogs := &logbuf.Buffer{}
	_, err = start(t, wrongLogs, "--zk-password", "guessed")
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorIs(t, err, rangeleader.ErrNotAdmitted)
	require.ErrorContains(t, err, election+": ")
	require.ErrorContains(t, err, "a wrong --zk-username or --zk-password?")
	require.False(t, strings.Contains(wrongLogs.String(), "guessed"), "the password never reaches the log")
	t.Logf("wrong password: %v", err)
}
