package schedule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The brute force below states what a calendar does in the plainest way:
// list every underlying instant of a stretch, map each one (its wall date
// looked up in a map, a business day found by walking day by day, the wall
// reading put back on that day by trying every offset the zone used
// nearby), sort and de-duplicate. It shares no code with Calendared.

type bruteCal struct {
	holidays map[string]bool
	weekend  map[time.Weekday]bool
}

func (b bruteCal) business(y int, m time.Month, d int) bool {
	t := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	return !b.weekend[t.Weekday()] && !b.holidays[t.Format(time.DateOnly)]
}

// bruteWall is the first instant reading y-m-d h:mi:s in loc, or the end
// of the gap when none does.
func bruteWall(y int, m time.Month, d, h, mi, s, ns int, loc *time.Location) time.Time {
	u := time.Date(y, m, d, h, mi, s, ns, time.UTC)
	offs := map[int]bool{}
	// Offsets change at most a few times a year: every 6 hours over two
	// days either side sees each one in force around the reading.
	for k := -48; k <= 48; k += 6 {
		_, o := u.Add(time.Duration(k) * time.Hour).In(loc).Zone()
		offs[o] = true
	}
	var hits []time.Time
	lo, hi := u.Add(48*time.Hour), u.Add(-48*time.Hour)
	for o := range offs {
		c := u.Add(-time.Duration(o) * time.Second)
		if c.Before(lo) {
			lo = c
		}
		if c.After(hi) {
			hi = c
		}
		l := c.In(loc)
		if l.Year() == y && l.Month() == m && l.Day() == d && l.Hour() == h && l.Minute() == mi && l.Second() == s {
			hits = append(hits, c)
		}
	}
	if len(hits) > 0 {
		return slices.MinFunc(hits, func(a, b time.Time) int { return a.Compare(b) })
	}
	// Gap: the first instant whose reading is past the requested one.
	want := time.Date(y, m, d, h, mi, s, ns, time.UTC)
	reading := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if reading(mid).After(want) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func bruteAdjusted(base Schedule, b bruteCal, p CalendarPolicy, loc *time.Location, from, to time.Time) []time.Time {
	set := map[time.Time]bool{}
	for t := base.Next(from.Add(-40 * 24 * time.Hour)); !t.IsZero() && t.Before(to.Add(40*24*time.Hour)); t = base.Next(t) {
		l := t.In(loc)
		if b.business(l.Date()) {
			set[t.UTC()] = true
			continue
		}
		if p == CalendarSkip {
			continue
		}
		step := 1
		if p == CalendarPrevious {
			step = -1
		}
		for i := 1; i <= MaxMoveDays; i++ {
			d := time.Date(l.Year(), l.Month(), l.Day()+step*i, 12, 0, 0, 0, time.UTC)
			if b.business(d.Date()) {
				set[bruteWall(d.Year(), d.Month(), d.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), loc).UTC()] = true
				break
			}
		}
	}
	var out []time.Time
	for t := range set {
		if t.After(from) && t.Before(to) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

var calendarTestExprs = []string{
	"0 9 * * *", "30 2 * * *", "0 9 * * MON-FRI", "15 1 * * *", "0 0 * * *",
	"*/20 * * * *", "0 */5 * * *", "0 9,17 * * *", "45 23 * * *", "0 12 1,15 * *",
	"0 10 * * SAT", "30 1 * * SUN", "0 0 L * *",
}

func TestCalendarAgainstBruteForce(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Australia/Sydney"}
	rng := rand.New(rand.NewPCG(17, 2026))
	cases := 150
	if testing.Short() {
		cases = 40
	}
	// Around the 2026 transitions of the zones above, and ordinary days.
	anchors := []time.Time{
		time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 4, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 4, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := range cases {
		loc, err := time.LoadLocation(zones[rng.IntN(len(zones))])
		if err != nil {
			t.Fatal(err)
		}
		expr := calendarTestExprs[rng.IntN(len(calendarTestExprs))]
		base, err := Parse(expr, Options{Location: loc, Gap: GapPolicy(rng.IntN(2)), Repeat: RepeatPolicy(rng.IntN(3))})
		if err != nil {
			t.Fatal(err)
		}
		anchor := anchors[rng.IntN(len(anchors))]
		b := bruteCal{holidays: map[string]bool{}, weekend: map[time.Weekday]bool{}}
		var hols []Holiday
		for range rng.IntN(16) {
			d := anchor.AddDate(0, 0, rng.IntN(40)-20)
			// Runs of holidays, sometimes.
			for k := range 1 + rng.IntN(3) {
				dd := d.AddDate(0, 0, k)
				b.holidays[dd.Format(time.DateOnly)] = true
				hols = append(hols, Holiday{Date: DateOf(dd), Name: "h"})
			}
		}
		var weekend []time.Weekday
		switch rng.IntN(4) {
		case 0:
		case 1:
			weekend = []time.Weekday{time.Friday, time.Saturday}
		default:
			weekend = DefaultWeekend
		}
		for _, w := range weekend {
			b.weekend[w] = true
		}
		cal, err := NewCalendar("test", hols, weekend)
		if err != nil {
			t.Fatal(err)
		}
		p := CalendarPolicy(1 + rng.IntN(3))
		cs, err := WithCalendar(base, cal, p, loc)
		if err != nil {
			t.Fatal(err)
		}
		from := anchor.Add(time.Duration(rng.Int64N(int64(20 * 24 * time.Hour)))).Add(-10 * 24 * time.Hour).Truncate(time.Minute)
		if rng.IntN(3) == 0 {
			from = from.Add(time.Duration(rng.IntN(60)) * time.Second)
		}
		to := from.Add(25 * 24 * time.Hour)
		want := bruteAdjusted(base, b, p, loc, from, to)
		var got []time.Time
		for tt := range Preview(cs, from, len(want)+1) {
			if !tt.Before(to) {
				break
			}
			got = append(got, tt.UTC())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: %q in %s, policy %s, weekend %v, holidays %d, from %s:\n got %s\nwant %s",
				i, expr, loc, p, weekend, len(hols), from.Format(time.RFC3339), fmtTimes(got, loc), fmtTimes(want, loc))
		}
	}
}

func fmtTimes(ts []time.Time, loc *time.Location) string {
	var s string
	for _, t := range ts {
		s += " " + t.In(loc).Format("01-02T15:04:05Z07:00")
	}
	return fmt.Sprintf("%d:%s", len(ts), s)
}

// The cost of Next over a long non-business stretch: a per-second and a
// daily schedule, moved over a four-day Christmas weekend.
func BenchmarkCalendarNext(b *testing.B) {
	loc, _ := time.LoadLocation("Europe/Berlin")
	cal, err := NewCalendar("de", []Holiday{{Date{2026, 12, 24}, "a"}, {Date{2026, 12, 25}, "b"}, {Date{2026, 12, 28}, "c"}}, DefaultWeekend)
	if err != nil {
		b.Fatal(err)
	}
	for _, expr := range []string{"* * * * * *", "0 9 * * *"} {
		for _, p := range []CalendarPolicy{CalendarSkip, CalendarNext, CalendarPrevious} {
			base, _ := Parse(expr, Options{Location: loc})
			cs, _ := WithCalendar(base, cal, p, loc)
			from := time.Date(2026, 12, 23, 12, 0, 0, 0, time.UTC)
			b.Run(fmt.Sprintf("%s/%s", expr, p), func(b *testing.B) {
				for b.Loop() {
					t := from
					for range 10 {
						t = cs.Next(t.Add(24 * time.Hour / 10))
					}
				}
			})
		}
	}
}

// Adjustments against the brute force's view: every underlying instant in
// the range or moved into it that the calendar changed, and no other.
func TestCalendarAdjustments(t *testing.T) {
	loc, _ := time.LoadLocation("America/New_York")
	base, _ := Parse("0 9 * * *", Options{Location: loc})
	cal, err := NewCalendar("us", []Holiday{{Date{2026, 12, 25}, "Christmas"}}, DefaultWeekend)
	if err != nil {
		t.Fatal(err)
	}
	day := func(d int) time.Time { return time.Date(2026, 12, d, 14, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		p             CalendarPolicy
		from, through time.Time
		want          []string // From->To, "-" for removed
	}{
		// Fri 25th, Sat 26th, Sun 27th.
		{CalendarSkip, day(24), day(28), []string{"25->-", "26->-", "27->-"}},
		{CalendarNext, day(27).Add(time.Hour), day(28), []string{"25->28", "26->28", "27->28"}},
		// The 24th is shown; the three instants moved onto it come after
		// the range, and are listed.
		{CalendarPrevious, day(23), day(24), []string{"25->24", "26->24", "27->24"}},
		{CalendarPrevious, day(28).Add(-time.Hour), day(29), nil},
	} {
		cs, err := WithCalendar(base, cal, tc.p, loc)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range cs.Adjustments(tc.from, tc.through, 100) {
			to := "-"
			if !a.To.IsZero() {
				to = fmt.Sprint(a.To.Day())
			}
			got = append(got, fmt.Sprintf("%d->%s", a.From.Day(), to))
			if !strings.Contains(a.Reason, "calendar us") {
				t.Errorf("reason %q", a.Reason)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s (%s, %s]: got %v, want %v", tc.p, tc.from, tc.through, got, tc.want)
		}
	}
}
