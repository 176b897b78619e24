//go:build integration

package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The prefetcher starts within seconds whichever of Postgres, ZooKeeper
// or Cassandra does not answer, its readiness check naming the one that
// is down (Cassandra has none: only the ledger drain uses it, and its rows
// wait in ledger_pending), and its log saying so.
func TestPrefetcherStartsWhileAComponentIsDown(t *testing.T) {
	zk := testinfra.ZooKeeperAddrs(t)[0]
	for _, c := range []struct {
		name, down string
		args       []string
		log        string
	}{
		{"postgres", "postgres", []string{"--postgres-dsn", "postgres://sundial@127.0.0.1:1/sundial?connect_timeout=2", "--zk-addrs", zk}, "127.0.0.1:1"},
		{"zookeeper", "zookeeper", []string{"--postgres-dsn", testinfra.PostgresDSN(t), "--zk-addrs", "127.0.0.1:1"}, "waiting for it"},
		{"cassandra", "", []string{"--postgres-dsn", testinfra.PostgresDSN(t), "--zk-addrs", zk, "--cassandra-hosts", "127.0.0.1:1"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			// Under the test's own root, which is deleted afterwards (and
			// open, whatever the ACL of a /sundial a make run created).
			_, root := testinfra.ZooKeeper(t)
			cfg := validConfig(t, append(c.args, "--election-path", root+"/election")...)
			a, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registry: prometheus.NewRegistry()})
			require.NoError(t, err)
			var g lifecycle.Group
			g.Add(a.Services...)
			t0 := time.Now()
			require.NoError(t, g.Start(context.Background()))
			t.Cleanup(g.Stop)
			require.Less(t, time.Since(t0), 12*time.Second, "start took too long")
			for name, check := range a.Checks {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := check(ctx)
				cancel()
				if name == c.down {
					require.Error(t, err, name)
				} else {
					require.Eventually(t, func() bool {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						return check(ctx) == nil
					}, 30*time.Second, 100*time.Millisecond, "%s: only %s is down", name, c.name)
				}
			}
			if c.log != "" {
				require.Eventually(t, func() bool { return strings.Contains(logs.String(), c.log) }, 10*time.Second, 50*time.Millisecond,
					"the log says %s is down:\n%s", c.name, logs.String())
			}
		})
	}
}
