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
	"github.com/sundialhq/sundial/services/relay/internal/itest"
	"github.com/sundialhq/sundial/services/relay/internal/relay"
	"github.com/sundialhq/sundial/testkit/logbuf"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// startRelay builds and starts the relay as daemon.Run would, failing the
// test unless that takes a few seconds at most.
func startRelay(t *testing.T, cfg relay.Config) (*App, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	a, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.NewTextHandler(logs, nil)), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	var g lifecycle.Group
	g.Add(a.Services...)
	t0 := time.Now()
	require.NoError(t, g.Start(context.Background()))
	t.Cleanup(g.Stop)
	require.Less(t, time.Since(t0), 12*time.Second, "start took too long")
	return a, logs
}

func check(a *App, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.Checks[name](ctx)
}

// The relay starts while its brokers do not answer, says so in its log
// and its kafka readiness check, and relays the outbox once they answer
// (a forwarder to the real broker opened at the address), without a
// restart.
func TestRelayStartsWhileKafkaIsDownAndRelaysWhenItAnswers(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	addr := testinfra.UnusedAddr(t)
	cfg := relay.Defaults()
	cfg.PostgresDSN, cfg.KafkaBrokers, cfg.TopicPrefix = dsn, addr, itest.TopicPrefix(t)
	cfg.PollInterval = 100 * time.Millisecond
	itest.Stage(t, pool, 3, 0, false)
	a, logs := startRelay(t, cfg)
	require.ErrorContains(t, check(a, "kafka"), addr)
	require.NoError(t, check(a, "postgres"), "only kafka is down")
	require.Contains(t, logs.String(), "waiting for it")
	require.Equal(t, 3, itest.Count(t, pool), "nothing relayed while kafka is down")

	testinfra.Forward(t, addr, testinfra.KafkaBrokers(t)[0])
	require.Eventually(t, func() bool { return check(a, "kafka") == nil }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return itest.Count(t, pool) == 0 }, 60*time.Second, 100*time.Millisecond, "the outbox relayed once kafka answers")
}

// The relay starts while Postgres does not answer, and its postgres
// readiness check names it.
func TestRelayStartsWhilePostgresIsDown(t *testing.T) {
	cfg := relay.Defaults()
	cfg.PostgresDSN = "postgres://sundial@127.0.0.1:1/sundial?connect_timeout=2"
	cfg.KafkaBrokers, cfg.TopicPrefix = strings.Join(itest.Brokers(t), ","), itest.TopicPrefix(t)
	a, logs := startRelay(t, cfg)
	require.ErrorContains(t, check(a, "postgres"), "127.0.0.1")
	require.NoError(t, check(a, "kafka"), "only postgres is down")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "127.0.0.1:1") }, 10*time.Second, 50*time.Millisecond,
		"the log says postgres is failing")
}
