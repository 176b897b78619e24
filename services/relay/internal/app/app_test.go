package app

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/postgres/instances"

	"github.com/sundialhq/sundial/services/relay/internal/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func deps() Deps {
	return Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()}
}

// New opens nothing it cannot close: neither the pool nor the producer
// dials before Start, and stopping the services unstarted releases both.
func TestNewComposesWithoutConnecting(t *testing.T) {
	a, err := New(context.Background(), relay.Defaults(), deps())
	require.NoError(t, err)
	require.Len(t, a.Services, 3)
	_, relayLast := a.Services[1].(*relay.Relay)
	require.True(t, relayLast, "the relay is started after the connections, stopped before they close")
	_, reportLast := a.Services[2].(*instances.Reporter)
	require.True(t, reportLast, "the instance's report is the last started, the first stopped")
	names := make([]string, 0, len(a.Checks))
	for n := range a.Checks {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, []string{"kafka", "postgres"}, names)
	for _, s := range slices.Backward(a.Services) {
		s.Stop()
	}
}

func TestNewNamesABadDSN(t *testing.T) {
	cfg := relay.Defaults()
	cfg.PostgresDSN = "postgres://%zz"
	_, err := New(context.Background(), cfg, deps())
	require.ErrorContains(t, err, "postgres-dsn:")
}
