package schedule

import (
	"fmt"
	"time"
)

// Once returns a schedule that fires exactly once, at `at` (if the bounds in
// opts allow it). Location only affects how Next's result and Describe
// present the instant.
func Once(at time.Time, opts Options) Schedule {
	return &once{at: at.Round(0), loc: location(opts), b: newBounds(opts)}
}

type once struct {
	at  time.Time
	loc *time.Location
	b   bounds
}

func (o *once) Next(after time.Time) time.Time {
	after = o.b.from(after)
	if !o.at.After(after) || !o.b.allows(o.at) {
		return time.Time{}
	}
	return o.at.In(o.loc)
}

// String returns the instant in RFC 3339 (UTC, with as many fractional
// digits as it has). Parse does not read it: a one-off is made with Once.
func (o *once) String() string { return o.at.UTC().Format(time.RFC3339Nano) }

func (o *once) Describe() string {
	return "once at " + o.at.In(o.loc).Format(time.RFC3339Nano) + o.b.describe(o.loc)
}

// Every returns a schedule firing at anchor, anchor+interval,
// anchor+2*interval, and so on, within the bounds in opts. A zero anchor
// means opts.Start, or the Unix epoch when Start is zero too, the same rule
// Parse uses for "@every".
//
// The interval is real elapsed time: daylight-saving transitions do not move
// it, and the DST policies do not apply. It must be a whole number of
// seconds, at least one second, because every firing Sundial stages is
// addressed to the second.
func Every(interval time.Duration, anchor time.Time, opts Options) (Schedule, error) {
	if err := checkInterval(interval, interval.String()); err != nil {
		return nil, err
	}
	e := newEvery(interval, anchor, opts)
	if e.anchorSec < minUnix || e.anchorSec > maxUnix {
		return nil, &ParseError{Field: "anchor", Token: anchor.String(),
			Reason: "anchor " + anchor.String() + " is outside the years 1-9999"}
	}
	return e, nil
}

func checkInterval(d time.Duration, token string) error {
	switch {
	case d < time.Second:
		return &ParseError{Field: "expression", Token: token,
			Reason: fmt.Sprintf("@every %s: the interval must be at least 1s", token)}
	case d%time.Second != 0:
		return &ParseError{Field: "expression", Token: token,
			Reason: fmt.Sprintf("@every %s: the interval must be a whole number of seconds", token)}
	}
	return nil
}

func newEvery(interval time.Duration, anchor time.Time, opts Options) *every {
	if anchor.IsZero() {
		anchor = opts.Start
	}
	if anchor.IsZero() {
		anchor = time.Unix(0, 0)
	}
	anchor = anchor.Round(0)
	return &every{
		step:       int64(interval / time.Second),
		anchorSec:  anchor.Unix(),
		anchorNsec: int64(anchor.Nanosecond()),
		interval:   interval,
		loc:        location(opts),
		b:          newBounds(opts),
	}
}

type every struct {
	step       int64 // seconds
	anchorSec  int64 // anchor = anchorSec + anchorNsec/1e9
	anchorNsec int64
	interval   time.Duration
	loc        *time.Location
	b          bounds
}

func (e *every) Next(after time.Time) time.Time {
	after = e.b.from(after)
	// Work in whole seconds rather than with time.Sub, which saturates at
	// about 292 years and would misplace firings far from the anchor.
	// Because the step is whole seconds, the sub-second part of
	// after-anchor never changes which k is first: anchor + k*step > after
	// holds exactly when k*step > floor(after-anchor).
	as := after.Unix()
	if as > maxUnix {
		return time.Time{}
	}
	ns := int64(after.Nanosecond())
	if as < minUnix {
		as, ns = minUnix-1, 0 // far enough back; keeps the subtraction in range
	}
	ds := as - e.anchorSec
	if ns < e.anchorNsec {
		ds--
	}
	var k int64
	if ds >= 0 {
		k = ds/e.step + 1
	}
	if k > (maxUnix-e.anchorSec)/e.step {
		return time.Time{}
	}
	t := time.Unix(e.anchorSec+k*e.step, e.anchorNsec)
	if t.Unix() > maxUnix || !e.b.allows(t) {
		return time.Time{}
	}
	return t.In(e.loc)
}

// String returns "@every <interval>". Parse reads it back, anchored by its
// own rule (Options.Start, else the Unix epoch).
func (e *every) String() string { return "@every " + e.interval.String() }

func (e *every) Describe() string {
	anchor := time.Unix(e.anchorSec, e.anchorNsec).In(e.loc)
	return "every " + e.interval.String() + " from " + anchor.Format(time.RFC3339Nano) + e.b.describe(e.loc)
}
