//go:build integration

package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

// The prefetcher's startup, against ZooKeeper's TLS port as
// deploy/local/infra.sh configures it and an election path locked to a
// digest user: with the right settings its ZooKeeper startup check passes;
// with a wrong password, or a CA that did not sign the server's
// certificate, it fails within seconds, the error naming ZooKeeper — where
// the elector would otherwise retry forever, never a candidate.
func TestPrefetcherStartsOnlyWithTheRightZooKeeperSettings(t *testing.T) {
	conn, root := testinfra.ZooKeeper(t)
	path := root + "/election"
	_, err := conn.Create(path, nil, 0, zk.DigestACL(zk.PermAll, "sundial", "digest-password"))
	require.NoError(t, err)
	t.Cleanup(func() {
		// The open session cannot list under the locked node (testinfra's
		// cleanup would leave it); no elector started, so it is empty.
		if err := conn.Delete(path, -1); err != nil {
			t.Logf("znode %s left behind: %v", path, err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startCheck := func(password, caFile string) (time.Duration, error) {
		cfg := validConfig(t, "--zk-addrs", testinfra.SecureZooKeeperAddrs(t)[0], "--election-path", path,
			"--zk-username", "sundial", "--zk-password", password, "--zk-tls", "--zk-tls-ca-file", caFile)
		a, err := New(ctx, cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		require.NoError(t, err, "New connects to nothing")
		defer stopAll(a.Services)
		for _, s := range a.Services {
			if c, ok := s.(startupCheck); ok {
				t0 := time.Now()
				err := c.Start(ctx)
				return time.Since(t0), err
			}
		}
		t.Fatal("no startup check among the services")
		return 0, nil
	}
	_, err = startCheck("digest-password", testinfra.SecureCAFile(t))
	require.NoError(t, err)
	for name, c := range map[string]struct{ password, ca, want string }{
		"wrong password": {"not-the-password", testinfra.SecureCAFile(t), "a wrong --zk-username or --zk-password?"},
		"untrusted CA":   {"digest-password", tlstest.NewCA(t, "other").CertFile, "certificate signed by unknown authority"},
	} {
		took, err := startCheck(c.password, c.ca)
		require.ErrorIs(t, err, connsec.ErrRefused, name)
		require.ErrorContains(t, err, "zookeeper at ", name)
		require.ErrorContains(t, err, c.want, name)
		require.Less(t, took, 10*time.Second, name)
		t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
}
