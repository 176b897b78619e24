package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/config"
)

// New fails, naming Postgres, when the database does not answer, and
// leaves nothing open behind it (goleak in TestMain).
func TestNewNamesAnUnreachablePostgres(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Register(fs)
	require.NoError(t, config.Load(fs, []string{"--tokens", "t=acme", "--postgres-dsn", "postgres://sundial@127.0.0.1:1/sundial?connect_timeout=2"}, func(string) (string, bool) { return "", false }))
	var p config.Problems
	cfg.Validate(&p)
	require.NoError(t, p.Err())
	_, err := New(context.Background(), cfg, Deps{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	require.ErrorContains(t, err, "postgres:")
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
