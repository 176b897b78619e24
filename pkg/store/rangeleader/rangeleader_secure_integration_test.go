//go:build integration

package rangeleader

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

type quietZKLog struct{}

func (quietZKLog) Printf(string, ...any) {}

// Over ZooKeeper's TLS port (deploy/local/infra.sh's secureClientPort),
// with the dialer and digest credentials Security gives the
// prefetcher, two members spread the ranges of a group whose path admits
// only the digest user.
func TestRangesOverTheSecureListener(t *testing.T) {
	_, root := testinfra.ZooKeeper(t)
	servers := testinfra.SecureZooKeeperAddrs(t)
	sec := Security{
		Username: "sundial",
		Password: connsec.Password{Value: connsec.NewSecret("digest-password")},
		TLS:      connsec.TLS{Enabled: true, CAFile: testinfra.SecureCAFile(t)},
	}
	var lc Config
	require.NoError(t, sec.Apply(&lc))

	path := root + "/ranges"
	conn, events, err := zk.Connect(servers, 5*time.Second, zk.WithDialer(lc.Dialer), zk.WithLogger(quietZKLog{}))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range events {
		}
	}()
	// Registered before the members start, so it runs after they stop.
	t.Cleanup(func() {
		if err := harness.DeleteZNodeTree(conn, path); err != nil {
			t.Logf("znode %s left behind: %v", path, err)
		}
		conn.Close()
		<-done
	})
	require.NoError(t, conn.AddAuth("digest", []byte("sundial:digest-password")))
	_, err = conn.Create(path, nil, 0, zk.DigestACL(zk.PermAll, "sundial", "digest-password"))
	require.NoError(t, err)

	b := newBoard(t)
	for _, name := range []string{"a", "b"} {
		c, err := New(Config{
			Servers: servers, Path: path, NodeID: name, Ranges: testRanges,
			SessionTimeout: testSessionTimeout,
			Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
			Work:           b.work(name),
			Dialer:         lc.Dialer, Credentials: lc.Credentials,
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(c.Stop)
	}
	requireSpread(t, b, "a", "b")
}
