package schedule

import (
	"fmt"
	"iter"
	"strings"
	"time"
)

// GapPolicy says what a schedule does with a wall-clock time that does not
// exist because the clocks jumped forward over it (spring-forward).
type GapPolicy int

const (
	// GapShift fires once at the first instant after the gap. Several
	// matching wall times inside one gap collapse into that one firing. It is
	// the default because a job that was due during the jump has still not
	// run, and most jobs would rather run late than not at all.
	GapShift GapPolicy = iota
	// GapSkip does not fire for wall times inside the gap.
	GapSkip
)

// RepeatPolicy says which instants a schedule fires at for a wall-clock time
// that occurs twice because the clocks went back (fall-back).
type RepeatPolicy int

const (
	// RepeatFirst fires at the earlier of the two instants (the default:
	// the job runs as soon as its time first comes, and once).
	RepeatFirst RepeatPolicy = iota
	// RepeatLast fires at the later of the two instants, the one in the
	// zone's new offset.
	RepeatLast
	// RepeatBoth fires at both instants.
	RepeatBoth
)

// Options fixes how a schedule is evaluated. The zero value evaluates in UTC
// with the default policies and no bounds.
type Options struct {
	// Location is the IANA zone whose wall clock the schedule's fields
	// describe. nil means UTC.
	Location *time.Location
	// Gap and Repeat are the daylight-saving policies. They apply only to
	// cron schedules whose hour field does not select every hour; see the
	// package documentation.
	Gap    GapPolicy
	Repeat RepeatPolicy
	// Start and End bound the firings: a schedule never fires before Start
	// or after End (End is inclusive). A zero Time leaves that side
	// unbounded. Parse also anchors "@every" at Start.
	Start, End time.Time
	// HashSeed is what the hashed field values ("H", "H(0-29)", "H/15")
	// are computed from: the job's id, unique across tenants (two
	// tenants' "nightly-report" jobs do not share a slot) and fixed for
	// the job's life (editing or renaming it does not move it). Empty
	// means H is refused with a ParseError naming the field.
	HashSeed string
}

// Schedule is a set of instants at which a job fires. Implementations are
// immutable and safe for concurrent use.
type Schedule interface {
	// Next returns the first firing strictly after the given instant, in
	// the schedule's Location, or the zero Time when none remain (past End,
	// or beyond the year 9999).
	Next(after time.Time) time.Time
	// String returns a canonical form of the schedule. For schedules made
	// by Parse, Parse(s.String(), sameOptions) gives the same schedule.
	String() string
	// Describe returns one line for humans, such as
	// "at 09:00 on Monday through Friday (America/New_York)".
	Describe() string
}

// Preview yields the first n firings of s strictly after from, in order. It
// stops early when the schedule has no more firings.
func Preview(s Schedule, from time.Time, n int) iter.Seq[time.Time] {
	return func(yield func(time.Time) bool) {
		t := from
		for range max(n, 0) {
			t = s.Next(t)
			if t.IsZero() || !yield(t) {
				return
			}
		}
	}
}

// String returns "SHIFT" or "SKIP".
func (p GapPolicy) String() string {
	switch p {
	case GapShift:
		return "SHIFT"
	case GapSkip:
		return "SKIP"
	}
	return fmt.Sprintf("GapPolicy(%d)", int(p))
}

// ParseGapPolicy parses "SHIFT" or "SKIP", in any case. The empty string is
// the default, GapShift, so an unset configuration value needs no special
// handling.
func ParseGapPolicy(s string) (GapPolicy, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "SHIFT":
		return GapShift, nil
	case "SKIP":
		return GapSkip, nil
	}
	return 0, fmt.Errorf("unknown DST gap policy %q: want SHIFT or SKIP", s)
}

// MarshalText implements encoding.TextMarshaler, so a policy works with
// flag.TextVar and text-based configuration.
func (p GapPolicy) MarshalText() ([]byte, error) {
	if p != GapShift && p != GapSkip {
		return nil, fmt.Errorf("invalid DST gap policy %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseGapPolicy.
func (p *GapPolicy) UnmarshalText(b []byte) error {
	v, err := ParseGapPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// String returns "FIRST", "LAST" or "BOTH".
func (p RepeatPolicy) String() string {
	switch p {
	case RepeatFirst:
		return "FIRST"
	case RepeatLast:
		return "LAST"
	case RepeatBoth:
		return "BOTH"
	}
	return fmt.Sprintf("RepeatPolicy(%d)", int(p))
}

// ParseRepeatPolicy parses "FIRST", "LAST" or "BOTH", in any case. The empty
// string is the default, RepeatFirst.
func ParseRepeatPolicy(s string) (RepeatPolicy, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "FIRST":
		return RepeatFirst, nil
	case "LAST":
		return RepeatLast, nil
	case "BOTH":
		return RepeatBoth, nil
	}
	return 0, fmt.Errorf("unknown DST repeat policy %q: want FIRST, LAST or BOTH", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p RepeatPolicy) MarshalText() ([]byte, error) {
	if p < RepeatFirst || p > RepeatBoth {
		return nil, fmt.Errorf("invalid DST repeat policy %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRepeatPolicy.
func (p *RepeatPolicy) UnmarshalText(b []byte) error {
	v, err := ParseRepeatPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Instants outside these bounds are never returned by Next. Year 9999 is
// the last year RFC 3339 (and so the API and the CLI) can write; the bounds
// also keep the civil-calendar arithmetic far from int64 overflow.
var (
	minUnix = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	maxUnix = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
)

// bounds holds the Start/End options shared by every schedule kind.
type bounds struct {
	start, end time.Time
}

func newBounds(opts Options) bounds {
	// Strip monotonic readings so comparisons are by instant alone.
	return bounds{start: opts.Start.Round(0), end: opts.End.Round(0)}
}

// from returns the instant a search should be strictly after so that it
// honours both `after` and the inclusive Start bound.
func (b bounds) from(after time.Time) time.Time {
	if !b.start.IsZero() && after.Before(b.start) {
		return b.start.Add(-time.Nanosecond)
	}
	return after
}

// allows reports whether t is within the End bound.
func (b bounds) allows(t time.Time) bool {
	return b.end.IsZero() || !t.After(b.end)
}

func (b bounds) describe(loc *time.Location) string {
	var s string
	if !b.start.IsZero() {
		s += ", from " + b.start.In(loc).Format(time.RFC3339Nano)
	}
	if !b.end.IsZero() {
		s += ", until " + b.end.In(loc).Format(time.RFC3339Nano)
	}
	return s
}

func location(opts Options) *time.Location {
	if opts.Location == nil {
		return time.UTC
	}
	return opts.Location
}
