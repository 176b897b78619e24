package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// New does not wait for a Postgres (or, with --migrate-on-start, a
// Cassandra) that does not answer: the api composes, its readiness checks
// name them, and stopping it leaves nothing open behind (goleak in
// TestMain).
func TestNewDoesNotWaitForUnreachableStores(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	require.NoError(t, config.Load(fs, []string{"--tokens", "t=acme", "--postgres-dsn", "postgres://sundial@127.0.0.1:1/sundial?connect_timeout=2",
		"--cassandra-hosts", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:0"}, func(string) (string, bool) { return "", false }))
	var p config.Problems
	cfg.Validate(&p)
	require.NoError(t, p.Err())
	a, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	defer func() {
		for _, s := range slices.Backward(a.Services) {
			s.Stop()
		}
	}()
	require.ErrorContains(t, a.Checks["postgres"](context.Background()), "waiting for postgres: postgres: ")
	require.ErrorContains(t, a.Checks["cassandra"](context.Background()), "waiting for cassandra: ")
}

// What New opened is closed newest first when it fails.
func TestUndoRunsNewestFirst(t *testing.T) {
	var u undo
	var order []int
	for i := range 3 {
		u.add(func() { order = append(order, i) })
	}
	u.run()
	require.Equal(t, []int{2, 1, 0}, order)
}
