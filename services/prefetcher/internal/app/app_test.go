package app

import (
	"context"
	"flag"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/config"
	"github.com/sundialhq/sundial/pkg/lifecycle"
)

func validConfig(t *testing.T, args ...string) Config {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet("prefetcher", flag.ContinueOnError)
	cfg.Register(fs)
	require.NoError(t, config.Load(fs, args, func(string) (string, bool) { return "", false }))
	cfg.NodeID = "n1"
	var p config.Problems
	cfg.Validate(&p)
	require.NoError(t, p.Err())
	return cfg
}

// New connects to nothing before Start, in either mode, and its services
// stop cleanly unstarted: the pool's closer first in, last out.
func TestNewComposesWithoutConnecting(t *testing.T) {
	for _, args := range [][]string{nil, {"--ranges", "16"}} {
		a, err := New(context.Background(), validConfig(t, args...), Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		require.NoError(t, err, "%v", args)
		require.Len(t, a.Services, 5, "%v", args)
		_, first := a.Services[0].(poolCloser)
		require.True(t, first, "%v: the pool is closed last", args)
		require.ElementsMatch(t, []string{"postgres", "zookeeper"}, keys(a.Checks), "%v", args)
		stopAll(a.Services)
	}
}

func TestNewNamesABadDSN(t *testing.T) {
	cfg := validConfig(t)
	cfg.PostgresDSN = "postgres://%zz"
	_, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	require.ErrorContains(t, err, "postgres-dsn:")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func stopAll(s []lifecycle.Service) {
	for _, x := range slices.Backward(s) {
		x.Stop()
	}
}
