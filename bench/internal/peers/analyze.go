package peers

import (
	"slices"
	"time"
)

// Analysis compares what a sink received with the firings due in the
// measured window.
type Analysis struct {
	Expected int // firings due in the window
	Lost     int // of those, never arrived
	// Duplicates are arrivals of a firing beyond its first.
	Duplicates int
	// Unexpected are arrivals for a firing nobody scheduled (a wrong due
	// instant, a job out of range, unparsable headers); arrivals due
	// outside the window belong to the warm-up or the wind-down and are
	// left out.
	Unexpected int
	// Early counts firings whose first arrival came before their due
	// instant (their lateness is negative).
	Early int
	// Lateness is arrival − due of each firing's first arrival, sorted.
	Lateness []time.Duration
}

// Analyze matches arrivals (their Due resolved) with want, the firings due
// from start through end (whole seconds; a firing due in end's second
// counts).
func Analyze(want map[firingKey]bool, arrivals []Arrival, start, end time.Time) Analysis {
	a := Analysis{Expected: len(want)}
	from, until := start.Truncate(time.Second), end.Truncate(time.Second).Add(time.Second)
	seen := make(map[firingKey]bool, len(want))
	for _, ar := range arrivals {
		if ar.Err != nil || ar.Due.IsZero() {
			a.Unexpected++
			continue
		}
		if ar.Due.Before(from) || !ar.Due.Before(until) {
			continue
		}
		k := firingKey{ar.Job, ar.Due.UnixNano()}
		if !want[k] {
			a.Unexpected++
			continue
		}
		if seen[k] {
			a.Duplicates++
			continue
		}
		seen[k] = true
		if ar.At.Before(ar.Due) {
			a.Early++
		}
		a.Lateness = append(a.Lateness, ar.At.Sub(ar.Due))
	}
	a.Lost = a.Expected - len(seen)
	slices.Sort(a.Lateness)
	return a
}
