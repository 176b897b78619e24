package rangeleader

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTrustDeadline(t *testing.T) {
	confirmed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, confirmed.Add(3*time.Second), trustDeadline(confirmed, 4*time.Second, time.Second))
}

func TestEffectiveTimeoutTakesTheSmaller(t *testing.T) {
	require.Equal(t, 4*time.Second, effectiveTimeout(4*time.Second, 0), "unknown: trust what we asked for")
	require.Equal(t, 2*time.Second, effectiveTimeout(4*time.Second, 2*time.Second), "server clamped it down")
	require.Equal(t, 4*time.Second, effectiveTimeout(4*time.Second, 6*time.Second), "server raised it: ours is safe")
}

func TestZKLoggerCapturesNegotiatedTimeout(t *testing.T) {
	l := &zkLogger{logger: slog.New(slog.DiscardHandler)}
	l.Printf("connected to %s", "127.0.0.1:2181")
	require.Zero(t, l.negotiated.Load())
	l.Printf(zkAuthenticatedFormat, int64(42), int32(2500))
	require.Equal(t, int64(2500*time.Millisecond), l.negotiated.Load())
}
