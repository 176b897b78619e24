package harness

import (
	"testing"
	"time"
)

func TestByPeriodSplitsLatenessByFireInstant(t *testing.T) {
	start := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	tl := []Late{
		{FireAt: start.Add(-time.Second), Lateness: 9 * time.Second}, // before start: first period
		{FireAt: start.Add(10 * time.Second), Lateness: time.Second},
		{FireAt: start.Add(70 * time.Second), Lateness: time.Millisecond},
		{FireAt: start.Add(10 * time.Minute), Lateness: 2 * time.Millisecond}, // past the end: last period
	}
	got := ByPeriod(tl, start, time.Minute, 2)
	if len(got) != 2 || got[0].N != 2 || got[0].Max != 9*time.Second || got[1].N != 2 || got[1].Max != 2*time.Millisecond {
		t.Fatalf("ByPeriod = %+v", got)
	}
	if ByPeriod(tl, start, time.Minute, 0) != nil {
		t.Fatal("no periods, no summaries")
	}
}
