package testinfra

import (
	"errors"
	"fmt"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sundialhq/sundial/testkit/harness"
)

// ZooKeeperRoot is the znode under which every test's root lives.
const ZooKeeperRoot = "/sundial-test"

// DefaultZooKeeperSessionTimeout is the session timeout ZooKeeper uses. The
// local server accepts timeouts down to 500 ms (minSessionTimeout), so a test
// that needs a session to expire quickly can ask ZooKeeperConnect for one.
const DefaultZooKeeperSessionTimeout = 5 * time.Second

// ZooKeeperDigestUser and ZooKeeperDigestPassword are the digest identity
// tests give the coordinator (pkg/store/rangeleader) and the prefetcher: the
// nodes those create admit only it, so ZooKeeper's cleanup adds it to
// its session before deleting a test's subtree.
const (
	ZooKeeperDigestUser     = "sundial"
	ZooKeeperDigestPassword = "digest-password"
)

// ZooKeeperAddrs is the test ZooKeeper ensemble (SUNDIAL_TEST_ZK_ADDRS, comma
// separated, or the default), checked to accept connections.
func ZooKeeperAddrs(t testing.TB) []string {
	t.Helper()
	addrs := splitList(envOr(EnvZooKeeperAddrs, DefaultZooKeeperAddrs))
	requireReachable(t, "ZooKeeper", EnvZooKeeperAddrs, addrs)
	return addrs
}

// ZooKeeperConnect opens a session with the given timeout, waits until it is
// established, and closes it when the test ends (waiting for the client's
// goroutine to finish). The client logs through t.Logf until the test ends.
// Use it for a test's second or third session (competing candidates, say).
func ZooKeeperConnect(t testing.TB, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	addrs := ZooKeeperAddrs(t)
	lg := &testLogger{t: t}
	conn, events, err := zk.Connect(addrs, sessionTimeout, zk.WithLogger(lg), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("testinfra: zookeeper connect: %v", err)
	}
	// The event channel is closed when the client's goroutine exits, which
	// Close does not wait for; draining it until closed does.
	var (
		once      sync.Once
		connected = make(chan struct{})
		done      = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range events {
			if ev.State == zk.StateHasSession {
				once.Do(func() { close(connected) })
			}
		}
	}()
	closeConn := func() {
		conn.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Logf("testinfra: zookeeper client goroutine still running 10s after Close")
		}
		lg.stop()
	}
	select {
	case <-connected:
	case <-time.After(15 * time.Second):
		closeConn()
		t.Fatalf("%s", unreachable("ZooKeeper", EnvZooKeeperAddrs, fmt.Sprint(addrs), "no session within 15s"))
	}
	t.Cleanup(closeConn)
	return conn
}

// ZooKeeper returns a session (DefaultZooKeeperSessionTimeout) and a fresh
// persistent root znode of the test's own, /sundial-test/<name>_<hex>. When
// the test ends the whole subtree is deleted (as ZooKeeperDigestUser, as
// well as anonymously), then the session closed.
func ZooKeeper(t testing.TB) (*zk.Conn, string) {
	t.Helper()
	conn := ZooKeeperConnect(t, DefaultZooKeeperSessionTimeout)
	root := path.Join(ZooKeeperRoot, UniqueName(t, 100))
	for _, p := range []string{ZooKeeperRoot, root} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("testinfra: zookeeper create %s: %v", p, err)
		}
	}
	// Registered after ZooKeeperConnect's cleanup, so it runs before the close.
	t.Cleanup(func() {
		// Added only now, so the test's own requests through conn stay
		// anonymous; deleting below a node the engines created with the
		// test identity needs it.
		if err := conn.AddAuth("digest", []byte(ZooKeeperDigestUser+":"+ZooKeeperDigestPassword)); err != nil {
			t.Logf("testinfra: zookeeper add test identity: %v", err)
		}
		if err := harness.DeleteZNodeTree(conn, root); err != nil {
			t.Logf("testinfra: zookeeper subtree %s left behind: %v", root, err)
		}
	})
	return conn, root
}

// testLogger sends the ZooKeeper client's log to t.Logf until stop, after
// which it drops it: the client's goroutine may log after the test returned,
// when t.Logf would panic.
type testLogger struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("zk: "+format, args...)
	}
}

func (l *testLogger) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}
