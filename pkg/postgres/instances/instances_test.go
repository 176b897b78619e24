package instances_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

// A check that hangs is cut at the timeout and reported as failed, and
// the others still answer.
func TestRunCutsAHangingCheck(t *testing.T) {
	got := instances.Run(context.Background(), map[string]admin.Check{
		"zookeeper": func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		"postgres":  func(context.Context) error { return nil },
	}, 50*time.Millisecond, clock.Real{})
	require.Len(t, got, 2)
	require.Equal(t, "postgres", got[0].Name)
	require.True(t, got[0].OK)
	require.False(t, got[1].OK)
	require.Contains(t, got[1].Error, "deadline")
	require.GreaterOrEqual(t, got[1].Ms, 50.0)
}
