package schedule

import (
	"math"
	"math/bits"
	"time"
)

// cron is a parsed cron expression. Every field is a bitset, so matching is
// a mask test and finding the next matching value is a shift and a
// trailing-zero count; nothing is ever expanded into a list of instants.
type cron struct {
	second, minute uint64 // bits 0-59
	hour           uint32 // bits 0-23
	dom            uint32 // bits 1-31: plain day-of-month numbers
	month          uint16 // bits 1-12
	dow            uint8  // bits 0-6, Sunday = 0

	// domStar/dowStar record that the field was "*" or "?": only then is
	// that field "unrestricted" for the classic rule that a day matches if
	// either day field matches when both are restricted.
	domStar, dowStar bool

	// Quartz day rules, kept apart from the plain bitsets because they
	// depend on the month's length and on weekdays.
	domLast        uint32 // bit n: L-n (bit 0: L, the last day)
	domLastWeekday bool   // LW: the last Monday-Friday of the month
	domWeekday     uint32 // bit n: nW, the weekday nearest day n
	dowLast        uint8  // bit d: dL, the last weekday d of the month
	dowNth         uint64 // bit d*8+n: d#n, the n-th weekday d of the month

	// Set from Options by setOptions.
	zoned
	opts Options // as given, for Describe
	b    bounds
}

// wallSet is a set of wall-clock readings, in wall seconds (see Next). A
// cron expression is one; a recurrence rule is another. zoned turns any of
// them into instants with the DST policies.
type wallSet interface {
	// nextWall returns the least member w with lo <= w < hi.
	nextWall(lo, hi int64) (int64, bool)
}

// zoned is how a set of wall readings meets a zone's real timeline: the
// zone, whether it ever changes offset, and the DST policies in force.
type zoned struct {
	loc      *time.Location
	fixed    bool // loc never changes offset, so no zone lookups are needed
	fixedOff int64
	gapShift bool         // fire at the end of a gap for matching wall times inside it
	repeat   RepeatPolicy // which occurrences of a repeated wall time fire
}

// newZoned sets up loc with the policies; hourly says the set has readings
// in every hour of the day, which follows real elapsed time whatever the
// policies (see setOptions).
func newZoned(loc *time.Location, gap GapPolicy, repeat RepeatPolicy, hourly bool) zoned {
	z := zoned{loc: loc, gapShift: !hourly && gap == GapShift, repeat: repeat}
	if hourly {
		z.repeat = RepeatBoth
	}
	// A zone with no transitions at all (UTC, Etc/GMT+5, time.FixedZone)
	// reports unbounded zone bounds; it needs no lookups in Next.
	probe := time.Unix(0, 0).In(loc)
	if s, e := probe.ZoneBounds(); s.IsZero() && e.IsZero() {
		_, off := probe.Zone()
		z.fixed, z.fixedOff = true, int64(off)
	}
	return z
}

// next returns the first instant (Unix second) at or after u and before
// limit at which a member of ws fires.
func (z *zoned) next(ws wallSet, u, limit int64) (int64, bool) {
	if z.fixed {
		w, ok := ws.nextWall(u+z.fixedOff, limit+z.fixedOff)
		return w - z.fixedOff, ok
	}
	return z.nextZoned(ws, u, limit)
}

const (
	fullDays    uint32 = 0xfffffffe // bits 1-31
	allWeekdays uint8  = 0x7f
	allHours    uint32 = 1<<24 - 1
	allMinutes  uint64 = 1<<60 - 1
	allMonths   uint16 = 0x1ffe
	secPerDay          = 86400
	// maxShift bounds how far any zone has ever moved its clocks in one
	// transition (Pacific/Apia skipped a whole day in 2011; LMT-era
	// changes in Alaska and Manila were about 24h). A candidate further than
	// this from a transition cannot be a repeated wall time.
	maxShift = 30 * 3600
)

func (c *cron) setOptions(opts Options) {
	c.opts = opts
	c.b = newBounds(opts)
	// A schedule that matches every hour of the day follows real elapsed
	// time through transitions, whatever its policy: nonexistent wall times
	// simply do not happen and repeated ones happen twice. This is what
	// cronie does for jobs that run hourly or more often, and it keeps
	// "*/5 * * * *" firing every five real minutes through the night.
	c.zoned = newZoned(location(opts), opts.Gap, opts.Repeat, c.hour == allHours)
}

// firesEver reports whether any date matches the day and month fields.
// Weekdays, month lengths and leap years repeat every 400 Gregorian years,
// so one cycle answers for all time. Checking at parse time lets Next loop
// without an iteration cap, and turns "30 2" (February 30th) into an error
// the user sees instead of a job that silently never runs.
func (c *cron) firesEver() bool {
	for y := 2000; y < 2400; y++ {
		for m := 1; m <= 12; m++ {
			if c.month&(1<<m) != 0 && c.dayMask(y, m) != 0 {
				return true
			}
		}
	}
	return false
}

// Next returns the first firing strictly after `after`.
//
// The search runs in "wall seconds": seconds since 1970-01-01T00:00 of the
// zone's wall clock, as if that clock were UTC. Within one zone period
// (ZoneBounds: a stretch with one UTC offset) wall seconds and instants
// differ by a constant, so the calendar walk in nextWall can run with no
// zone lookups; Next only consults the zone when it moves from one period to
// the next, which is where the DST policies act. See DESIGN.md.
func (c *cron) Next(after time.Time) time.Time {
	after = c.b.from(after)
	// Every firing is a whole second, so "strictly after" is "at or after
	// the next whole second".
	u := after.Unix() + 1
	if u < minUnix {
		u = minUnix
	}
	limit := int64(maxUnix) + 1 // exclusive
	if !c.b.end.IsZero() {
		if e := c.b.end.Unix() + 1; e < limit {
			limit = e
		}
	}
	if u >= limit {
		return time.Time{}
	}
	t, ok := c.next(c, u, limit)
	if !ok {
		return time.Time{}
	}
	return time.Unix(t, 0).In(c.loc)
}

// zoneAt returns the UTC offset in effect at Unix second sec and the bounds
// [start, end) of the zone period holding it, with math.MinInt64 and
// math.MaxInt64 standing for "unbounded".
func (z *zoned) zoneAt(sec int64) (off, start, end int64) {
	t := time.Unix(sec, 0).In(z.loc)
	_, o := t.Zone()
	s, e := t.ZoneBounds()
	start, end = math.MinInt64, math.MaxInt64
	if !s.IsZero() {
		start = s.Unix()
	}
	if !e.IsZero() {
		end = e.Unix()
	}
	if start > sec || end <= sec {
		// ZoneBounds must hold sec, but past a zone's last listed
		// transition, where Go computes periods from the TZ footer rule,
		// it does not always: on the last UTC day of a leap year it
		// reports an end before the instant (golang/go#81583). Trusting
		// that would loop forever or misplace a transition, so rebuild
		// the bounds from offsets alone.
		start, end = z.probeBounds(sec, int64(o))
	}
	return int64(o), start, end
}

// probeBounds returns the bounds of the stretch around sec in which the
// offset stays off, reaching at most probeReach either way (a longer
// stretch is cut short there, which is harmless: a boundary without an
// offset change changes nothing). It samples the offset every probeStep and
// bisects to the second where it changes; no zone changes its offset twice
// within an hour.
func (z *zoned) probeBounds(sec, off int64) (start, end int64) {
	const probeStep, probeReach = 3600, 48 * 3600
	start, end = sec-probeReach, sec+probeReach
	for x := sec; x < sec+probeReach; x += probeStep {
		if z.offsetAt(x+probeStep) != off {
			lo, hi := x, x+probeStep // offset is off at lo, not at hi
			for hi-lo > 1 {
				if mid := lo + (hi-lo)/2; z.offsetAt(mid) == off {
					lo = mid
				} else {
					hi = mid
				}
			}
			end = hi
			break
		}
	}
	for x := sec; x > sec-probeReach; x -= probeStep {
		if z.offsetAt(x-probeStep) != off {
			lo, hi := x-probeStep, x // offset is off at hi, not at lo
			for hi-lo > 1 {
				if mid := lo + (hi-lo)/2; z.offsetAt(mid) == off {
					hi = mid
				} else {
					lo = mid
				}
			}
			start = hi
			break
		}
	}
	return start, end
}

func (z *zoned) offsetAt(sec int64) int64 {
	_, o := time.Unix(sec, 0).In(z.loc).Zone()
	return int64(o)
}

// changeBefore returns the offset in effect before the latest offset change
// at or before start, and the instant of that change. Period boundaries
// where the offset stays the same are looked past: Go splits footer-rule
// periods at each new year and probeBounds cuts periods short, and a repeat
// split by such a boundary must still be seen whole. Beyond maxShift no
// change matters, and (off, start) is returned.
func (z *zoned) changeBefore(start, off int64) (int64, int64) {
	for s := start; s != math.MinInt64 && start-s < maxShift; {
		o, ps, _ := z.zoneAt(s - 1)
		if o != off {
			return o, s
		}
		s = ps
	}
	return off, start
}

// changeAfter is changeBefore's mirror: the offset after the first offset
// change at or after end, and its instant.
func (z *zoned) changeAfter(end, off int64) (int64, int64) {
	for e := end; e != math.MaxInt64 && e-end < maxShift; {
		o, _, ne := z.zoneAt(e)
		if o != off {
			return o, e
		}
		e = ne
	}
	return off, end
}

// nextZoned finds the first firing at or after Unix second u and before
// limit, walking the zone one period at a time.
func (z *zoned) nextZoned(ws wallSet, u, limit int64) (int64, bool) {
	for u < limit {
		off, start, end := z.zoneAt(u)

		// The gap before this period: wall times in
		// [start+prevOff, start+off) never occurred. Under SHIFT a match
		// among them fires once, at the period's first instant. This
		// firing can coincide with a real wall time at that instant that
		// matches too (e.g. "0 2,3 * * *" on a 02:00->03:00 night); a
		// schedule fires at most once per instant, so that is one firing.
		if u == start && z.gapShift {
			if prevOff := z.offsetAt(start - 1); prevOff < off {
				if _, ok := ws.nextWall(start+prevOff, start+off); ok {
					return start, true
				}
			}
		}

		lo := u + off
		hi := int64(math.MaxInt64)
		if end != math.MaxInt64 {
			hi = end + off
		}
		for {
			w, ok := ws.nextWall(lo, hi)
			if !ok || w-off >= limit {
				break
			}
			inst := w - off
			// A wall time early in a period that follows a fall-back also
			// occurred in the previous period (walls below start+prevOff).
			// FIRST fired it there, so skip ahead past the repeat.
			if z.repeat == RepeatFirst && start != math.MinInt64 && inst-start < maxShift {
				if prevOff, at := z.changeBefore(start, off); prevOff > off && w < at+prevOff {
					lo = at + prevOff
					continue
				}
			}
			// A wall time late in a period that precedes a fall-back will
			// occur again in the next period (walls at or above
			// end+nextOff). LAST fires it there; nothing later in this
			// period can fire either, so move on.
			if z.repeat == RepeatLast && end != math.MaxInt64 && end-inst <= maxShift {
				if nextOff, at := z.changeAfter(end, off); nextOff < off && w >= at+nextOff {
					break
				}
			}
			return inst, true
		}
		if end == math.MaxInt64 {
			return 0, false
		}
		u = end
	}
	return 0, false
}

// nextWall returns the first wall second w with lo <= w < hi that matches
// the expression, walking calendar fields from the largest down: month,
// day, hour, minute, second. Each step either lands on a match or moves a
// larger field forward and resets the smaller ones.
func (c *cron) nextWall(lo, hi int64) (int64, bool) {
	if lo >= hi {
		return 0, false
	}
	days := floorDiv(lo, secPerDay)
	sod := int(lo - days*secPerDay)
	y, mo, d := civilFromDays(days)
	h, mi, s := sod/3600, sod/60%60, sod%60

	for y <= 9999 {
		if c.month&(1<<mo) == 0 {
			next := nextSet16(c.month, mo+1)
			if next > 12 {
				y++
				next = nextSet16(c.month, 1)
			}
			mo, d, h, mi, s = next, 1, 0, 0, 0
			if daysFromCivil(y, mo, 1)*secPerDay >= hi {
				return 0, false
			}
			continue
		}
		mask := c.dayMask(y, mo)
		for {
			dd := nextSet32(mask, d)
			if dd > 31 {
				break
			}
			if dd != d {
				d, h, mi, s = dd, 0, 0, 0
			}
			dayStart := daysFromCivil(y, mo, d) * secPerDay
			if dayStart >= hi {
				return 0, false
			}
			if tod, ok := c.nextTimeOfDay(h, mi, s); ok {
				if w := dayStart + int64(tod); w < hi {
					return w, true
				}
				return 0, false
			}
			d, h, mi, s = d+1, 0, 0, 0
		}
		mo, d, h, mi, s = mo+1, 1, 0, 0, 0
		if mo > 12 {
			y, mo = y+1, 1
		}
		if daysFromCivil(y, mo, 1)*secPerDay >= hi {
			return 0, false
		}
	}
	return 0, false
}

// nextTimeOfDay returns the first matching time of day, in seconds since
// midnight, at or after h:mi:s, or false if none remains today.
func (c *cron) nextTimeOfDay(h, mi, s int) (int, bool) {
	return nextTimeOfDay(c.hour, c.minute, c.second, h, mi, s)
}

// nextTimeOfDay is the first time of day in the sets of hours, minutes and
// seconds at or after h:mi:s.
func nextTimeOfDay(hour uint32, minute, second uint64, h, mi, s int) (int, bool) {
	for {
		hh := nextSet32(hour, h)
		if hh > 23 {
			return 0, false
		}
		if hh != h {
			h, mi, s = hh, 0, 0
		}
		mm := nextSet64(minute, mi)
		if mm > 59 {
			h, mi, s = h+1, 0, 0
			continue
		}
		if mm != mi {
			mi, s = mm, 0
		}
		ss := nextSet64(second, s)
		if ss > 59 {
			mi, s = mi+1, 0
			if mi > 59 {
				h, mi = h+1, 0
			}
			continue
		}
		return h*3600 + mi*60 + ss, true
	}
}

// dayMask returns the days of month m of year y that match (bit d set for
// day d), combining the day-of-month and day-of-week fields by cron's rule.
func (c *cron) dayMask(y, m int) uint32 {
	dim := daysIn(y, m)
	full := uint32(1)<<uint(dim+1) - 2 // bits 1..dim
	wd1 := weekday(daysFromCivil(y, m, 1))

	domPart := c.dom & full
	if !c.domStar {
		for b := c.domLast; b != 0; b &= b - 1 {
			if d := dim - bits.TrailingZeros32(b); d >= 1 {
				domPart |= 1 << uint(d)
			}
		}
		if c.domLastWeekday {
			d := dim
			switch (wd1 + dim - 1) % 7 {
			case 6: // Saturday
				d--
			case 0: // Sunday
				d -= 2
			}
			domPart |= 1 << uint(d)
		}
		for b := c.domWeekday; b != 0; b &= b - 1 {
			n := bits.TrailingZeros32(b)
			if n > dim {
				continue // "31W" does nothing in a 30-day month
			}
			d := n
			switch (wd1 + n - 1) % 7 {
			case 6: // Saturday: the Friday before, unless that leaves the month
				if n == 1 {
					d = 3
				} else {
					d = n - 1
				}
			case 0: // Sunday: the Monday after, unless that leaves the month
				if n == dim {
					d = n - 2
				} else {
					d = n + 1
				}
			}
			domPart |= 1 << uint(d)
		}
	}

	// Plain weekdays: rotate the weekday bits so that bit j means "days
	// with (day-1) mod 7 == j", then repeat that 7-bit pattern across the
	// month. No loop over days.
	r := uint64(c.dow)
	r = (r>>uint(wd1) | r<<uint(7-wd1)) & 0x7f
	r |= r<<7 | r<<14 | r<<21 | r<<28
	dowPart := uint32(r<<1) & full
	if !c.dowStar {
		lastWd := (wd1 + dim - 1) % 7
		for b := c.dowLast; b != 0; b &= b - 1 {
			wd := bits.TrailingZeros8(b)
			dowPart |= 1 << uint(dim-(lastWd-wd+7)%7)
		}
		for b := c.dowNth; b != 0; b &= b - 1 {
			i := bits.TrailingZeros64(b)
			wd, n := i/8, i%8
			if d := 1 + (wd-wd1+7)%7 + 7*(n-1); d <= dim {
				dowPart |= 1 << uint(d)
			}
		}
	}

	if c.domStar || c.dowStar {
		return domPart & dowPart
	}
	return domPart | dowPart
}

// nextSet* return the lowest set bit at or above from, or a value past the
// field's range when there is none.
func nextSet64(b uint64, from int) int {
	if from >= 64 {
		return 64
	}
	return from + bits.TrailingZeros64(b>>uint(from))
}

func nextSet32(b uint32, from int) int {
	if from >= 32 {
		return 32
	}
	return from + bits.TrailingZeros32(b>>uint(from))
}

func nextSet16(b uint16, from int) int {
	if from >= 16 {
		return 16
	}
	return from + bits.TrailingZeros16(b>>uint(from))
}

// Civil-calendar arithmetic on the proleptic Gregorian calendar, after
// Howard Hinnant's days_from_civil/civil_from_days. Plain integer math
// keeps nextWall free of time.Time and of any zone.

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// daysFromCivil returns the number of days from 1970-01-01 to y-m-d.
func daysFromCivil(y, m, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := floorDiv(yy, 400)
	yoe := yy - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp + 3)
	if m > 12 {
		m -= 12
	}
	y = int(yoe + era*400)
	if m <= 2 {
		y++
	}
	return y, m, d
}

// weekday returns the day of the week (Sunday = 0) of a day number.
func weekday(days int64) int {
	// 1970-01-01 was a Thursday.
	w := (days + 4) % 7
	if w < 0 {
		w += 7
	}
	return int(w)
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
