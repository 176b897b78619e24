//go:build integration

package app

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

// With the local Redis Cluster's nodes in --redis-addr, the worker builds
// its lease client on the cluster, its liveness key on as on one node: the
// startup check and the readiness check pass on every node.
func TestWorkerStartsOnTheRedisCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := strings.Join(testinfra.RedisClusterAddrs(t), ",")
	args := []string{
		"--postgres-dsn", testinfra.PostgresDSN(t), "--kafka-brokers", "127.0.0.1:1",
		"--redis-addr", addrs, "--redis-key-prefix", "t:" + testinfra.UniqueName(t, 40) + ":",
	}
	cfg, err := load(t, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every connection is dialed through Deps.RedisDialer: a cluster
	// client reaches every node, a single Redis's client only the first.
	var mu sync.Mutex
	dialed := map[string]bool{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[addr] = true
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	w, err := New(ctx, cfg, Deps{Ledger: nopLedger{}, RedisDialer: dial}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("the worker on the Redis Cluster: %v", err)
	}
	defer func() {
		for i := len(w.Services) - 1; i >= 0; i-- {
			w.Services[i].Stop()
		}
	}()
	if err := w.Checks["redis"](ctx); err != nil {
		t.Fatalf("readiness on the Redis Cluster: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range testinfra.RedisClusterAddrs(t) {
		if !dialed[a] {
			t.Errorf("the startup check never reached node %s (dialed %v): not a cluster client", a, dialed)
		}
	}
}
