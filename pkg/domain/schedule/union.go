package schedule

import (
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"
)

// Union fires at every instant of any of its schedules, once per instant:
// two schedules that both fire at 09:00 are one firing. It is immutable
// and safe for concurrent use.
type Union struct {
	members []Schedule
}

// MaxUnion is how many schedules one Union may combine: each Next asks
// every member, so the count bounds its cost.
const MaxUnion = 10

// NewUnion combines schedules; the first is the primary (its String and
// Describe come first). One schedule is returned as it is.
func NewUnion(members ...Schedule) (Schedule, error) {
	switch {
	case len(members) == 0:
		return nil, errors.New("union: no schedule")
	case len(members) > MaxUnion:
		return nil, fmt.Errorf("union: %d schedules, at most %d", len(members), MaxUnion)
	case len(members) == 1:
		return members[0], nil
	}
	for i, m := range members {
		if m == nil {
			return nil, fmt.Errorf("union: schedule %d is nil", i)
		}
	}
	return &Union{members: append([]Schedule(nil), members...)}, nil
}

// Members are the combined schedules, primary first.
func (u *Union) Members() []Schedule { return append([]Schedule(nil), u.members...) }

// Next is the earliest of the members' next instants. Equal instants are
// one; a member with none left no longer counts.
func (u *Union) Next(after time.Time) time.Time {
	var best time.Time
	for _, m := range u.members {
		if t := m.Next(after); !t.IsZero() && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	return best
}

// instants yields s's instants strictly after `after`, in order, as
// repeated Next calls would. A union's are merged from its members, each
// asked only for its own next instant once the last is used, rather than
// every member on every step.
func instants(s Schedule, after time.Time) iter.Seq[time.Time] {
	u, ok := s.(*Union)
	if !ok {
		return func(yield func(time.Time) bool) {
			for t := s.Next(after); !t.IsZero(); t = s.Next(t) {
				if !yield(t) {
					return
				}
			}
		}
	}
	return func(yield func(time.Time) bool) {
		next := make([]time.Time, len(u.members))
		for i, m := range u.members {
			next[i] = m.Next(after)
		}
		for {
			var best time.Time
			for _, t := range next {
				if !t.IsZero() && (best.IsZero() || t.Before(best)) {
					best = t
				}
			}
			if best.IsZero() || !yield(best) {
				return
			}
			for i, t := range next {
				if t.Equal(best) {
					next[i] = u.members[i].Next(best)
				}
			}
		}
	}
}

// String joins the members' canonical forms with " | ".
func (u *Union) String() string {
	parts := make([]string, len(u.members))
	for i, m := range u.members {
		parts[i] = m.String()
	}
	return strings.Join(parts, " | ")
}

// Describe joins the members' descriptions with "; and ".
func (u *Union) Describe() string {
	parts := make([]string, len(u.members))
	for i, m := range u.members {
		parts[i] = m.Describe()
	}
	return strings.Join(parts, "; and ")
}

// TimeOfDay is a wall-clock reading within a day, as a duration since
// midnight (0 to 24h).
type TimeOfDay time.Duration

// ParseTimeOfDay reads "HH:MM" or "HH:MM:SS" (00:00 to 24:00).
func ParseTimeOfDay(s string) (TimeOfDay, error) {
	var h, m, sec int
	var n int
	var err error
	switch len(s) {
	case 5:
		n, err = fmt.Sscanf(s, "%2d:%2d", &h, &m)
		if n != 2 {
			err = errors.New("short")
		}
	case 8:
		n, err = fmt.Sscanf(s, "%2d:%2d:%2d", &h, &m, &sec)
		if n != 3 {
			err = errors.New("short")
		}
	default:
		err = errors.New("length")
	}
	if err != nil || strings.ContainsAny(s, "+- ") || h < 0 || m < 0 || m > 59 || sec < 0 || sec > 59 || h > 24 || (h == 24 && (m != 0 || sec != 0)) {
		return 0, fmt.Errorf("%q is not a time of day HH:MM or HH:MM:SS (00:00 to 24:00)", s)
	}
	return TimeOfDay(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second), nil
}

// String is "HH:MM", or "HH:MM:SS" when the seconds are not zero.
func (t TimeOfDay) String() string {
	d := time.Duration(t)
	h, m, s := int(d/time.Hour), int(d/time.Minute)%60, int(d/time.Second)%60
	if s != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%02d:%02d", h, m)
}

// Exclusion is a stretch of the job's wall clock in which it never fires.
// An instant is excluded when its wall reading in the schedule's zone
// falls in the window [Start, End) on a day the exclusion applies to.
// A window with End at or before Start runs past midnight (22:00-06:00),
// and belongs to the day it starts on. Without a window (Whole) every
// reading of the day is excluded.
//
// The days an exclusion applies to: those of Weekdays (none: every day)
// between From and Until inclusive (zero: unbounded).
type Exclusion struct {
	// Whole excludes whole days; Start and End are then ignored.
	Whole      bool
	Start, End TimeOfDay
	Weekdays   []time.Weekday
	From       Date // zero Year: no lower bound
	Until      Date // zero Year: no upper bound
	// Note is the user's reason ("maintenance window"), added to what
	// preview says about the instants it removed.
	Note string
}

// Excluded is a schedule with exclusions: its base's instants except those
// an exclusion covers. It is immutable and safe for concurrent use.
type Excluded struct {
	base  Schedule
	rules []rule
	loc   *time.Location
}

type rule struct {
	Exclusion
	days            [7]bool
	from, until     int64 // day numbers; 0 and maxDay when unbounded
	wraps           bool
	index           int
	describedWindow string
}

// MaxExcludedWalk bounds how many excluded instants one Next passes over
// (after jumping over each window). A schedule whose next instant not
// excluded is further away than that is treated as having none; the api
// refuses such a schedule when it is created (it never fires).
const MaxExcludedWalk = 10_000

// ErrAllExcluded is returned by NewExcluded when the exclusions without
// dates cover every moment of every day, so nothing could ever fire.
var ErrAllExcluded = errors.New("the exclusions cover every moment of every day, so the schedule never fires")

// NewExcluded applies exclusions to base, reading wall clocks in loc (nil:
// UTC). No exclusions: base comes back as it is.
func NewExcluded(base Schedule, exclusions []Exclusion, loc *time.Location) (Schedule, error) {
	if len(exclusions) == 0 {
		return base, nil
	}
	if loc == nil {
		loc = time.UTC
	}
	e := &Excluded{base: base, loc: loc}
	for i, x := range exclusions {
		r := rule{Exclusion: x, index: i, until: 1 << 40}
		if !x.Whole && x.Start == x.End {
			return nil, fmt.Errorf("exclusions[%d]: start and end are both %s; leave both out to exclude whole days", i, x.Start)
		}
		if !x.Whole && (x.Start < 0 || x.End < 0 || x.Start >= TimeOfDay(24*time.Hour) || x.End > TimeOfDay(24*time.Hour)) {
			return nil, fmt.Errorf("exclusions[%d]: the window must start in 00:00-23:59:59 and end by 24:00", i)
		}
		r.wraps = !x.Whole && x.End < x.Start
		if len(x.Weekdays) == 0 {
			r.days = [7]bool{true, true, true, true, true, true, true}
		}
		for _, w := range x.Weekdays {
			if w < time.Sunday || w > time.Saturday {
				return nil, fmt.Errorf("exclusions[%d]: %d is not a weekday", i, int(w))
			}
			r.days[w] = true
		}
		if x.From.Year != 0 {
			r.from = x.From.days()
		}
		if x.Until.Year != 0 {
			r.until = x.Until.days()
		}
		if r.until < r.from {
			return nil, fmt.Errorf("exclusions[%d]: until %s is before from %s", i, x.Until, x.From)
		}
		r.describedWindow = describeExclusion(x)
		e.rules = append(e.rules, r)
	}
	if e.coversEverything() {
		return nil, ErrAllExcluded
	}
	return e, nil
}

// coversEverything reports whether the undated exclusions leave no moment
// of the week free (checked at each window edge of each weekday).
func (e *Excluded) coversEverything() bool {
	var edges []time.Duration
	edges = append(edges, 0)
	for _, r := range e.rules {
		if r.from != 0 || r.until != 1<<40 {
			continue
		}
		if !r.Whole {
			edges = append(edges, time.Duration(r.Start), time.Duration(r.End))
		}
	}
	for wd := time.Sunday; wd <= time.Saturday; wd++ {
		for _, tod := range edges {
			if tod >= 24*time.Hour {
				continue
			}
			covered := false
			for _, r := range e.rules {
				if r.from != 0 || r.until != 1<<40 {
					continue
				}
				if r.coversReading(wd, (wd+6)%7, TimeOfDay(tod)) {
					covered = true
					break
				}
			}
			if !covered {
				return false
			}
		}
	}
	return true
}

// coversReading is the rule's test on weekdays alone (dates are checked
// by the caller): a reading tod on a day of weekday wd, whose previous
// day is prev.
func (r *rule) coversReading(wd, prev time.Weekday, tod TimeOfDay) bool {
	switch {
	case r.Whole:
		return r.days[wd]
	case r.wraps:
		return (tod >= r.Start && r.days[wd]) || (tod < r.End && r.days[prev])
	default:
		return tod >= r.Start && tod < r.End && r.days[wd]
	}
}

func (r *rule) dayApplies(n int64) bool {
	return n >= r.from && n <= r.until && r.days[weekdayOfDays(n)]
}

// weekdayOfDays is the weekday of day number n (Date.days), counted from
// a Sunday.
func weekdayOfDays(n int64) time.Weekday {
	return time.Weekday(((n-aSunday)%7 + 7) % 7)
}

var aSunday = Date{2026, time.January, 4}.days()

// match reports whether the wall reading (day n, time of day tod) is
// excluded by r, and the day its window belongs to.
func (r *rule) match(n int64, tod TimeOfDay) (bool, int64) {
	switch {
	case r.Whole:
		return r.dayApplies(n), n
	case r.wraps:
		if tod >= r.Start && r.dayApplies(n) {
			return true, n
		}
		if tod < r.End && r.dayApplies(n-1) {
			return true, n - 1
		}
		return false, 0
	default:
		return tod >= r.Start && tod < r.End && r.dayApplies(n), n
	}
}

// windowEnd is the first instant after the window (of day n) ends.
func (e *Excluded) windowEnd(r *rule, n int64) time.Time {
	switch {
	case r.Whole:
		d := dateOfDays(n + 1)
		return wallInstant(d.Year, d.Month, d.Day, 0, 0, 0, 0, e.loc)
	case r.wraps:
		d := dateOfDays(n + 1)
		return wallTime(d, r.End, e.loc)
	default:
		return wallTime(dateOfDays(n), r.End, e.loc)
	}
}

func wallTime(d Date, tod TimeOfDay, loc *time.Location) time.Time {
	if tod >= TimeOfDay(24*time.Hour) {
		d = dateOfDays(d.days() + 1)
		tod = 0
	}
	x := time.Duration(tod)
	return wallInstant(d.Year, d.Month, d.Day, int(x/time.Hour), int(x/time.Minute)%60, int(x/time.Second)%60, 0, loc)
}

// excludedBy is the first rule that excludes t, or nil; and the day of
// its window.
func (e *Excluded) excludedBy(t time.Time) (*rule, int64) {
	w := t.In(e.loc)
	n := DateOf(w).days()
	tod := TimeOfDay(time.Duration(w.Hour())*time.Hour + time.Duration(w.Minute())*time.Minute +
		time.Duration(w.Second())*time.Second + time.Duration(w.Nanosecond()))
	for i := range e.rules {
		if ok, day := e.rules[i].match(n, tod); ok {
			return &e.rules[i], day
		}
	}
	return nil, 0
}

// skipPast is the instant to continue the search after, having found t
// excluded by r (window of day n): the end of the window, but never past
// the end of t's zone period (after a fall-back the readings run through
// the window again, and readings before the window's start may come
// first).
func (e *Excluded) skipPast(t time.Time, r *rule, n int64) time.Time {
	target := e.windowEnd(r, n).Add(-time.Nanosecond)
	if _, zend := t.In(e.loc).ZoneBounds(); !zend.IsZero() && zend.Add(-time.Nanosecond).Before(target) {
		target = zend.Add(-time.Nanosecond)
	}
	if target.Before(t) {
		return t
	}
	return target
}

// Base is the schedule before the exclusions.
func (e *Excluded) Base() Schedule { return e.base }

// WithBase is e's exclusions over another base (a calendar put on the
// base goes under the exclusions, so a moved instant is excluded too).
func (e *Excluded) WithBase(base Schedule) *Excluded {
	return &Excluded{base: base, rules: e.rules, loc: e.loc}
}

// Next is the base's first instant after `after` that no exclusion covers.
func (e *Excluded) Next(after time.Time) time.Time {
	t := e.base.Next(after)
	for walked := 0; !t.IsZero(); walked++ {
		r, n := e.excludedBy(t)
		if r == nil {
			return t
		}
		if walked == MaxExcludedWalk {
			return time.Time{}
		}
		t = e.base.Next(e.skipPast(t, r, n))
	}
	return t
}

// String is the base's canonical form followed by the exclusions.
func (e *Excluded) String() string {
	var b strings.Builder
	b.WriteString(e.base.String())
	for _, r := range e.rules {
		b.WriteString(" except ")
		b.WriteString(r.describedWindow)
	}
	return b.String()
}

// Describe adds the exclusions to the base's description.
func (e *Excluded) Describe() string {
	parts := make([]string, len(e.rules))
	for i, r := range e.rules {
		parts[i] = r.describedWindow
	}
	return e.base.Describe() + ", except " + strings.Join(parts, " and ")
}

func describeExclusion(x Exclusion) string {
	var b strings.Builder
	if x.Whole {
		b.WriteString("all day")
	} else {
		fmt.Fprintf(&b, "%s-%s", x.Start, x.End)
	}
	if len(x.Weekdays) > 0 && len(x.Weekdays) < 7 {
		names := make([]string, len(x.Weekdays))
		for i, w := range x.Weekdays {
			names[i] = w.String()[:3]
		}
		b.WriteString(" on " + strings.Join(names, ","))
	}
	switch {
	case x.From.Year != 0 && x.From == x.Until:
		fmt.Fprintf(&b, " on %s", x.From)
	case x.From.Year != 0 && x.Until.Year != 0:
		fmt.Fprintf(&b, " from %s to %s", x.From, x.Until)
	case x.From.Year != 0:
		fmt.Fprintf(&b, " from %s", x.From)
	case x.Until.Year != 0:
		fmt.Fprintf(&b, " until %s", x.Until)
	}
	return b.String()
}

// Notes lists, for a schedule built of this package's parts, what its
// calendar and exclusions did that shows in (from, through]: the
// calendar's adjustments (see Calendared.Adjustments) and every instant an
// exclusion removed, in order of the underlying instants, at most limit of
// them in all. Other schedules have none.
func Notes(s Schedule, from, through time.Time, limit int) []Adjustment {
	switch x := s.(type) {
	case *Calendared:
		return x.Adjustments(from, through, limit)
	case *Excluded:
		return x.notes(from, through, limit)
	}
	return nil
}

func (e *Excluded) notes(from, through time.Time, limit int) []Adjustment {
	inner := Notes(e.base, from, through, limit)
	var own []Adjustment
	walked := 0
	for t := range instants(e.base, from) {
		if t.After(through) || len(own) == limit || walked == MaxExcludedWalk {
			break
		}
		walked++
		r, _ := e.excludedBy(t)
		if r == nil {
			continue
		}
		reason := fmt.Sprintf("excluded by exclusions[%d] (%s)", r.index, r.describedWindow)
		if r.Note != "" {
			reason += ": " + r.Note
		}
		own = append(own, Adjustment{From: t.UTC(), Reason: reason + "; skipped"})
	}
	// An instant the calendar moved into a window shows twice: moved, then
	// excluded; that is what happened to it.
	out := make([]Adjustment, 0, len(inner)+len(own))
	i, j := 0, 0
	for (i < len(inner) || j < len(own)) && len(out) < limit {
		if j == len(own) || (i < len(inner) && !own[j].From.Before(inner[i].From)) {
			out = append(out, inner[i])
			i++
		} else {
			out = append(out, own[j])
			j++
		}
	}
	return out
}
