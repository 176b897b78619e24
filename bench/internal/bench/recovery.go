package bench

import (
	"math"
	"slices"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// The arithmetic of the overload and recovery scenarios (overload.go):
// when the platform was back to normal after a disturbance, how fast it
// delivered while it was behind, and which usage samples bound a span.
// Pure functions over what the sink saw, so they are tested on their own.

// Never is the lateness a lost firing counts with in BackToNormal: later
// than any limit.
const Never = time.Duration(math.MaxInt64)

// Normal is what "back to normal" means in the recovery scenarios: the
// p99 lateness of the firings due in a sliding window of NormalWindow at
// most NormalP99, stepped by a second.
const (
	NormalP99    = time.Second
	NormalWindow = 5 * time.Second
	normalStep   = time.Second
)

// BackToNormal is how long after from (the disturbance's end) the
// platform was back to normal and stayed so until to: windows of fire
// instants [u, u+window) for u = to-window, to-window-step, ... while
// u ≥ from are judged by their p99 lateness against limit (a window holding a
// lost firing, Never late, is not normal; an empty one is). The answer is the end of the first
// normal window after the last one that was not — the moment a trailing
// window of that width first showed on time for good — measured from
// from; 0 when no window was late. ok is false when the last window judged
// was still late (the platform had not recovered by to) or there was no
// window to judge. The windows are laid back from to, so the last one
// judged always ends at to, wherever from falls between whole steps: a
// run that ends just past the window its wait found normal is judged on
// that window, not on one reaching a fraction of a step further back.
func BackToNormal(timeline []harness.Late, from, to time.Time, window, step, limit time.Duration) (back time.Duration, ok bool) {
	if window <= 0 || step <= 0 || to.Sub(from) < window {
		return 0, false
	}
	sorted := slices.Clone(timeline)
	slices.SortFunc(sorted, func(a, b harness.Late) int { return a.FireAt.Compare(b.FireAt) })
	lastBad := time.Time{}
	lastJudgedBad := false
	buf := make([]time.Duration, 0, 1024)
	last := to.Add(-window)
	for k := int(last.Sub(from) / step); k >= 0; k-- {
		u := last.Add(-time.Duration(k) * step)
		lo, _ := slices.BinarySearchFunc(sorted, u, func(l harness.Late, t time.Time) int { return l.FireAt.Compare(t) })
		hi, _ := slices.BinarySearchFunc(sorted, u.Add(window), func(l harness.Late, t time.Time) int { return l.FireAt.Compare(t) })
		buf = buf[:0]
		for _, l := range sorted[lo:hi] {
			buf = append(buf, l.Lateness)
		}
		slices.Sort(buf)
		// A lost firing is not normal however few: it sorts last.
		bad := len(buf) > 0 && (buf[len(buf)-1] == Never || harness.Percentile(buf, 0.99) > limit)
		if bad {
			lastBad = u
		}
		lastJudgedBad = bad
	}
	if lastJudgedBad {
		return 0, false
	}
	if lastBad.IsZero() {
		return 0, true
	}
	return lastBad.Add(step + window).Sub(from), true
}

// Backlog is a span during which the platform was behind, and what it
// delivered meanwhile.
type Backlog struct {
	// From and To are the first and last arrivals of a firing later than
	// the threshold; zero when none was.
	From, To time.Time
	// Delivered counts the first deliveries that arrived in [From, To],
	// late or not: everything the platform got through while behind.
	Delivered int
}

// Rate is the catch-up rate: firings delivered per second while behind
// (0 for a backlog shorter than a second, whose rate would mean little).
func (b Backlog) Rate() float64 {
	span := b.To.Sub(b.From)
	if span < time.Second {
		return 0
	}
	return float64(b.Delivered) / span.Seconds()
}

// Span is the backlog's length.
func (b Backlog) Span() time.Duration { return b.To.Sub(b.From) }

// BacklogOf finds the backlog in a timeline of first deliveries (arrival
// = fire instant + lateness): from the first arrival of a firing more than
// threshold late to the last one.
func BacklogOf(timeline []harness.Late, threshold time.Duration) Backlog {
	var b Backlog
	for _, l := range timeline {
		if l.Lateness <= threshold || l.Lateness == Never {
			continue
		}
		at := l.FireAt.Add(l.Lateness)
		if b.From.IsZero() || at.Before(b.From) {
			b.From = at
		}
		if at.After(b.To) {
			b.To = at
		}
	}
	if b.From.IsZero() {
		return b
	}
	for _, l := range timeline {
		if l.Lateness == Never {
			continue
		}
		if at := l.FireAt.Add(l.Lateness); !at.Before(b.From) && !at.After(b.To) {
			b.Delivered++
		}
	}
	return b
}

// arrivalsBetween counts the first deliveries that arrived in [from, to].
func arrivalsBetween(timeline []harness.Late, from, to time.Time) int {
	n := 0
	for _, l := range timeline {
		if l.Lateness == Never {
			continue
		}
		if at := l.FireAt.Add(l.Lateness); !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// snapsAround picks, from usage samples in time order, the last taken at
// or before from and the first at or after to: the narrowest pair that
// covers [from, to]. ok is false when the samples do not cover it.
func snapsAround(snaps []UsageSnap, from, to time.Time) (a, b UsageSnap, ok bool) {
	for _, s := range snaps {
		t := s.at()
		if !t.After(from) {
			a = s
		}
		if b == nil && !t.Before(to) {
			b = s
		}
	}
	return a, b, a != nil && b != nil && b.at().After(a.at())
}
