package schedule

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fuzzZones are the zones the fuzz targets choose from by index.
var fuzzZones = []string{"UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Europe/London", "Pacific/Apia", "America/Santiago"}

// fuzzLocs loads fuzzZones once; loading a zone reads a file, which would
// dominate each fuzz iteration.
var fuzzLocs = sync.OnceValue(func() []*time.Location {
	locs := make([]*time.Location, len(fuzzZones))
	for i, z := range fuzzZones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			panic(err)
		}
		locs[i] = loc
	}
	return locs
})

func fuzzOptions(zone, gap, rep uint8) Options {
	return Options{
		Location: fuzzLocs()[int(zone)%len(fuzzZones)],
		Gap:      GapPolicy(gap % 2),
		Repeat:   RepeatPolicy(rep % 3),
	}
}

var fuzzSeeds = []string{
	"* * * * *", "*/15 * * * *", "0 9 * * MON-FRI", "30 2 * * *", "0 2,3 * * *",
	"0,30 2 * * *", "45 1 * * *", "0 0 L * *", "0 0 L-3 * *", "0 0 LW * *", "0 0 15W * *",
	"0 0 * * 5L", "0 0 * * FRI#3", "0 0 13 * FRI", "0 0 ? * 1", "*/10 * * * * *",
	"@daily", "@every 90m", "@every 1s", "0 0 29 2 *", "5/20 1-5 */3 jan-jun/2 0-7",
	"59 23 31 12 *", "0 0 1W,LW * *", "0 12 * * 0#5,6L", "1-59/2 * * * * *",
}

// FuzzParse checks that the parser never panics, that every error is a
// *ParseError naming a field, and that the canonical form of whatever it
// accepts parses back to the same schedule: the same next firings, from
// both a fixed instant and one the fuzzer chooses.
func FuzzParse(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, uint8(i), uint8(i), uint8(i), int64(1767225600+i*86400*37))
	}
	f.Fuzz(func(t *testing.T, expr string, zone, gap, rep uint8, from int64) {
		opts := fuzzOptions(zone, gap, rep)
		s, err := Parse(expr, opts)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Field == "" || pe.Reason == "" {
				t.Fatalf("Parse(%q) returned %T %v, want a *ParseError with a field and a reason", expr, err, err)
			}
			return
		}
		_ = s.Describe()
		canon := s.String()
		again, err := Parse(canon, opts)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, expr, err)
		}
		if again.String() != canon {
			t.Fatalf("canonical form %q of %q re-renders as %q", canon, expr, again.String())
		}
		for _, start := range []time.Time{time.Unix(1767225600, 0), time.Unix(from%(1<<36), 0)} {
			a, b := start, start
			for i := 0; i < 8; i++ {
				na, nb := s.Next(a), again.Next(b)
				if !na.Equal(nb) {
					t.Fatalf("%q and its canonical form %q differ after %v: %v vs %v", expr, canon, a, na, nb)
				}
				if na.IsZero() {
					break
				}
				if !na.After(a) {
					t.Fatalf("%q: Next(%v) = %v is not later", expr, a, na)
				}
				a, b = na, nb
			}
		}
	})
}

// FuzzNext checks Next on any instant: it is strictly later, repeated calls
// are strictly increasing, and it is the first firing: asking again from
// any instant between `after` and the answer gives the same answer.
func FuzzNext(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, int64(1772953200+i*3607), int64(i*7919), uint8(i), uint8(i), uint8(i))
	}
	// Around the 2026 New York and Lord Howe transitions.
	f.Add("*/20 1 * * *", int64(1793512800), int64(0), uint8(1), uint8(0), uint8(2))
	f.Add("15 2 * * *", int64(1791034200), int64(0), uint8(2), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, expr string, sec, nsec int64, zone, gap, rep uint8) {
		s, err := Parse(expr, fuzzOptions(zone, gap, rep))
		if err != nil {
			return
		}
		after := time.Unix(sec%(1<<37), nsec%1e9)
		prev := after
		for i := 0; i < 6; i++ {
			x := s.Next(prev)
			if x.IsZero() {
				return
			}
			if !x.After(prev) {
				t.Fatalf("%q: Next(%v) = %v is not later", expr, prev, x)
			}
			if x.Nanosecond() != 0 {
				t.Fatalf("%q: Next(%v) = %v is not a whole second", expr, prev, x)
			}
			// No firing was skipped: from just before x, and from halfway
			// between, Next still finds x.
			for _, y := range []time.Time{x.Add(-time.Nanosecond), prev.Add(x.Sub(prev) / 2)} {
				if y.Before(prev) {
					continue
				}
				if z := s.Next(y); !z.Equal(x) {
					t.Fatalf("%q: Next(%v) = %v but Next(%v) = %v", expr, prev, x, y, z)
				}
			}
			prev = x
		}
	})
}

// FuzzEvery checks fixed intervals: firings are anchor + k*interval, strictly
// after the instant asked about, and the first such.
func FuzzEvery(f *testing.F) {
	f.Add(int64(90), int64(0), int64(0), int64(1767225600), int64(5))
	f.Add(int64(1), int64(1767225600), int64(500), int64(1767225600), int64(499))
	f.Add(int64(86400*365), int64(-1e10), int64(1), int64(1e11), int64(0))
	f.Fuzz(func(t *testing.T, step, anchorSec, anchorNsec, afterSec, afterNsec int64) {
		step = 1 + abs64(step)%(1<<32)
		anchor := time.Unix(anchorSec%(1<<37), abs64(anchorNsec)%1e9)
		after := time.Unix(afterSec%(1<<37), abs64(afterNsec)%1e9)
		s, err := Every(time.Duration(step)*time.Second, anchor, Options{})
		if err != nil {
			if anchor.Year() >= 1 && anchor.Year() <= 9999 {
				t.Fatalf("Every(%ds, %v): %v", step, anchor, err)
			}
			return
		}
		x := s.Next(after)
		if x.IsZero() {
			return
		}
		if !x.After(after) || x.Before(anchor) {
			t.Fatalf("Next(%v) = %v: not after it, or before the anchor %v", after, x, anchor)
		}
		d := x.Unix() - anchor.Unix()
		if x.Nanosecond() != anchor.Nanosecond() || d%step != 0 {
			t.Fatalf("Next(%v) = %v is not anchor %v + k*%ds", after, x, anchor, step)
		}
		if prev := x.Add(-time.Duration(step) * time.Second); !prev.Before(anchor) && prev.After(after) {
			t.Fatalf("Next(%v) = %v skipped %v", after, x, prev)
		}
	})
}

func abs64(v int64) int64 {
	if v < 0 {
		if v == -v { // math.MinInt64
			return 0
		}
		return -v
	}
	return v
}
