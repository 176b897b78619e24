//go:build integration

package rangeleader_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// ZooKeeper's secureClientPort as deploy/local/infra.sh configures it on
// the shared server, with digest credentials: a single leader (one range)
// given both through Security.Apply leads on a path whose ACL admits only
// that digest user. Check refuses a wrong password, a CA that did not sign
// the server's certificate, a plaintext client on the TLS port and TLS on
// the plaintext port, each promptly and naming ZooKeeper.
func TestCheckAndLeadOverTheSecureListener(t *testing.T) {
	_, root := testinfra.ZooKeeper(t) // the plaintext port: the test's namespace
	servers := testinfra.SecureZooKeeperAddrs(t)
	secure := rangeleader.Security{
		Username: "sundial",
		Password: connsec.Password{Value: connsec.NewSecret("digest-password")},
		TLS:      connsec.TLS{Enabled: true, CAFile: testinfra.SecureCAFile(t)},
	}
	config := func(t *testing.T, z rangeleader.Security, servers []string, path, id string) rangeleader.Config {
		t.Helper()
		cfg := rangeleader.Config{
			Servers: servers, Path: path, NodeID: id,
			Ranges: 1, Work: idle,
			SessionTimeout: 2 * time.Second,
			Logger:         slog.New(slog.DiscardHandler),
		}
		require.NoError(t, z.Apply(&cfg))
		return cfg
	}

	// The group's path, locked to the digest user, made over TLS.
	path := root + "/election"
	{
		cfg := config(t, secure, servers, "", "")
		conn, events, err := zk.Connect(servers, 5*time.Second, zk.WithDialer(cfg.Dialer), zk.WithLogger(quietLogger{}))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range events {
			}
		}()
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
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := config(t, secure, servers, path, "secure-member")
	require.NoError(t, rangeleader.Check(ctx, cfg))
	e, err := rangeleader.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(e.Stop)
	require.Eventually(t, func() bool { return leads(e) }, 20*time.Second, 20*time.Millisecond,
		"the member over TLS with the digest credentials leads")

	refused := func(t *testing.T, cfg rangeleader.Config, want string) error {
		t.Helper()
		start := time.Now()
		err := rangeleader.Check(ctx, cfg)
		require.Error(t, err)
		require.Less(t, time.Since(start), 10*time.Second, "refused only after %v: %v", time.Since(start), err)
		require.ErrorContains(t, err, "zookeeper at ")
		require.ErrorContains(t, err, want)
		t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
		return err
	}
	t.Run("wrong password", func(t *testing.T) {
		wrong := secure
		wrong.Password = connsec.Password{Value: connsec.NewSecret("not-the-password")}
		require.ErrorIs(t, refused(t, config(t, wrong, servers, path, "wrong"), "a wrong --zk-username or --zk-password?"), connsec.ErrRefused)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := secure
		other.TLS.CAFile = tlstest.NewCA(t, "other").CertFile
		require.ErrorIs(t, refused(t, config(t, other, servers, path, "other-ca"), "certificate signed by unknown authority"), connsec.ErrRefused)
	})
	t.Run("plaintext on the TLS port", func(t *testing.T) {
		plain := secure
		plain.TLS = connsec.TLS{}
		refused(t, config(t, plain, servers, path, "plain"), "no session")
	})
	t.Run("TLS on the plaintext port", func(t *testing.T) {
		refused(t, config(t, secure, testinfra.ZooKeeperAddrs(t), path, "tls-on-plain"), "")
	})
}
