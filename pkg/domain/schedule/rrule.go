package schedule

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RFC 5545 recurrence rules. ParseRRule reads the text; rrule is the
// schedule. The rule denotes a set of wall readings in the job's zone, as a
// cron expression does, and the same zone walk (zoned) turns them into
// instants with the same DST policies. DESIGN.md explains the expansion.

// Limits on a rule, each with its reason.
const (
	// MaxRRuleCount bounds COUNT: the COUNT-th reading is found when the
	// rule is parsed (so Next never counts from DTSTART), and parsing must
	// stay cheap because the prefetcher parses every job it loads.
	MaxRRuleCount = 10000
	// MaxRRuleInterval bounds INTERVAL: Next walks candidate days one
	// month at a time, and a longer stride is better said with a larger
	// FREQ.
	MaxRRuleInterval = 1000
	// MaxRRuleDates bounds EXDATE and RDATE values together: they are
	// kept in the job's row and parsed on every load.
	MaxRRuleDates = 1000
	// MaxRRuleLen bounds the text.
	MaxRRuleLen = 64 << 10
)

// FieldRRule is the ParseError.Field of every error ParseRRule returns.
const FieldRRule = "rrule"

type rfreq int

const (
	freqHourly rfreq = iota
	freqDaily
	freqWeekly
	freqMonthly
	freqYearly
)

var freqNames = []string{"HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY"}

// RFC 5545 weekday codes, indexed by our weekday numbering (Sunday = 0).
var rfcDays = []string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}

// nthDay is one ordinal BYDAY item such as 2TU (n=2, wd=2) or -1FR.
type nthDay struct {
	n, wd int
}

// rrule is a parsed recurrence rule with its EXDATE and RDATE values.
//
// Every BY rule is kept as a bitset, as cron's fields are. Day rules are
// filters on each calendar day (a day passes when it passes every rule
// given); ordinal weekdays count within the day's month (MONTHLY, or YEARLY
// with BYMONTH) or year (YEARLY). Periods (the year, month, week, day or
// hour of FREQ) matter only for INTERVAL, which keeps every INTERVAL-th
// period counted from DTSTART's, and for BYSETPOS, which picks positions
// among one period's readings.
type rrule struct {
	freq     rfreq
	interval int64
	count    int
	wkst     int // Sunday = 0

	months          uint16 // bits 1-12; 0: no BYMONTH
	monthdays       uint32 // bit n: day n
	nmonthdays      uint32 // bit n: day -n
	yeardays        [6]uint64
	nyeardays       [6]uint64
	weeknos         uint64 // bit n: week n
	nweeknos        uint64 // bit n: week -n
	weekdays        uint8  // plain BYDAY
	nth             []nthDay
	hasMonthdays    bool
	hasYeardays     bool
	hasWeeknos      bool
	hasWeekdays     bool // plain or ordinal
	nthInYear       bool // ordinals count within the year, not the month
	hours           uint32
	minutes         uint64
	seconds         uint64
	nTimes, nMinSec int
	setpos          []int

	// Wall seconds: DTSTART, and the last reading the rule may produce
	// (UNTIL in local time, or the COUNT-th reading); math.MaxInt64 when
	// unbounded.
	dtstart  int64
	lastWall int64
	// untilInst is UNTIL given in UTC, an instant bound on the rule's
	// firings (not on RDATEs); math.MaxInt64 when unset.
	untilInst int64

	// Period origins, from DTSTART.
	y0, m0 int
	d0     int64 // day number of DTSTART
	hour0  int64 // hour number of DTSTART (day*24 + hour)
	week0  int64 // day number of the first day (WKST) of DTSTART's week

	exWall, rdWall []int64 // wall seconds, sorted, unique
	exInst, rdInst []int64 // Unix seconds, sorted, unique

	zoned
	b     bounds
	opts  Options
	start time.Time // DTSTART as given
	text  string    // canonical form
	rule  string    // the canonical RRULE line
	parts map[string]string
}

// ParseRRule parses an RFC 5545 recurrence: an RRULE line, optionally
// followed by EXDATE and RDATE lines, separated by newlines or any
// whitespace, e.g.
//
//	RRULE:FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0
//	EXDATE:20261208T090000
//
// The "RRULE:" prefix may be left out. dtstart is the rule's DTSTART, the
// first reading it counts from: its wall reading in opts.Location gives the
// defaults (the hour, minute, second, and the day for rules that name
// none), the origin of INTERVAL and the start of COUNT. Sundial passes the
// job's start_time, or its creation time. dtstart is truncated to the
// second.
//
// Supported: FREQ=HOURLY..YEARLY, INTERVAL, COUNT, UNTIL, BYMONTH, BYWEEKNO
// (YEARLY only), BYYEARDAY, BYMONTHDAY, BYDAY with ordinals (MONTHLY and
// YEARLY), BYHOUR, BYMINUTE, BYSECOND, BYSETPOS and WKST. FREQ=SECONDLY and
// MINUTELY are refused: see the package documentation. Dates in EXDATE,
// RDATE and UNTIL are local wall readings in opts.Location
// (YYYYMMDDTHHMMSS), or instants in UTC with a trailing Z; UNTIL may also be
// a date (YYYYMMDD), which includes that whole day.
//
// A rule that never fires is an error. Every error is a *ParseError with
// Field "rrule".
func ParseRRule(text string, dtstart time.Time, opts Options) (Schedule, error) {
	if len(text) > MaxRRuleLen {
		return nil, rruleErr("", "is %d bytes, at most %d allowed", len(text), MaxRRuleLen)
	}
	loc := location(opts)
	dtstart = dtstart.Round(0).Truncate(time.Second)
	if dtstart.IsZero() {
		return nil, rruleErr("", "needs a DTSTART (the schedule's start_time or the job's creation time)")
	}
	if y := dtstart.In(loc).Year(); y < 1 || y > 9999 {
		return nil, rruleErr("", "DTSTART %s is outside the years 1-9999", dtstart.Format(time.RFC3339))
	}
	r := &rrule{interval: 1, wkst: 1, lastWall: math.MaxInt64, untilInst: math.MaxInt64, opts: opts, start: dtstart}
	r.dtstart = wallSeconds(dtstart.In(loc))
	var ruleLine string
	var exLines, rdLines []string
	for _, line := range strings.Fields(text) {
		name, value, hasColon := strings.Cut(line, ":")
		uname := strings.ToUpper(name)
		switch {
		case !hasColon && strings.Contains(line, "="), uname == "RRULE":
			if !hasColon {
				value = line
			}
			if ruleLine != "" {
				return nil, rruleErr(line, "has more than one RRULE; one rule per schedule")
			}
			if value == "" {
				return nil, rruleErr(line, "RRULE is empty")
			}
			ruleLine = value
		case uname == "EXDATE":
			exLines = append(exLines, value)
		case uname == "RDATE":
			rdLines = append(rdLines, value)
		case strings.HasPrefix(uname, "EXDATE;"), strings.HasPrefix(uname, "RDATE;"):
			return nil, rruleErr(line, "%s: parameters (TZID, VALUE) are not supported; dates are in the schedule's timezone, or UTC with a trailing Z", name)
		case uname == "DTSTART" || strings.HasPrefix(uname, "DTSTART;"):
			return nil, rruleErr(line, "DTSTART is not part of the rule: it is the schedule's start_time (or the job's creation time)")
		default:
			return nil, rruleErr(line, "%q is not an RRULE, EXDATE or RDATE line", line)
		}
	}
	if ruleLine == "" {
		return nil, rruleErr("", "needs an RRULE line, e.g. FREQ=WEEKLY;BYDAY=MO")
	}
	if err := r.parseRule(ruleLine); err != nil {
		return nil, err
	}
	var err error
	if r.exWall, r.exInst, err = parseDates("EXDATE", exLines); err != nil {
		return nil, err
	}
	if r.rdWall, r.rdInst, err = parseDates("RDATE", rdLines); err != nil {
		return nil, err
	}
	if n := len(r.exWall) + len(r.exInst) + len(r.rdWall) + len(r.rdInst); n > MaxRRuleDates {
		return nil, rruleErr("", "has %d EXDATE and RDATE values, at most %d allowed", n, MaxRRuleDates)
	}
	r.b = newBounds(opts)
	r.zoned = newZoned(loc, opts.Gap, opts.Repeat, r.everyHour())
	r.text = r.canonical(exLines, rdLines)

	if r.count > 0 {
		// The COUNT-th reading becomes the rule's last: Next then never
		// needs to count from DTSTART.
		w, n, last := r.dtstart, 0, int64(math.MinInt64)
		for n < r.count {
			x, ok := r.ruleNext(w, math.MaxInt64)
			if !ok {
				break
			}
			last, w, n = x, x+1, n+1
		}
		r.lastWall = last
	}
	if _, ok := r.ruleNext(r.dtstart, math.MaxInt64); !ok && len(r.rdWall)+len(r.rdInst) == 0 {
		e := rruleErr(ruleLine, "never fires: no date matches every BY rule (from DTSTART %s)", wallString(r.dtstart))
		e.err = ErrNeverFires
		return nil, e
	}
	if r.Next(dtstart.Add(-time.Second)).IsZero() {
		e := rruleErr(ruleLine, "never fires from DTSTART %s within the schedule's bounds", dtstart.In(loc).Format(time.RFC3339))
		e.err = ErrNeverFires
		return nil, e
	}
	return r, nil
}

func rruleErr(token, format string, args ...any) *ParseError {
	return &ParseError{Field: FieldRRule, Token: token, Reason: fmt.Sprintf(format, args...)}
}

// everyHour reports whether the rule has readings in every hour of every
// day it fires on, the rule that makes cron follow real elapsed time
// through transitions whatever the policies.
func (r *rrule) everyHour() bool {
	if r.hours != allHours {
		return false
	}
	return r.freq != freqHourly || r.interval == 1
}

// parseRule reads "FREQ=...;..." into r.
func (r *rrule) parseRule(s string) error {
	seen := map[string]bool{}
	r.parts = map[string]string{}
	var freqSet bool
	var until string
	hasBY := false
	for _, part := range strings.Split(s, ";") {
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.ToUpper(k)
		v = strings.ToUpper(v)
		if !ok || v == "" {
			return rruleErr(part, "%q is not NAME=VALUE", part)
		}
		if seen[k] {
			return rruleErr(part, "%s is given twice", k)
		}
		seen[k] = true
		r.parts[k] = v
		var err error
		switch k {
		case "FREQ":
			switch v {
			case "SECONDLY", "MINUTELY":
				return rruleErr(part, "FREQ=%s is not supported: write a cron expression (with seconds if needed) or an interval for schedules finer than an hour", v)
			}
			i := slices.Index(freqNames, v)
			if i < 0 {
				return rruleErr(part, "FREQ=%s is not one of HOURLY, DAILY, WEEKLY, MONTHLY, YEARLY", v)
			}
			r.freq, freqSet = rfreq(i), true
		case "INTERVAL":
			var n int
			n, err = atoiIn(k, v, 1, MaxRRuleInterval)
			r.interval = int64(n)
		case "COUNT":
			r.count, err = atoiIn(k, v, 1, MaxRRuleCount)
		case "UNTIL":
			until = v
		case "WKST":
			r.wkst = slices.Index(rfcDays, v)
			if r.wkst < 0 {
				return rruleErr(part, "WKST=%s is not a weekday (SU, MO, TU, WE, TH, FR, SA)", v)
			}
		case "BYSECOND":
			r.seconds, err = bitsIn(k, v, 0, 59)
		case "BYMINUTE":
			r.minutes, err = bitsIn(k, v, 0, 59)
		case "BYHOUR":
			var b uint64
			b, err = bitsIn(k, v, 0, 23)
			r.hours = uint32(b)
		case "BYMONTH":
			var b uint64
			b, err = bitsIn(k, v, 1, 12)
			r.months = uint16(b)
			hasBY = true
		case "BYMONTHDAY":
			var p, n []uint64
			p, n, err = signedBitsIn(k, v, 31, 1)
			r.monthdays, r.nmonthdays, r.hasMonthdays = uint32(p[0]), uint32(n[0]), true
			hasBY = true
		case "BYYEARDAY":
			var p, n []uint64
			p, n, err = signedBitsIn(k, v, 366, 6)
			if err == nil {
				copy(r.yeardays[:], p)
				copy(r.nyeardays[:], n)
			}
			r.hasYeardays = true
			hasBY = true
		case "BYWEEKNO":
			var p, n []uint64
			p, n, err = signedBitsIn(k, v, 53, 1)
			r.weeknos, r.nweeknos, r.hasWeeknos = p[0], n[0], true
			hasBY = true
		case "BYDAY":
			err = r.parseByDay(v)
			r.hasWeekdays = true
			hasBY = true
		case "BYSETPOS":
			for _, item := range strings.Split(v, ",") {
				n, e := strconv.Atoi(item)
				if e != nil || n == 0 || n < -366 || n > 366 {
					return rruleErr(part, "BYSETPOS: %q must be a whole number from -366 to 366, not 0", item)
				}
				if !slices.Contains(r.setpos, n) {
					r.setpos = append(r.setpos, n)
				}
			}
		case "BYEASTER":
			return rruleErr(part, "BYEASTER is not supported")
		default:
			return rruleErr(part, "%s is not an RRULE part", k)
		}
		if err != nil {
			return err
		}
	}
	if !freqSet {
		return rruleErr(s, "FREQ is required (HOURLY, DAILY, WEEKLY, MONTHLY or YEARLY)")
	}
	hasBY = hasBY || seen["BYHOUR"] || seen["BYMINUTE"] || seen["BYSECOND"]
	switch {
	case len(r.setpos) > 0 && !hasBY:
		return rruleErr(s, "BYSETPOS needs another BY rule")
	case r.count > 0 && until != "":
		return rruleErr(s, "COUNT and UNTIL cannot both be given")
	case r.hasWeeknos && r.freq != freqYearly:
		return rruleErr(s, "BYWEEKNO is only allowed with FREQ=YEARLY")
	case len(r.nth) > 0 && r.freq != freqMonthly && r.freq != freqYearly:
		return rruleErr(s, "BYDAY with an ordinal (such as 2TU) is only allowed with FREQ=MONTHLY or YEARLY")
	case len(r.nth) > 0 && r.hasWeeknos:
		return rruleErr(s, "BYDAY with an ordinal cannot be combined with BYWEEKNO")
	}
	for _, d := range r.nth {
		if r.freq == freqMonthly || r.months != 0 {
			if d.n > 5 || d.n < -5 {
				return rruleErr(s, "BYDAY: %d%s is out of range: a month has at most 5 of a weekday", d.n, rfcDays[d.wd])
			}
		}
	}
	r.nthInYear = r.freq == freqYearly && r.months == 0

	// Defaults from DTSTART, as RFC 5545 and every implementation fill them.
	days := floorDiv(r.dtstart, secPerDay)
	sod := int(r.dtstart - days*secPerDay)
	y, m, d := civilFromDays(days)
	if r.hours == 0 {
		if r.freq == freqHourly {
			r.hours = allHours
		} else {
			r.hours = 1 << uint(sod/3600)
		}
	}
	if r.minutes == 0 {
		r.minutes = 1 << uint(sod/60%60)
	}
	if r.seconds == 0 {
		r.seconds = 1 << uint(sod%60)
	}
	if !r.hasWeeknos && !r.hasYeardays && !r.hasMonthdays && !r.hasWeekdays {
		switch r.freq {
		case freqYearly:
			if r.months == 0 {
				r.months = 1 << uint(m)
			}
			r.monthdays, r.hasMonthdays = 1<<uint(d), true
		case freqMonthly:
			r.monthdays, r.hasMonthdays = 1<<uint(d), true
		case freqWeekly:
			r.weekdays, r.hasWeekdays = 1<<uint(weekday(days)), true
		}
	}
	r.nMinSec = bits.OnesCount64(r.minutes) * bits.OnesCount64(r.seconds)
	r.nTimes = bits.OnesCount32(r.hours) * r.nMinSec

	r.y0, r.m0, r.d0 = y, m, days
	r.hour0 = days*24 + int64(sod/3600)
	r.week0 = days - int64((weekday(days)-r.wkst+7)%7)

	if until != "" {
		w, inst, isInst, dateOnly, ok := parseDate(until)
		switch {
		case !ok:
			return rruleErr("UNTIL="+until, "UNTIL=%s is not YYYYMMDD, YYYYMMDDTHHMMSS or YYYYMMDDTHHMMSSZ", until)
		case isInst:
			r.untilInst = inst
		case dateOnly:
			r.lastWall = w + secPerDay - 1
		default:
			r.lastWall = w
		}
	}
	return nil
}

func (r *rrule) parseByDay(v string) error {
	for _, item := range strings.Split(v, ",") {
		if len(item) < 2 {
			return rruleErr(item, "BYDAY: %q is not a weekday such as MO, 2TU or -1FR", item)
		}
		wd := slices.Index(rfcDays, item[len(item)-2:])
		if wd < 0 {
			return rruleErr(item, "BYDAY: %q is not a weekday such as MO, 2TU or -1FR", item)
		}
		num := item[:len(item)-2]
		if num == "" {
			r.weekdays |= 1 << uint(wd)
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || n == 0 || n < -53 || n > 53 {
			return rruleErr(item, "BYDAY: %q: the ordinal must be 1 to 53 or -1 to -53", item)
		}
		if !slices.Contains(r.nth, nthDay{n, wd}) {
			r.nth = append(r.nth, nthDay{n, wd})
		}
	}
	return nil
}

func atoiIn(name, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, rruleErr(name+"="+v, "%s=%s must be a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// bitsIn reads a list of numbers lo..hi into a bitset.
func bitsIn(name, v string, lo, hi int) (uint64, error) {
	var b uint64
	for _, item := range strings.Split(v, ",") {
		n, err := strconv.Atoi(item)
		if err != nil || n < lo || n > hi {
			return 0, rruleErr(name+"="+v, "%s: %q must be a whole number from %d to %d", name, item, lo, hi)
		}
		b |= 1 << uint(n)
	}
	return b, nil
}

// signedBitsIn reads a list of numbers 1..max and -max..-1 into two
// bitsets of `words` words (bit n: n, and bit n: -n).
func signedBitsIn(name, v string, hi, words int) (pos, neg []uint64, err error) {
	pos, neg = make([]uint64, words), make([]uint64, words)
	for _, item := range strings.Split(v, ",") {
		n, e := strconv.Atoi(item)
		if e != nil || n == 0 || n < -hi || n > hi {
			return pos, neg, rruleErr(name+"="+v, "%s: %q must be a whole number from 1 to %d or -%d to -1", name, item, hi, hi)
		}
		if n > 0 {
			pos[n/64] |= 1 << uint(n%64)
		} else {
			neg[-n/64] |= 1 << uint(-n%64)
		}
	}
	return pos, neg, nil
}

// parseDates reads EXDATE or RDATE values: comma-separated lists of local
// date-times (wall seconds) and UTC instants (Unix seconds).
func parseDates(name string, lines []string) (walls, insts []int64, err error) {
	for _, line := range lines {
		for _, v := range strings.Split(line, ",") {
			w, inst, isInst, dateOnly, ok := parseDate(strings.ToUpper(v))
			if !ok || dateOnly {
				return nil, nil, rruleErr(v, "%s: %q is not YYYYMMDDTHHMMSS (local) or YYYYMMDDTHHMMSSZ (UTC)", name, v)
			}
			if isInst {
				insts = append(insts, inst)
			} else {
				walls = append(walls, w)
			}
		}
	}
	slices.Sort(walls)
	slices.Sort(insts)
	return slices.Compact(walls), slices.Compact(insts), nil
}

// parseDate reads YYYYMMDD, YYYYMMDDTHHMMSS or YYYYMMDDTHHMMSSZ. A local
// value is returned as wall seconds, a UTC one as Unix seconds (which are
// the wall seconds of UTC).
func parseDate(v string) (w, inst int64, isInst, dateOnly, ok bool) {
	digits := func(s string) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	if len(v) != 8 && len(v) != 15 && len(v) != 16 {
		return 0, 0, false, false, false
	}
	y, ok1 := digits(v[0:4])
	mo, ok2 := digits(v[4:6])
	d, ok3 := digits(v[6:8])
	if !ok1 || !ok2 || !ok3 || y < 1 || mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) {
		return 0, 0, false, false, false
	}
	w = daysFromCivil(y, mo, d) * secPerDay
	if len(v) == 8 {
		return w, 0, false, true, true
	}
	if v[8] != 'T' || (len(v) == 16 && v[15] != 'Z') {
		return 0, 0, false, false, false
	}
	h, ok1 := digits(v[9:11])
	mi, ok2 := digits(v[11:13])
	s, ok3 := digits(v[13:15])
	if !ok1 || !ok2 || !ok3 || h > 23 || mi > 59 || s > 59 {
		return 0, 0, false, false, false
	}
	w += int64(h*3600 + mi*60 + s)
	if len(v) == 16 {
		return 0, w, true, false, true
	}
	return w, 0, false, false, true
}

// wallSeconds is the wall reading of t (in t's location) as wall seconds.
func wallSeconds(t time.Time) int64 {
	y, m, d := t.Date()
	h, mi, s := t.Clock()
	return daysFromCivil(y, int(m), d)*secPerDay + int64(h*3600+mi*60+s)
}

// wallString formats wall seconds as RFC 5545's local date-time.
func wallString(w int64) string {
	days := floorDiv(w, secPerDay)
	sod := w - days*secPerDay
	y, m, d := civilFromDays(days)
	return fmt.Sprintf("%04d%02d%02dT%02d%02d%02d", y, m, d, sod/3600, sod/60%60, sod%60)
}

// Next returns the first firing strictly after `after`: the least of the
// rule's firings (bounded by UNTIL), the firings of local RDATEs and the
// UTC RDATEs, leaving out UTC EXDATEs. Local EXDATEs were already left out
// of the readings.
func (r *rrule) Next(after time.Time) time.Time {
	after = r.b.from(after)
	u := after.Unix() + 1
	if u < minUnix {
		u = minUnix
	}
	limit := int64(maxUnix) + 1
	if !r.b.end.IsZero() {
		if e := r.b.end.Unix() + 1; e < limit {
			limit = e
		}
	}
	best := int64(math.MaxInt64)
	ruleLimit := limit
	if r.untilInst != math.MaxInt64 && r.untilInst+1 < ruleLimit {
		ruleLimit = r.untilInst + 1
	}
	// No reading precedes DTSTART's, so no firing of the rule is earlier
	// than DTSTART by more than a zone's offset can move it: start the
	// zone walk there rather than period by period from long before.
	for from := max(u, r.start.Unix()-2*secPerDay); from < ruleLimit; {
		t, ok := r.next(ruleSet{r}, from, ruleLimit)
		if !ok {
			break
		}
		if !containsSorted(r.exInst, t) {
			best = t
			break
		}
		from = t + 1
	}
	if len(r.rdWall) > 0 {
		for from := u; from < min(limit, best); {
			t, ok := r.next(rdateSet{r}, from, min(limit, best))
			if !ok {
				break
			}
			if !containsSorted(r.exInst, t) {
				best = t
				break
			}
			from = t + 1
		}
	}
	i, _ := slices.BinarySearch(r.rdInst, u)
	for ; i < len(r.rdInst) && r.rdInst[i] < min(limit, best); i++ {
		if !containsSorted(r.exInst, r.rdInst[i]) {
			best = r.rdInst[i]
			break
		}
	}
	if best == math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(best, 0).In(r.loc)
}

func containsSorted(s []int64, v int64) bool {
	_, ok := slices.BinarySearch(s, v)
	return ok
}

// ruleSet is the rule's readings less the local EXDATEs; rdateSet is the
// local RDATEs less the local EXDATEs. They are walked separately because
// a UTC UNTIL bounds only the rule.
type ruleSet struct{ r *rrule }
type rdateSet struct{ r *rrule }

func (s ruleSet) nextWall(lo, hi int64) (int64, bool) {
	for {
		w, ok := s.r.ruleNext(lo, hi)
		if !ok || !containsSorted(s.r.exWall, w) {
			return w, ok
		}
		lo = w + 1
	}
}

func (s rdateSet) nextWall(lo, hi int64) (int64, bool) {
	i, _ := slices.BinarySearch(s.r.rdWall, lo)
	for ; i < len(s.r.rdWall) && s.r.rdWall[i] < hi; i++ {
		if !containsSorted(s.r.exWall, s.r.rdWall[i]) {
			return s.r.rdWall[i], true
		}
	}
	return 0, false
}

// maxWall is the last wall second of the year 9999.
var maxWall = daysFromCivil(10000, 1, 1)*secPerDay - 1

// ruleNext returns the least reading w of the rule with lo <= w < hi
// (before EXDATEs). Readings before DTSTART and after the last one (UNTIL
// or COUNT) do not exist.
func (r *rrule) ruleNext(lo, hi int64) (int64, bool) {
	lo = max(lo, r.dtstart)
	if r.lastWall != math.MaxInt64 {
		hi = min(hi, r.lastWall+1)
	}
	hi = min(hi, maxWall+1)
	if lo >= hi {
		return 0, false
	}
	if len(r.setpos) > 0 {
		return r.nextWithSetpos(lo, hi)
	}
	day := floorDiv(lo, secPerDay)
	tod := int(lo - day*secPerDay)
	for {
		d, ok := r.nextDay(day, hi)
		if !ok {
			return 0, false
		}
		if d != day {
			tod = 0
		}
		if t, ok := nextTimeOfDay(r.dayHours(d), r.minutes, r.seconds, tod/3600, tod/60%60, tod%60); ok {
			if w := d*secPerDay + int64(t); w < hi {
				return w, true
			}
			return 0, false
		}
		day, tod = d+1, 0
	}
}

// dayHours is the hours of day d that can hold readings: BYHOUR (or
// DTSTART's hour), and for HOURLY only every INTERVAL-th hour from DTSTART's.
func (r *rrule) dayHours(d int64) uint32 {
	if r.freq != freqHourly || r.interval == 1 {
		return r.hours
	}
	base := d*24 - r.hour0
	var aligned uint32
	for h := (r.interval - base%r.interval) % r.interval; h < 24; h += r.interval {
		aligned |= 1 << uint(h)
	}
	return r.hours & aligned
}

// nextDay returns the first day number d >= day that passes the day rules
// and lies in a period INTERVAL keeps, with d's midnight before hi (wall
// seconds). It walks one month at a time.
func (r *rrule) nextDay(day int64, hi int64) (int64, bool) {
	y, m, dd := civilFromDays(day)
	for y <= 9999 {
		ms := daysFromCivil(y, m, 1)
		if ms*secPerDay >= hi {
			return 0, false
		}
		// Months BYMONTH leaves out, years and months INTERVAL leaves
		// out: jump without looking at days.
		if r.months != 0 && r.months&(1<<uint(m)) == 0 {
			next := nextSet16(r.months, m+1)
			if next > 12 {
				y, m = y+1, nextSet16(r.months, 1)
			} else {
				m = next
			}
			dd = 1
			continue
		}
		if r.interval > 1 {
			switch r.freq {
			case freqYearly:
				if k := floorMod(int64(y-r.y0), r.interval); k != 0 {
					y, m, dd = y+int(r.interval-k), 1, 1
					continue
				}
			case freqMonthly:
				idx := int64(y*12+m-1) - int64(r.y0*12+r.m0-1)
				if k := floorMod(idx, r.interval); k != 0 {
					n := int64(y*12+m-1) + r.interval - k
					y, m, dd = int(floorDiv(n, 12)), int(floorMod(n, 12))+1, 1
					continue
				}
			}
		}
		mask := r.dayMask(y, m, ms) & r.alignMask(y, m, ms)
		mask &^= uint32(1)<<uint(dd) - 1
		if mask != 0 {
			return ms + int64(bits.TrailingZeros32(mask)) - 1, true
		}
		m, dd = m+1, 1
		if m > 12 {
			y, m = y+1, 1
		}
	}
	return 0, false
}

// alignMask is the days of month y-m in weeks or days INTERVAL keeps
// (WEEKLY and DAILY); every day otherwise (years and months are aligned by
// nextDay, hours by dayHours).
func (r *rrule) alignMask(y, m int, ms int64) uint32 {
	dim := daysIn(y, m)
	full := uint32(1)<<uint(dim+1) - 2
	if r.interval == 1 {
		return full
	}
	var mask uint32
	switch r.freq {
	case freqDaily:
		for d := floorMod(r.d0-ms, r.interval); d < int64(dim); d += r.interval {
			mask |= 1 << uint(d+1)
		}
	case freqWeekly:
		stride := 7 * r.interval
		for blk := r.week0 + floorDiv(ms-r.week0, stride)*stride; blk < ms+int64(dim); blk += stride {
			for d := max(blk, ms); d < blk+7 && d < ms+int64(dim); d++ {
				mask |= 1 << uint(d-ms+1)
			}
		}
	default:
		return full
	}
	return mask
}

// dayMask returns the days of month y-m (bit d for day d) that pass every
// day rule given. ms is the day number of the 1st.
func (r *rrule) dayMask(y, m int, ms int64) uint32 {
	dim := daysIn(y, m)
	full := uint32(1)<<uint(dim+1) - 2
	mask := full
	if r.hasMonthdays {
		md := r.monthdays & full
		for b := r.nmonthdays; b != 0; b &= b - 1 {
			if d := dim + 1 - bits.TrailingZeros32(b); d >= 1 {
				md |= 1 << uint(d)
			}
		}
		mask &= md
	}
	if mask == 0 {
		return 0
	}
	wd1 := weekday(ms)
	if r.hasWeekdays {
		rot := uint64(r.weekdays)
		rot = (rot>>uint(wd1) | rot<<uint(7-wd1)) & 0x7f
		rot |= rot<<7 | rot<<14 | rot<<21 | rot<<28
		wdm := uint32(rot<<1) & full
		if len(r.nth) > 0 {
			wdm |= r.nthMask(y, m, ms, dim, wd1)
		}
		mask &= wdm
	}
	if mask == 0 || (!r.hasYeardays && !r.hasWeeknos) {
		return mask
	}
	jan1 := daysFromCivil(y, 1, 1)
	ylen := int(daysFromCivil(y+1, 1, 1) - jan1)
	for b := mask; b != 0; b &= b - 1 {
		d := bits.TrailingZeros32(b)
		day := ms + int64(d) - 1
		if r.hasYeardays {
			yd := int(day-jan1) + 1
			nyd := ylen + 1 - yd
			if r.yeardays[yd/64]&(1<<uint(yd%64)) == 0 && r.nyeardays[nyd/64]&(1<<uint(nyd%64)) == 0 {
				mask &^= 1 << uint(d)
				continue
			}
		}
		if r.hasWeeknos && !r.weekMatches(day, y) {
			mask &^= 1 << uint(d)
		}
	}
	return mask
}

// nthMask is the days of month y-m that an ordinal BYDAY names, counting
// within the month or, for YEARLY without BYMONTH, within the year.
func (r *rrule) nthMask(y, m int, ms int64, dim, wd1 int) uint32 {
	var mask uint32
	if !r.nthInYear {
		lastWd := (wd1 + dim - 1) % 7
		for _, x := range r.nth {
			var d int
			if x.n > 0 {
				d = 1 + (x.wd-wd1+7)%7 + 7*(x.n-1)
			} else {
				d = dim - (lastWd-x.wd+7)%7 - 7*(-x.n-1)
			}
			if d >= 1 && d <= dim {
				mask |= 1 << uint(d)
			}
		}
		return mask
	}
	jan1 := daysFromCivil(y, 1, 1)
	dec31 := daysFromCivil(y+1, 1, 1) - 1
	for _, x := range r.nth {
		var day int64
		if x.n > 0 {
			day = jan1 + int64((x.wd-weekday(jan1)+7)%7+7*(x.n-1))
		} else {
			day = dec31 - int64((weekday(dec31)-x.wd+7)%7+7*(-x.n-1))
		}
		if day >= ms && day < ms+int64(dim) && day >= jan1 && day <= dec31 {
			mask |= 1 << uint(day-ms+1)
		}
	}
	return mask
}

// weekMatches reports whether day (in calendar year y) is in a week BYWEEKNO
// names. Weeks start on WKST; week 1 of a year is the first with at least
// four of its days in that year (so it holds January 4th), and a day at
// either end of the year may belong to a week of the neighbouring year.
func (r *rrule) weekMatches(day int64, y int) bool {
	wy := y
	w1 := r.weekOne(y)
	if day < w1 {
		wy--
		w1 = r.weekOne(wy)
	} else if next := r.weekOne(y + 1); day >= next {
		wy++
		w1 = next
	}
	n := int((day-w1)/7) + 1
	weeks := int((r.weekOne(wy+1) - w1) / 7)
	return r.weeknos&(1<<uint(n)) != 0 || r.nweeknos&(1<<uint(weeks+1-n)) != 0
}

// weekOne is the day number of the first day of week 1 of year y.
func (r *rrule) weekOne(y int) int64 {
	jan4 := daysFromCivil(y, 1, 4)
	return jan4 - int64((weekday(jan4)-r.wkst+7)%7)
}

// nextWithSetpos is ruleNext for rules with BYSETPOS: readings are chosen
// per period, so the whole period of the first candidate day is expanded
// (as positions, not as a list: the k-th reading of a period is its
// (k / readings-per-day)-th day at the (k % readings-per-day)-th time).
func (r *rrule) nextWithSetpos(lo, hi int64) (int64, bool) {
	day := floorDiv(lo, secPerDay)
	var buf [372]int64
	for {
		d, ok := r.nextDay(day, hi)
		if !ok {
			return 0, false
		}
		best := int64(math.MaxInt64)
		if r.freq == freqHourly {
			hours := r.dayHours(d)
			for b := hours; b != 0; b &= b - 1 {
				h := bits.TrailingZeros32(b)
				start := d*secPerDay + int64(h)*3600
				if start+3599 < lo {
					continue
				}
				for _, p := range r.setpos {
					k := p - 1
					if p < 0 {
						k = r.nMinSec + p
					}
					if k < 0 || k >= r.nMinSec {
						continue
					}
					ns := bits.OnesCount64(r.seconds)
					w := start + int64(selectBit64(r.minutes, k/ns)*60+selectBit64(r.seconds, k%ns))
					if w >= lo && w < best {
						best = w
					}
				}
				if best != math.MaxInt64 {
					break
				}
			}
			if best != math.MaxInt64 && best < hi {
				return best, true
			} else if best != math.MaxInt64 {
				return 0, false
			}
			day = d + 1
			continue
		}
		ps, pe := r.period(d)
		days := r.collectDays(ps, pe, buf[:0])
		n := len(days) * r.nTimes
		for _, p := range r.setpos {
			k := p - 1
			if p < 0 {
				k = n + p
			}
			if k < 0 || k >= n {
				continue
			}
			w := days[k/r.nTimes]*secPerDay + int64(r.timeAt(k%r.nTimes))
			if w >= lo && w < best {
				best = w
			}
		}
		if best != math.MaxInt64 {
			if best < hi {
				return best, true
			}
			return 0, false
		}
		day = pe
	}
}

// collectDays appends the candidate days of the period [ps, pe) to buf.
func (r *rrule) collectDays(ps, pe int64, buf []int64) []int64 {
	y, m, _ := civilFromDays(ps)
	for ms := daysFromCivil(y, m, 1); ms < pe; {
		if r.months == 0 || r.months&(1<<uint(m)) != 0 {
			mask := r.dayMask(y, m, ms) & r.alignMask(y, m, ms)
			for b := mask; b != 0; b &= b - 1 {
				if d := ms + int64(bits.TrailingZeros32(b)) - 1; d >= ps && d < pe {
					buf = append(buf, d)
				}
			}
		}
		ms += int64(daysIn(y, m))
		if m++; m > 12 {
			y, m = y+1, 1
		}
	}
	return buf
}

// period returns the days [start, end) of the period (FREQ's year, month,
// week or day) holding day d.
func (r *rrule) period(d int64) (int64, int64) {
	switch r.freq {
	case freqYearly:
		y, _, _ := civilFromDays(d)
		return daysFromCivil(y, 1, 1), daysFromCivil(y+1, 1, 1)
	case freqMonthly:
		y, m, _ := civilFromDays(d)
		if m == 12 {
			return daysFromCivil(y, 12, 1), daysFromCivil(y+1, 1, 1)
		}
		return daysFromCivil(y, m, 1), daysFromCivil(y, m+1, 1)
	case freqWeekly:
		ws := r.week0 + floorDiv(d-r.week0, 7)*7
		return ws, ws + 7
	}
	return d, d + 1
}

// timeAt returns the k-th time of day (seconds since midnight) of the
// timeset, in order.
func (r *rrule) timeAt(k int) int {
	h := selectBit32(r.hours, k/r.nMinSec)
	k %= r.nMinSec
	ns := bits.OnesCount64(r.seconds)
	return h*3600 + selectBit64(r.minutes, k/ns)*60 + selectBit64(r.seconds, k%ns)
}

// selectBit64 returns the position of the k-th set bit of b (k from 0).
func selectBit64(b uint64, k int) int {
	for ; k > 0; k-- {
		b &= b - 1
	}
	return bits.TrailingZeros64(b)
}

func selectBit32(b uint32, k int) int {
	for ; k > 0; k-- {
		b &= b - 1
	}
	return bits.TrailingZeros32(b)
}

func floorMod(a, b int64) int64 {
	return a - floorDiv(a, b)*b
}

// String returns the canonical text: the RRULE line with its parts in a
// fixed order, then EXDATE and RDATE lines, separated by newlines.
// ParseRRule reads it back (with the same DTSTART).
func (r *rrule) String() string { return r.text }

func (r *rrule) canonical(exLines, rdLines []string) string {
	var parts []string
	for _, k := range partOrder {
		if v, ok := r.parts[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	r.rule = strings.Join(parts, ";")
	lines := []string{"RRULE:" + r.rule}
	if len(exLines) > 0 {
		lines = append(lines, "EXDATE:"+strings.ToUpper(strings.Join(exLines, ",")))
	}
	if len(rdLines) > 0 {
		lines = append(lines, "RDATE:"+strings.ToUpper(strings.Join(rdLines, ",")))
	}
	return strings.Join(lines, "\n")
}

// partOrder is the order of the parts in the canonical form.
var partOrder = []string{"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYMONTH", "BYWEEKNO", "BYYEARDAY",
	"BYMONTHDAY", "BYDAY", "BYHOUR", "BYMINUTE", "BYSECOND", "BYSETPOS", "WKST"}

// Describe returns the rule, its DTSTART and the zone.
func (r *rrule) Describe() string {
	s := "by rule " + r.rule + " from " + r.start.In(r.loc).Format(time.RFC3339) + " (" + r.loc.String()
	if !r.everyHour() && !r.fixed && (r.opts.Gap != GapShift || r.opts.Repeat != RepeatFirst) {
		s += "; DST gap " + r.opts.Gap.String() + ", repeat " + r.opts.Repeat.String()
	}
	return s + ")" + r.b.describe(r.loc)
}
