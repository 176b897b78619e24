package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Date is a civil date, read in the zone of whatever schedule uses it: a
// holiday is a day on the job's wall calendar, not a 24-hour stretch of
// UTC.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf is the civil date of t in t's location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

// ParseDate reads "YYYY-MM-DD" and refuses dates that do not exist
// (2026-02-30).
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, fmt.Errorf("%q is not a date YYYY-MM-DD", s)
	}
	return DateOf(t), nil
}

// String is "YYYY-MM-DD".
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// days counts days since 0001-01-01 (proleptic Gregorian), so consecutive
// dates are consecutive numbers.
func (d Date) days() int64 {
	// Rounding down, so days before 1970 (negative Unix times) number on
	// from the days after it without a repeat.
	return floorDiv(time.Date(d.Year, d.Month, d.Day, 12, 0, 0, 0, time.UTC).Unix(), 86400) - floorDiv(minUnix, 86400)
}

func dateOfDays(n int64) Date {
	return DateOf(time.Unix((n+floorDiv(minUnix, 86400))*86400+43200, 0).UTC())
}

func (d Date) weekday() time.Weekday {
	return time.Date(d.Year, d.Month, d.Day, 12, 0, 0, 0, time.UTC).Weekday()
}

// Holiday is one date of a calendar and its name ("Christmas Day").
type Holiday struct {
	Date Date
	Name string
}

// MaxMoveDays is how far a move looks for a business day. An instant
// whose nearest business day in its direction is further away is dropped
// (its Adjustment says so), which also bounds the cost of Next.
const MaxMoveDays = 31

// Calendar is a named set of holidays plus the weekdays that are weekend.
// A business day is a day that is neither. It is immutable and safe for
// concurrent use.
type Calendar struct {
	name     string
	holidays map[int64]string
	weekend  [7]bool
	// maxRun is the longest stretch of consecutive non-business days,
	// capped at MaxMoveDays+1: how far a move can reach.
	maxRun int
}

// DefaultWeekend is Saturday and Sunday.
var DefaultWeekend = []time.Weekday{time.Saturday, time.Sunday}

// NewCalendar builds a calendar. Two holidays on one date are one (the
// names are joined); weekend may be empty (every weekday is a business day
// unless a holiday) but not all seven days.
func NewCalendar(name string, holidays []Holiday, weekend []time.Weekday) (*Calendar, error) {
	c := &Calendar{name: name, holidays: make(map[int64]string, len(holidays))}
	for _, w := range weekend {
		if w < time.Sunday || w > time.Saturday {
			return nil, fmt.Errorf("weekend: %d is not a weekday", int(w))
		}
		c.weekend[w] = true
	}
	if !slices.Contains(c.weekend[:], false) {
		return nil, errors.New("weekend: all seven days are weekend, so no day is a business day")
	}
	for _, h := range holidays {
		n := h.Date.days()
		if dateOfDays(n) != h.Date {
			return nil, fmt.Errorf("holiday %s does not exist", h.Date)
		}
		if prev, ok := c.holidays[n]; ok && prev != h.Name {
			c.holidays[n] = prev + "; " + h.Name
		} else {
			c.holidays[n] = h.Name
		}
	}
	c.maxRun = c.longestRun()
	return c, nil
}

// Name is the calendar's name.
func (c *Calendar) Name() string { return c.name }

// IsBusinessDay reports whether d is neither weekend nor a holiday.
func (c *Calendar) IsBusinessDay(d Date) bool { return c.business(d.days()) }

func (c *Calendar) business(n int64) bool {
	if c.weekend[dateOfDays(n).weekday()] {
		return false
	}
	_, hol := c.holidays[n]
	return !hol
}

// why names what makes day n a non-business day.
func (c *Calendar) why(n int64) string {
	d := dateOfDays(n)
	if name, ok := c.holidays[n]; ok {
		if name == "" {
			return fmt.Sprintf("%s is a holiday in calendar %s", d, c.name)
		}
		return fmt.Sprintf("%s is a holiday in calendar %s (%s)", d, c.name, name)
	}
	return fmt.Sprintf("%s is a %s, a weekend day in calendar %s", d, d.weekday(), c.name)
}

func (c *Calendar) longestRun() int {
	run := 0
	// Weekends alone: the longest cyclic stretch.
	for start := 0; start < 7; start++ {
		n := 0
		for n < 7 && c.weekend[(start+n)%7] {
			n++
		}
		run = max(run, n)
	}
	for h := range c.holidays {
		n := 1
		for d := h - 1; !c.business(d) && n <= MaxMoveDays; d-- {
			n++
		}
		for d := h + 1; !c.business(d) && n <= MaxMoveDays; d++ {
			n++
		}
		run = max(run, n)
	}
	return min(run, MaxMoveDays+1)
}

// CalendarPolicy is what a schedule does with an instant that falls on a
// non-business day of its calendar.
type CalendarPolicy int

const (
	// CalendarSkip drops the instant.
	CalendarSkip CalendarPolicy = iota + 1
	// CalendarNext moves it to the same wall-clock time on the next
	// business day.
	CalendarNext
	// CalendarPrevious moves it to the same wall-clock time on the
	// previous business day.
	CalendarPrevious
)

// String returns "SKIP", "NEXT" or "PREVIOUS".
func (p CalendarPolicy) String() string {
	switch p {
	case CalendarSkip:
		return "SKIP"
	case CalendarNext:
		return "NEXT"
	case CalendarPrevious:
		return "PREVIOUS"
	}
	return fmt.Sprintf("CalendarPolicy(%d)", int(p))
}

// ParseCalendarPolicy parses "SKIP", "NEXT" or "PREVIOUS" in any case
// ("MOVE_NEXT" and "MOVE_PREVIOUS" too).
func ParseCalendarPolicy(s string) (CalendarPolicy, error) {
	switch strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "MOVE_") {
	case "SKIP":
		return CalendarSkip, nil
	case "NEXT":
		return CalendarNext, nil
	case "PREVIOUS":
		return CalendarPrevious, nil
	}
	return 0, fmt.Errorf("unknown calendar policy %q: want SKIP, NEXT or PREVIOUS", s)
}

// Adjustment is what a calendar did to one instant of the underlying
// schedule: moved it (To set) or removed it (To zero), and why.
type Adjustment struct {
	From, To time.Time
	Reason   string
}

// Calendared is a schedule whose instants on non-business days of a
// calendar are skipped or moved to a business day. The wall clock of
// Location decides which day an instant is on. A moved instant keeps its
// wall-clock reading; on a day where that reading does not exist (a DST
// gap) it is the first instant after the gap, and where it exists twice,
// the first. Several instants moved onto one instant are one firing.
// Bounds (start and end) apply to the underlying instants.
type Calendared struct {
	base   Schedule
	cal    *Calendar
	policy CalendarPolicy
	loc    *time.Location
	// reach bounds how far a move shifts an instant: the longest
	// non-business stretch plus a day, plus slack for DST and zones that
	// skipped a day.
	reach time.Duration
}

// WithCalendar applies cal with policy p to base, reading days in loc
// (nil: UTC).
func WithCalendar(base Schedule, cal *Calendar, p CalendarPolicy, loc *time.Location) (*Calendared, error) {
	if cal == nil {
		return nil, errors.New("calendar is nil")
	}
	if p < CalendarSkip || p > CalendarPrevious {
		return nil, fmt.Errorf("invalid calendar policy %d", int(p))
	}
	if loc == nil {
		loc = time.UTC
	}
	return &Calendared{base: base, cal: cal, policy: p, loc: loc,
		reach: time.Duration(cal.maxRun+1)*24*time.Hour + 26*time.Hour}, nil
}

// Base is the schedule before the calendar.
func (c *Calendared) Base() Schedule { return c.base }

// String is the underlying schedule's canonical form.
func (c *Calendared) String() string { return c.base.String() }

// Describe adds the calendar to the underlying description.
func (c *Calendared) Describe() string {
	switch c.policy {
	case CalendarSkip:
		return fmt.Sprintf("%s, skipping the holidays and weekend days of calendar %s", c.base.Describe(), c.cal.name)
	case CalendarNext:
		return fmt.Sprintf("%s, moved to the next business day of calendar %s on its holidays and weekend days", c.base.Describe(), c.cal.name)
	}
	return fmt.Sprintf("%s, moved to the previous business day of calendar %s on its holidays and weekend days", c.base.Describe(), c.cal.name)
}

// dayNum is the day number of t's wall date in loc.
func (c *Calendared) dayNum(t time.Time) int64 { return DateOf(t.In(c.loc)).days() }

// target is the business day an instant on non-business day n moves to;
// ok is false when there is none within MaxMoveDays.
func (c *Calendared) target(n int64) (int64, bool) {
	step := int64(1)
	if c.policy == CalendarPrevious {
		step = -1
	}
	for i := 1; i <= MaxMoveDays; i++ {
		if d := n + step*int64(i); c.cal.business(d) {
			return d, true
		}
	}
	return 0, false
}

// adjust maps one underlying instant: itself on a business day, else
// moved or (ok false) removed.
func (c *Calendared) adjust(t time.Time) (time.Time, bool) {
	n := c.dayNum(t)
	if c.cal.business(n) {
		return t, true
	}
	if c.policy == CalendarSkip {
		return time.Time{}, false
	}
	d, ok := c.target(n)
	if !ok {
		return time.Time{}, false
	}
	return c.redate(t, d), true
}

// redate is t's wall reading on day n.
func (c *Calendared) redate(t time.Time, n int64) time.Time {
	w := t.In(c.loc)
	d := dateOfDays(n)
	return wallInstant(d.Year, d.Month, d.Day, w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), c.loc)
}

// wallInstant is the first instant whose wall reading in loc is the one
// given, or the end of the gap when the reading does not exist.
func wallInstant(y int, mo time.Month, d, h, mi, s, ns int, loc *time.Location) time.Time {
	u := time.Date(y, mo, d, h, mi, s, ns, time.UTC)
	// The offsets in force a little before and after the reading: a zone
	// changes offset at most once or twice in these 60 hours.
	_, o1 := u.Add(-30 * time.Hour).In(loc).Zone()
	_, o2 := u.Add(30 * time.Hour).In(loc).Zone()
	offs := [3]int{o1, o2, o2}
	if o1 != o2 {
		_, offs[2] = u.In(loc).Zone()
	}
	var best, latest time.Time
	for i, off := range offs {
		if i > 0 && (off == offs[0] || (i == 2 && off == offs[1])) {
			continue
		}
		cand := u.Add(-time.Duration(off) * time.Second)
		if latest.IsZero() || cand.After(latest) {
			latest = cand
		}
		l := cand.In(loc)
		if _, coff := l.Zone(); coff == off {
			if best.IsZero() || cand.Before(best) {
				best = cand
			}
		}
	}
	if !best.IsZero() {
		return best.In(loc)
	}
	// A gap: the latest candidate lies in the zone after the jump, which
	// begins at the first instant after the gap.
	start, _ := latest.In(loc).ZoneBounds()
	if start.IsZero() || start.After(latest) {
		return latest.In(loc)
	}
	return start.In(loc)
}

// dayStart is the first instant of day n in loc.
func (c *Calendared) dayStart(n int64) time.Time {
	d := dateOfDays(n)
	return wallInstant(d.Year, d.Month, d.Day, 0, 0, 0, 0, c.loc)
}

// day is the last instant of day n, and whether the clocks go back during
// it (then a wall reading later in the day can be smaller than an earlier
// one).
func (c *Calendared) day(n int64) (end time.Time, fallsBack bool) {
	end = c.dayStart(n + 1).Add(-time.Nanosecond)
	_, o1 := c.dayStart(n).Zone()
	_, o2 := end.In(c.loc).Zone()
	return end, o2 < o1
}

// Next returns the first instant strictly after `after` of the adjusted
// schedule. It walks the underlying instants that can land after `after`
// (for NEXT, from a move's reach before it; for PREVIOUS, until a move's
// reach past the best found) a day at a time: on most days only the
// first instant that matters is looked at, because moving keeps the
// order of wall readings within a day.
func (c *Calendared) Next(after time.Time) time.Time {
	if c.policy == CalendarSkip {
		t := c.base.Next(after)
		for !t.IsZero() {
			n := c.dayNum(t)
			if c.cal.business(n) {
				return t
			}
			// Nothing else on this day fires either.
			t = c.base.Next(maxTime(t, c.dayStart(n+1).Add(-time.Nanosecond)))
		}
		return t
	}
	from := after
	if c.policy == CalendarNext {
		from = after.Add(-c.reach)
	}
	afterDay := c.dayNum(after)
	var best time.Time
	consider := func(cand time.Time) {
		if cand.After(after) && (best.IsZero() || cand.Before(best)) {
			best = cand
		}
	}
	t := c.base.Next(from)
	for !t.IsZero() {
		if !best.IsZero() {
			if c.policy == CalendarNext && !t.Before(best) {
				break
			}
			if c.policy == CalendarPrevious && !t.Add(-c.reach).Before(best) {
				break
			}
		}
		n := c.dayNum(t)
		dayEnd, back := c.day(n)
		if back {
			// Readings are not in order on this day: look at each instant.
			if a, ok := c.adjust(t); ok {
				consider(a)
			}
			t = c.base.Next(t)
			continue
		}
		if c.cal.business(n) {
			if t.After(after) {
				consider(t)
				t = c.base.Next(dayEnd)
			} else {
				t = c.base.Next(minTime(after, dayEnd))
			}
			continue
		}
		d, ok := c.target(n)
		switch {
		case !ok || d < afterDay:
			t = c.base.Next(dayEnd)
		case d > afterDay:
			// Every instant of the day lands after `after`; the first has
			// the smallest reading.
			consider(c.redate(t, d))
			t = c.base.Next(dayEnd)
		default:
			// Landing on after's own day: the first instant whose moved
			// reading is later than after's. Readings up to after's move
			// to or before it, so start there.
			w := after.In(c.loc)
			nd := dateOfDays(n)
			start := wallInstant(nd.Year, nd.Month, nd.Day, w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), c.loc)
			if start.After(t) {
				if t = c.base.Next(start.Add(-time.Nanosecond)); t.IsZero() || t.After(dayEnd) {
					continue
				}
			}
			for ; !t.IsZero() && !t.After(dayEnd); t = c.base.Next(t) {
				if m := c.redate(t, d); m.After(after) {
					consider(m)
					break
				}
			}
			if !t.IsZero() && !t.After(dayEnd) {
				t = c.base.Next(dayEnd)
			}
		}
	}
	return best
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Adjustments lists what the calendar did that shows in (from, through]:
// the underlying instants in that range it moved or removed, and the
// instants outside it that it moved into the range; in order of the
// underlying instants, at most limit of them.
func (c *Calendared) Adjustments(from, through time.Time, limit int) []Adjustment {
	var out []Adjustment
	scanFrom, scanTo := from, through
	switch c.policy {
	case CalendarNext:
		scanFrom = from.Add(-c.reach)
	case CalendarPrevious:
		scanTo = through.Add(c.reach)
	}
	in := func(t time.Time) bool { return !t.IsZero() && t.After(from) && !t.After(through) }
	for t := c.base.Next(scanFrom); !t.IsZero() && !t.After(scanTo) && len(out) < limit; t = c.base.Next(t) {
		n := c.dayNum(t)
		if c.cal.business(n) {
			// Skip the rest of a business day at once.
			if end, _ := c.day(n); end.After(t) {
				t = end
			}
			continue
		}
		a := Adjustment{From: t.UTC(), Reason: c.cal.why(n)}
		switch {
		case c.policy == CalendarSkip:
			a.Reason += "; skipped"
		default:
			d, ok := c.target(n)
			if !ok {
				a.Reason += fmt.Sprintf("; removed: no business day within %d days", MaxMoveDays)
				break
			}
			a.To = c.redate(t, d).UTC()
			dir := "next"
			if c.policy == CalendarPrevious {
				dir = "previous"
			}
			a.Reason += fmt.Sprintf("; moved to the %s business day, %s", dir, dateOfDays(d))
		}
		if in(a.From) || in(a.To) {
			out = append(out, a)
		}
	}
	return out
}
