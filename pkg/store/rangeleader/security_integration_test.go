//go:build integration

package rangeleader_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// recordingDialer remembers the last connection it made, so a test can cut
// it and make the client reconnect.
type recordingDialer struct {
	base zk.Dialer
	mu   sync.Mutex
	last net.Conn
}

func (d *recordingDialer) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := d.base(network, address, timeout)
	if err == nil {
		d.mu.Lock()
		d.last = c
		d.mu.Unlock()
	}
	return c, err
}

func (d *recordingDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last != nil {
		_ = d.last.Close()
	}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// zkConnect opens a session through z's dialer and digest, the way the
// elector does, and waits for it. sessions counts established sessions
// (reconnections included).
func zkConnect(t *testing.T, z rangeleader.Security, rec *recordingDialer) (conn *zk.Conn, sessions func() int) {
	t.Helper()
	dial, err := z.Dialer(nil)
	require.NoError(t, err)
	if rec != nil {
		rec.base = dial
		dial = rec.dial
	}
	var (
		mu sync.Mutex
		n  int
	)
	conn, events, err := zk.Connect(testinfra.ZooKeeperAddrs(t), 5*time.Second, zk.WithDialer(dial), zk.WithLogger(quietLogger{}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range events {
			// Drained until the client closes it, so Close can be waited for.
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	sessions = func() int { mu.Lock(); defer mu.Unlock(); return n }
	require.Eventually(t, func() bool { return sessions() > 0 }, 15*time.Second, 20*time.Millisecond)
	digest, err := z.Digest()
	require.NoError(t, err)
	if digest != nil {
		require.NoError(t, conn.AddAuth("digest", digest))
	}
	return conn, sessions
}

// A node whose ACL admits only the digest user: a client without the
// credentials gets ErrNoAuth, one with the wrong password too, one with
// them reads it — also after its connection was cut and re-established,
// because the client replays the credentials itself.
func TestZooKeeperDigestAuth(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	pwFile := writeSecretFile(t, "zk-password", "digest-password\n")
	sundial := rangeleader.Security{Username: "sundial", Password: connsec.Password{File: pwFile}}
	rec := &recordingDialer{}
	authed, sessions := zkConnect(t, sundial, rec)

	node := root + "/locked"
	_, err := authed.Create(node, []byte("only for sundial"), 0, zk.DigestACL(zk.PermAll, "sundial", "digest-password"))
	require.NoError(t, err)
	// Registered after testinfra's cleanup, so it runs first: the
	// anonymous session testinfra cleans up with cannot list this node.
	t.Cleanup(func() {
		if err := harness.DeleteZNodeTree(authed, node); err != nil {
			t.Logf("znode %s left behind: %v", node, err)
		}
	})

	anonymous := testinfra.ZooKeeperConnect(t, 5*time.Second)
	_, _, err = anonymous.Get(node)
	require.ErrorIs(t, err, zk.ErrNoAuth)

	wrong, _ := zkConnect(t, rangeleader.Security{Username: "sundial", Password: connsec.Password{Value: connsec.NewSecret("not-it")}}, nil)
	_, _, err = wrong.Get(node)
	require.ErrorIs(t, err, zk.ErrNoAuth)

	data, _, err := authed.Get(node)
	require.NoError(t, err)
	require.Equal(t, "only for sundial", string(data))

	rec.cut()
	require.Eventually(t, func() bool { return sessions() >= 2 }, 15*time.Second, 20*time.Millisecond, "no reconnection")
	data, _, err = authed.Get(node)
	require.NoError(t, err, "the credentials are replayed after a reconnection")
	require.Equal(t, "only for sundial", string(data))
}

// The prefetcher's coordinator, given the credentials through Apply, leads
// on a group path an operator locked down to the sundial digest user; one
// without them cannot even join.
func TestZooKeeperCoordinatorOnLockedPath(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	sundial := rangeleader.Security{Username: "sundial", Password: connsec.Password{Value: connsec.NewSecret("digest-password")}}
	authed, _ := zkConnect(t, sundial, nil)
	path := root + "/election"
	_, err := authed.Create(path, nil, 0, zk.DigestACL(zk.PermAll, "sundial", "digest-password"))
	require.NoError(t, err)
	// Runs after the members' Stop (registered later, run earlier).
	t.Cleanup(func() {
		if err := harness.DeleteZNodeTree(authed, path); err != nil {
			t.Logf("znode %s left behind: %v", path, err)
		}
	})

	start := func(id string, z rangeleader.Security) *rangeleader.Coordinator {
		cfg := rangeleader.Config{
			Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: id,
			Ranges: 1, Work: idle,
			SessionTimeout: 2 * time.Second,
			Logger:         slog.New(slog.DiscardHandler),
		}
		require.NoError(t, z.Apply(&cfg))
		e, err := rangeleader.New(cfg)
		require.NoError(t, err)
		require.NoError(t, e.Start(context.Background()))
		t.Cleanup(e.Stop)
		return e
	}
	withCreds := start("with-credentials", sundial)
	require.Eventually(t, func() bool { return leads(withCreds) }, 20*time.Second, 20*time.Millisecond)

	without := start("without-credentials", rangeleader.Security{})
	require.Never(t, func() bool {
		return len(without.Led()) > 0 || members(authed, path) != 1
	}, 3*time.Second, 50*time.Millisecond, "a member without credentials got a node under the locked path")
	require.True(t, leads(withCreds))
}

// writeSecretFile writes content into a file of the test's own, as a
// mounted Secret would be.
func writeSecretFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
