package firing

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The prefetcher's test of the jitter it stages, from when it had a copy
// of the formula (services/prefetcher/internal/slots): a minute's jitter
// spreads a job's slots over the whole minute.
func TestJitterSpreadsSlotsAcrossTheMinute(t *testing.T) {
	now := time.Date(2030, 6, 1, 12, 0, 0, 400_000_000, time.UTC) // not on a second
	job := uuid.MustParse("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f")
	require.Zero(t, Jitter(job, now, 0))
	require.Zero(t, Jitter(job, now, 500*time.Microsecond))
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		slot := now.Add(time.Duration(i) * time.Second)
		j := Jitter(job, slot, time.Minute)
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.Less(t, j, time.Minute)
		require.Equal(t, j, Jitter(job, slot, time.Minute), "same (job, slot), same jitter")
		require.Zero(t, j%time.Millisecond)
		seen[j/time.Second] = true
	}
	require.Greater(t, len(seen), 50, "spread across the minute")
}
