package server

import (
	"strings"
	"testing"
	"time"
)

// every is a schedule firing every d from epoch.
type every time.Duration

func (e every) Next(after time.Time) time.Time {
	d := time.Duration(e)
	return after.Truncate(d).Add(d)
}

func TestPausedSlotsListsTheMostRecentAndSummarizesTheRest(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Slots 00:01 .. 00:09 fell in the pause; 00:10 is the next firing.
	got := pausedSlots(every(time.Minute), t0, t0.Add(10*time.Minute), 3, 1000)
	if len(got) != 4 {
		t.Fatalf("%d skips: %v", len(got), got)
	}
	sum := got[0]
	if !sum.At.Equal(t0.Add(time.Minute)) || !strings.Contains(sum.Reason, "paused: 6 slots from 2030-01-01T00:01:00Z to 2030-01-01T00:06:00Z") {
		t.Fatalf("summary %v", sum)
	}
	for i, sk := range got[1:] {
		if want := t0.Add(time.Duration(7+i) * time.Minute); !sk.At.Equal(want) || sk.Reason != PausedReason {
			t.Fatalf("skip %d: %v, want %s paused", i, sk, want)
		}
	}
}

func TestPausedSlotsShortPauseHasNoSummary(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	got := pausedSlots(every(time.Minute), t0, t0.Add(3*time.Minute), 10, 1000)
	if len(got) != 2 || !got[0].At.Equal(t0.Add(time.Minute)) || !got[1].At.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("%v", got)
	}
	if got := pausedSlots(every(time.Minute), t0, t0.Add(time.Minute), 10, 1000); len(got) != 0 {
		t.Fatalf("no slot in the pause: %v", got)
	}
}

func TestPausedSlotsJumpsALongPause(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	before := t0.Add(30 * 24 * time.Hour) // a month of a per-second job
	calls := 0
	counted := countingNexter{every(time.Second), &calls}
	got := pausedSlots(counted, t0, before, 5, 100)
	if calls > 1000 {
		t.Fatalf("walked %d slots", calls)
	}
	if len(got) != 6 {
		t.Fatalf("%d skips", len(got))
	}
	if !strings.Contains(got[0].Reason, "paused: at least ") {
		t.Fatalf("summary %q", got[0].Reason)
	}
	for i, sk := range got[1:] {
		if want := before.Add(time.Duration(i-5) * time.Second); !sk.At.Equal(want) {
			t.Fatalf("listed %d: %s, want %s (the most recent)", i, sk.At, want)
		}
	}
}

type countingNexter struct {
	n     nexter
	calls *int
}

func (c countingNexter) Next(t time.Time) time.Time { *c.calls++; return c.n.Next(t) }
