package app

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
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

// New connects to nothing before Start, with one range or the default 16,
// and its services stop cleanly unstarted: the pool's closer first in,
// last out.
func TestNewComposesWithoutConnecting(t *testing.T) {
	for want, args := range map[float64][]string{1: {"--ranges", "1"}, 16: nil} {
		reg := prometheus.NewRegistry()
		a, err := New(context.Background(), validConfig(t, args...), Deps{Logger: slog.New(slog.DiscardHandler), Registry: reg})
		require.NoError(t, err, "%v", args)
		// What the led ranges must sum to (SundialPrefetchRangeUnled).
		got, err := testutil.GatherAndCount(reg, "sundial_prefetcher_ranges")
		require.NoError(t, err)
		require.Equal(t, 1, got, "%v", args)
		require.Equal(t, want, gaugeValue(t, reg, "sundial_prefetcher_ranges"), "%v", args)
		require.Len(t, a.Services, 8, "%v", args) // pool closer, listener, ledger TTLs, drainer, ZooKeeper's startup check, loop, coordinator, the report
		_, reportLast := a.Services[7].(*instances.Reporter)
		require.True(t, reportLast, "%v: the instance's report is the last started, the first stopped", args)
		_, first := a.Services[0].(poolCloser)
		require.True(t, first, "%v: the pool is closed last", args)
		require.ElementsMatch(t, []string{"postgres", "zookeeper"}, keys(a.Checks), "%v", args)
		stopAll(a.Services)
	}
}

// Without --zk-username the prefetcher still starts, with open ACLs, but
// says so at every start; with one it does not.
func TestNewWarnsWithoutAZooKeeperIdentity(t *testing.T) {
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{nil, true},
		{[]string{"--zk-username", "sundial", "--zk-password", "pw"}, false},
	} {
		var logs bytes.Buffer
		a, err := New(context.Background(), validConfig(t, c.args...), Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		stopAll(a.Services)
		require.Equal(t, c.warn, strings.Contains(logs.String(), "level=WARN msg=\"zookeeper ACLs are open: no --zk-username"), "%v:\n%s", c.args, logs.String())
		require.NotContains(t, logs.String(), "pw\"")
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

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}
