package bench

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/harness"
)

// Each second's lateness is its own firings' (the first arrival of each,
// measured from its fire instant); the report counts the seconds over the
// limit and lists the worst first, by offset from the start.
func TestSlowestSecondsFindsTheBadSeconds(t *testing.T) {
	start := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	want := harness.Expected{}
	var dls []harness.Delivery
	for sec := range 10 {
		due := start.Add(time.Duration(sec) * time.Second)
		for i := range 100 {
			id := uuid.New()
			want[id] = harness.Slot{Scheduled: due, FireAt: due}
			late := time.Duration(i) * time.Millisecond // 0–99 ms
			if sec == 7 {
				late = 800*time.Millisecond + time.Duration(i)*time.Millisecond
			}
			dls = append(dls, harness.Delivery{ExecutionID: id, Scheduled: due, Received: due.Add(late)})
			if i == 0 {
				// A second delivery much later does not count: the first does.
				dls = append(dls, harness.Delivery{ExecutionID: id, Scheduled: due, Received: due.Add(time.Minute)})
			}
		}
	}
	// Someone else's delivery is ignored.
	dls = append(dls, harness.Delivery{ExecutionID: uuid.New(), Scheduled: start, Received: start.Add(time.Hour)})

	a := harness.Analyze(want, dls, nil)
	end := start.Add(9 * time.Second)
	stats := harness.ByPeriod(a.Timeline, start, time.Second, 10)
	require.Len(t, stats, 10)
	require.Equal(t, 98*time.Millisecond, stats[0].P99)
	require.Equal(t, 99*time.Millisecond, stats[0].Max)
	require.Equal(t, 899*time.Millisecond, stats[7].Max)

	got := slowestSeconds(a.Timeline, start, end, 500*time.Millisecond, 2)
	require.Contains(t, got, "1 of 10 seconds with p99 above 500 ms")
	require.Contains(t, got, "the slowest: +7s p99 898 ms max 899 ms (100); +")
	require.Equal(t, "no firing arrived", slowestSeconds(nil, start, end, time.Second, 5))
}
