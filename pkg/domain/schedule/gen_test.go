package schedule

// A random generator of cron expressions that also builds, by itself, the
// meaning of each expression as plain predicates. The oracle tests compare
// Next against those predicates, so this file must not use the engine's
// parser or matcher: it states what an expression means in the simplest
// way, with loops and the time package.

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// genExpr is a generated expression and its meaning.
type genExpr struct {
	text string
	// value sets, by value; dow is 0-6 with Sunday = 0
	sec, min, hour, month, dom, dow [64]bool
	// a day field is unrestricted ("*", "?" or "*/1")
	domStar, dowStar bool
	// Quartz items, as predicates on a date
	domExtra, dowExtra []func(y int, m time.Month, d int) bool
}

func (g *genExpr) hourly() bool {
	for h := 0; h < 24; h++ {
		if !g.hour[h] {
			return false
		}
	}
	return true
}

// dayMatches applies cron's rule: with both day fields restricted, either
// may match; with one unrestricted, the other decides.
func (g *genExpr) dayMatches(y int, m time.Month, d int) bool {
	wd := int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday())
	domOK := g.dom[d]
	for _, f := range g.domExtra {
		domOK = domOK || f(y, m, d)
	}
	dowOK := g.dow[wd]
	for _, f := range g.dowExtra {
		dowOK = dowOK || f(y, m, d)
	}
	if g.domStar {
		domOK = true
	}
	if g.dowStar {
		dowOK = true
	}
	if g.domStar || g.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// neverFires checks the day and month fields over a whole 400-year
// Gregorian cycle, after which weekdays and leap years repeat.
func (g *genExpr) neverFires() bool {
	for t := time.Date(2000, 1, 1, 12, 0, 0, 0, time.UTC); t.Year() < 2400; t = t.AddDate(0, 0, 1) {
		if g.month[int(t.Month())] && g.dayMatches(t.Year(), t.Month(), t.Day()) {
			return false
		}
	}
	return true
}

func daysInMonth(y int, m time.Month) int { return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day() }

func isWeekday(y int, m time.Month, d int) bool {
	wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()
	return wd != time.Saturday && wd != time.Sunday
}

// genKnobs steers the generator towards the interesting parts of a test.
type genKnobs struct {
	seconds    bool  // write six fields with a random seconds field
	hotHours   []int // hours to favour (those around a DST transition)
	quartz     bool  // use L, W, # items
	plainDays  bool  // mostly "*" in the day and month fields
	robfigSafe bool  // only syntax robfig/cron reads the same way
}

type numField struct {
	lo, hi   int // accepted values (day-of-week: 0-7)
	starHi   int // end of "*" and of "a/n"
	names    []string
	nameBase int
}

var (
	gSec   = numField{lo: 0, hi: 59, starHi: 59}
	gMin   = numField{lo: 0, hi: 59, starHi: 59}
	gHour  = numField{lo: 0, hi: 23, starHi: 23}
	gDom   = numField{lo: 1, hi: 31, starHi: 31}
	gMonth = numField{lo: 1, hi: 12, starHi: 12, names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}, nameBase: 1}
	gDow   = numField{lo: 0, hi: 7, starHi: 6, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}, nameBase: 0}
)

func randCase(r *rand.Rand, s string) string {
	switch r.IntN(3) {
	case 0:
		return strings.ToLower(s)
	case 1:
		return s[:1] + strings.ToLower(s[1:])
	}
	return s
}

// value writes v as a number or, sometimes, a name.
func (f numField) value(r *rand.Rand, v int, k genKnobs) string {
	// Names only for 0-6 in day-of-week: SUN is 0, so writing 7 as SUN
	// would turn "5-7" into the backwards range "5-SUN".
	if f.names != nil && r.IntN(3) == 0 {
		if i := v - f.nameBase; i >= 0 && i < len(f.names) {
			if k.robfigSafe {
				return f.names[i]
			}
			return randCase(r, f.names[i])
		}
	}
	if !k.robfigSafe && r.IntN(10) == 0 && v < 10 {
		return "0" + strconv.Itoa(v) // leading zeros are numbers too
	}
	return strconv.Itoa(v)
}

// item generates one non-star list item and adds its values to set.
func (f numField) item(r *rand.Rand, set *[64]bool, k genKnobs, pick func() int) string {
	add := func(v int) {
		if f.hi == 7 && v == 7 {
			v = 0
		}
		set[v] = true
	}
	hi := f.hi
	if k.robfigSafe && hi == 7 {
		hi = 6 // robfig/cron rejects 7
	}
	switch r.IntN(6) {
	case 0, 1: // a value
		v := pick()
		add(v)
		return f.value(r, v, k)
	case 2: // a range
		a, b := pick(), pick()
		if a > b {
			a, b = b, a
		}
		for v := a; v <= b; v++ {
			add(v)
		}
		return f.value(r, a, k) + "-" + f.value(r, b, k)
	case 3: // */n
		n := 1 + r.IntN(f.starHi-f.lo)
		if n == 1 {
			n = 2
		}
		if f.starHi-f.lo < 2 {
			n = 1
		}
		for v := f.lo; v <= f.starHi; v += n {
			add(v)
		}
		return "*/" + strconv.Itoa(n)
	case 4: // a/n: a through the end of "*"
		a := pick()
		if a > f.starHi {
			a = f.starHi
		}
		n := 1 + r.IntN(max(f.starHi-f.lo, 1))
		for v := a; v <= f.starHi; v += n {
			add(v)
		}
		return f.value(r, a, k) + "/" + strconv.Itoa(n)
	default: // a-b/n
		a, b := f.lo+r.IntN(hi-f.lo+1), f.lo+r.IntN(hi-f.lo+1)
		if a > b {
			a, b = b, a
		}
		n := 1 + r.IntN(max(f.starHi-f.lo, 1))
		for v := a; v <= b; v += n {
			add(v)
		}
		return f.value(r, a, k) + "-" + f.value(r, b, k) + "/" + strconv.Itoa(n)
	}
}

// field generates a whole field: "*" or a list of one to three items.
// starWeight is the chance in percent of "*".
func (f numField) field(r *rand.Rand, set *[64]bool, k genKnobs, starWeight int, pick func() int) (text string, star bool) {
	if pick == nil {
		hi := f.hi
		if k.robfigSafe && hi == 7 {
			hi = 6
		}
		pick = func() int { return f.lo + r.IntN(hi-f.lo+1) }
	}
	if r.IntN(100) < starWeight {
		for v := f.lo; v <= f.starHi; v++ {
			set[v] = true
		}
		return "*", true
	}
	n := 1 + r.IntN(3)
	items := make([]string, n)
	for i := range items {
		items[i] = f.item(r, set, k, pick)
	}
	return strings.Join(items, ","), false
}

// generate returns a random expression and its meaning.
func generate(r *rand.Rand, k genKnobs) *genExpr {
	g := &genExpr{}
	var fields []string
	if k.seconds {
		// Sparse seconds mostly, so a window has a manageable number of
		// firings; "*" now and then.
		s, _ := gSec.field(r, &g.sec, k, 10, nil)
		fields = append(fields, s)
	} else {
		g.sec[0] = true
	}
	s, _ := gMin.field(r, &g.min, k, 15, func() int {
		// Favour the minutes where zones with 30- and 45-minute offsets
		// change their clocks.
		if r.IntN(2) == 0 {
			return []int{0, 15, 30, 45, 59}[r.IntN(5)]
		}
		return r.IntN(60)
	})
	fields = append(fields, s)
	var hourPick func() int
	if len(k.hotHours) > 0 {
		hourPick = func() int {
			if r.IntN(3) > 0 {
				return k.hotHours[r.IntN(len(k.hotHours))]
			}
			return r.IntN(24)
		}
	}
	s, _ = gHour.field(r, &g.hour, k, 25, hourPick)
	fields = append(fields, s)

	dayStar, monthStar := 30, 40
	if k.plainDays {
		dayStar, monthStar = 80, 85
	}
	// day-of-month
	if k.quartz && r.IntN(4) == 0 {
		s = g.quartzDom(r)
	} else {
		s, g.domStar = gDom.field(r, &g.dom, k, dayStar, nil)
		if g.domStar {
			s = g.starSpelling(r, k)
		}
	}
	fields = append(fields, s)
	s, _ = gMonth.field(r, &g.month, k, monthStar, nil)
	fields = append(fields, s)
	// day-of-week
	if k.quartz && r.IntN(4) == 0 {
		s = g.quartzDow(r)
	} else {
		s, g.dowStar = gDow.field(r, &g.dow, k, dayStar, nil)
		if g.dowStar {
			s = g.starSpelling(r, k)
		}
	}
	fields = append(fields, s)
	g.text = strings.Join(fields, " ")
	return g
}

// starSpelling picks one of the spellings of an unrestricted day field.
func (g *genExpr) starSpelling(r *rand.Rand, k genKnobs) string {
	if k.robfigSafe {
		return []string{"*", "?"}[r.IntN(2)]
	}
	return []string{"*", "*", "?", "*/1"}[r.IntN(4)]
}

// quartzDom writes a day-of-month list with at least one Quartz item.
func (g *genExpr) quartzDom(r *rand.Rand) string {
	var items []string
	for i := 0; i < 1+r.IntN(2); i++ {
		switch r.IntN(5) {
		case 0:
			items = append(items, "L")
			g.domExtra = append(g.domExtra, func(y int, m time.Month, d int) bool { return d == daysInMonth(y, m) })
		case 1:
			n := r.IntN(31)
			if r.IntN(2) == 0 {
				n = r.IntN(4)
			}
			items = append(items, "L-"+strconv.Itoa(n))
			g.domExtra = append(g.domExtra, func(y int, m time.Month, d int) bool { return d == daysInMonth(y, m)-n })
		case 2:
			items = append(items, []string{"LW", "lw"}[r.IntN(2)])
			g.domExtra = append(g.domExtra, func(y int, m time.Month, d int) bool {
				if !isWeekday(y, m, d) {
					return false
				}
				for e := d + 1; e <= daysInMonth(y, m); e++ {
					if isWeekday(y, m, e) {
						return false
					}
				}
				return true
			})
		case 3:
			n := 1 + r.IntN(31)
			if r.IntN(2) == 0 {
				n = []int{1, 2, 15, 28, 29, 30, 31}[r.IntN(7)]
			}
			items = append(items, strconv.Itoa(n)+[]string{"W", "w"}[r.IntN(2)])
			g.domExtra = append(g.domExtra, func(y int, m time.Month, d int) bool {
				// The weekday of this month closest to day n; none when
				// the month has no day n.
				dim := daysInMonth(y, m)
				if n > dim {
					return false
				}
				best, bestDist := 0, 99
				for e := 1; e <= dim; e++ {
					if dist := max(e-n, n-e); isWeekday(y, m, e) && dist < bestDist {
						best, bestDist = e, dist
					}
				}
				return d == best
			})
		default:
			v := 1 + r.IntN(31)
			items = append(items, strconv.Itoa(v))
			g.dom[v] = true
		}
	}
	return strings.Join(items, ",")
}

// quartzDow writes a day-of-week list with at least one Quartz item.
func (g *genExpr) quartzDow(r *rand.Rand) string {
	var items []string
	for i := 0; i < 1+r.IntN(2); i++ {
		wdv := r.IntN(8) // 7 is Sunday too
		wd := time.Weekday(wdv % 7)
		name := strconv.Itoa(wdv)
		if r.IntN(3) == 0 {
			name = randCase(r, gDow.names[wdv%7])
		}
		switch r.IntN(3) {
		case 0:
			items = append(items, name+[]string{"L", "l"}[r.IntN(2)])
			g.dowExtra = append(g.dowExtra, func(y int, m time.Month, d int) bool {
				return time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday() == wd && d+7 > daysInMonth(y, m)
			})
		case 1:
			n := 1 + r.IntN(5)
			items = append(items, name+"#"+strconv.Itoa(n))
			g.dowExtra = append(g.dowExtra, func(y int, m time.Month, d int) bool {
				return time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday() == wd && (d-1)/7+1 == n
			})
		default:
			items = append(items, name)
			g.dow[int(wd)] = true
		}
	}
	return strings.Join(items, ",")
}

func (g *genExpr) String() string { return fmt.Sprintf("%q", g.text) }
