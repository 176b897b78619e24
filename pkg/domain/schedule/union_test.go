package schedule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The brute force below states what a union with exclusions does in the
// plainest way: list every instant of each member over a stretch, put them
// in a set (one per instant), drop those whose wall reading an exclusion
// covers (read with time.Time's own fields and AddDate, sharing no code
// with Excluded), and sort.

type bruteExcl struct {
	whole      bool
	start, end time.Duration // since midnight
	days       map[time.Weekday]bool
	from, to   string // "YYYY-MM-DD", "" unbounded
}

func (x bruteExcl) dayOK(d time.Time) bool {
	day := d.Format(time.DateOnly)
	if x.from != "" && day < x.from || x.to != "" && day > x.to {
		return false
	}
	return len(x.days) == 0 || x.days[d.Weekday()]
}

func (x bruteExcl) covers(t time.Time, loc *time.Location) bool {
	l := t.In(loc)
	day := time.Date(l.Year(), l.Month(), l.Day(), 12, 0, 0, 0, time.UTC)
	tod := time.Duration(l.Hour())*time.Hour + time.Duration(l.Minute())*time.Minute + time.Duration(l.Second())*time.Second
	if x.whole {
		return x.dayOK(day)
	}
	if x.end > x.start {
		return tod >= x.start && tod < x.end && x.dayOK(day)
	}
	return tod >= x.start && x.dayOK(day) || tod < x.end && x.dayOK(day.AddDate(0, 0, -1))
}

func bruteUnion(members []Schedule, excl []bruteExcl, loc *time.Location, from, to time.Time) []time.Time {
	set := map[time.Time]bool{}
	for _, m := range members {
		for t := m.Next(from); !t.IsZero() && t.Before(to); t = m.Next(t) {
			set[t.UTC()] = true
		}
	}
	var out []time.Time
	for t := range set {
		if !slices.ContainsFunc(excl, func(x bruteExcl) bool { return x.covers(t, loc) }) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

var unionTestExprs = []string{
	"0 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "15 1 * * *", "0 0 * * *", "*/20 * * * *",
	"0 */5 * * *", "0 9,17 * * *", "45 23 * * *", "30 1 * * SUN", "*/7 1-3 * * *", "0 0 L * *",
	"0,30 2 * * *", "0 3 * * *",
}

func randTOD(r *rand.Rand) time.Duration {
	// Mostly on the hour or half hour, where schedules and transitions
	// are; sometimes anywhere.
	if r.IntN(4) == 0 {
		return time.Duration(r.IntN(24*3600)) * time.Second
	}
	return time.Duration(r.IntN(48)) * 30 * time.Minute
}

func TestUnionExclusionsAgainstBruteForce(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Australia/Sydney", "Pacific/Chatham", "America/Santiago"}
	rng := rand.New(rand.NewPCG(17, 2027))
	cases := 400
	if testing.Short() {
		cases = 80
	}
	anchors := []time.Time{
		time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 4, 5, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 4, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 9, 6, 0, 0, 0, 0, time.UTC), time.Date(2026, 9, 27, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := range cases {
		loc, err := time.LoadLocation(zones[rng.IntN(len(zones))])
		if err != nil {
			t.Fatal(err)
		}
		var members []Schedule
		var texts []string
		for range 1 + rng.IntN(3) {
			expr := unionTestExprs[rng.IntN(len(unionTestExprs))]
			opts := Options{Location: loc, Gap: GapPolicy(rng.IntN(2)), Repeat: RepeatPolicy(rng.IntN(3))}
			var m Schedule
			if rng.IntN(5) == 0 {
				m, err = Every(time.Duration(1+rng.IntN(180))*time.Minute, anchors[0], opts)
			} else {
				m, err = Parse(expr, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			members = append(members, m)
			texts = append(texts, m.String())
		}
		anchor := anchors[rng.IntN(len(anchors))]
		var excl []Exclusion
		var brute []bruteExcl
		for range rng.IntN(4) {
			var x Exclusion
			var b bruteExcl
			if rng.IntN(5) == 0 {
				x.Whole, b.whole = true, true
			} else {
				s, e := randTOD(rng), randTOD(rng)
				for e == s {
					e = randTOD(rng)
				}
				x.Start, x.End, b.start, b.end = TimeOfDay(s), TimeOfDay(e), s, e
			}
			if rng.IntN(3) == 0 {
				b.days = map[time.Weekday]bool{}
				for range 1 + rng.IntN(3) {
					w := time.Weekday(rng.IntN(7))
					if !b.days[w] {
						b.days[w] = true
						x.Weekdays = append(x.Weekdays, w)
					}
				}
			}
			if rng.IntN(3) == 0 {
				f := anchor.AddDate(0, 0, rng.IntN(10)-5)
				u := f.AddDate(0, 0, rng.IntN(4))
				x.From, x.Until = DateOf(f), DateOf(u)
				b.from, b.to = f.Format(time.DateOnly), u.Format(time.DateOnly)
			}
			excl = append(excl, x)
			brute = append(brute, b)
		}
		u, err := NewUnion(members...)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewExcluded(u, excl, loc)
		if err != nil {
			// Only the all-covering case is refused; the brute force
			// must agree nothing fires then.
			if err != ErrAllExcluded {
				t.Fatalf("case %d: %v", i, err)
			}
			continue
		}
		from := anchor.Add(-2 * 24 * time.Hour).Add(time.Duration(rng.Int64N(int64(3 * 24 * time.Hour)))).Truncate(time.Minute)
		to := from.Add(6 * 24 * time.Hour)
		want := bruteUnion(members, brute, loc, from, to)
		var got []time.Time
		for tt := range Preview(s, from, len(want)+1) {
			if !tt.Before(to) {
				break
			}
			got = append(got, tt.UTC())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: %s in %s, %s, from %s:\n got %s\nwant %s",
				i, strings.Join(texts, " | "), loc, s, from.Format(time.RFC3339), fmtTimes(got, loc), fmtTimes(want, loc))
		}
		// Every instant the base had in the stretch is either fired or
		// noted as excluded.
		if len(got) > 0 {
			last := got[len(got)-1]
			notes := Notes(s, from, last, 100000)
			var base []time.Time
			for tt := u.Next(from); !tt.IsZero() && !tt.After(last); tt = u.Next(tt) {
				base = append(base, tt.UTC())
			}
			if len(notes)+len(got) != len(base) {
				t.Fatalf("case %d: %d base instants, %d fired, %d noted", i, len(base), len(got), len(notes))
			}
			for _, n := range notes {
				if slices.Contains(got, n.From) || !strings.HasPrefix(n.Reason, "excluded by exclusions[") {
					t.Fatalf("case %d: note %v", i, n)
				}
			}
		}
	}
}

func parseIn(t testing.TB, expr string, loc *time.Location) Schedule {
	t.Helper()
	s, err := Parse(expr, Options{Location: loc})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnionFiresOncePerInstant(t *testing.T) {
	u, err := NewUnion(parseIn(t, "0 */2 * * *", time.UTC), parseIn(t, "0 */3 * * *", time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []string
	for tt := range Preview(u, from, 6) {
		got = append(got, tt.Format("15:04"))
	}
	if want := "02:00 03:00 04:00 06:00 08:00 09:00"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	if d := u.Describe(); !strings.Contains(d, "; and ") {
		t.Fatalf("describe %q", d)
	}
}

func TestExclusionHourlyBut0204(t *testing.T) {
	loc, _ := time.LoadLocation("America/New_York")
	s, err := NewExcluded(parseIn(t, "0 * * * *", loc), []Exclusion{{Start: TimeOfDay(2 * time.Hour), End: TimeOfDay(4 * time.Hour), Note: "backups"}}, loc)
	if err != nil {
		t.Fatal(err)
	}
	// Spring-forward night: 02:00-02:59 does not exist; 03:00 EDT is in
	// the window.
	from := time.Date(2026, 3, 8, 4, 30, 0, 0, time.UTC) // 23:30 EST on the 7th
	var got []string
	for tt := range Preview(s, from, 4) {
		got = append(got, tt.In(loc).Format("15:04"))
	}
	if want := "00:00 01:00 04:00 05:00"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	notes := Notes(s, from, time.Date(2026, 3, 8, 9, 0, 0, 0, time.UTC), 10)
	if len(notes) != 1 || notes[0].Reason != "excluded by exclusions[0] (02:00-04:00): backups; skipped" {
		t.Fatalf("notes %+v", notes)
	}
	// Fall-back night: 01:00-01:59 twice, both outside; 02:00 and 03:00 EST excluded.
	from = time.Date(2026, 11, 1, 3, 30, 0, 0, time.UTC) // 23:30 EDT on Oct 31
	got = got[:0]
	for tt := range Preview(s, from, 4) {
		got = append(got, tt.In(loc).Format("15:04 MST"))
	}
	if want := "00:00 EDT 01:00 EDT 01:00 EST 04:00 EST"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestExclusionRefusals(t *testing.T) {
	base := parseIn(t, "0 * * * *", time.UTC)
	h := func(n int) TimeOfDay { return TimeOfDay(time.Duration(n) * time.Hour) }
	for _, tc := range []struct {
		excl []Exclusion
		want string
	}{
		{[]Exclusion{{Whole: true}}, "never fires"},
		{[]Exclusion{{Start: h(0), End: h(12)}, {Start: h(12), End: h(24)}}, "never fires"},
		{[]Exclusion{{Start: h(20), End: h(8)}, {Start: h(8), End: h(20)}}, "never fires"},
		{[]Exclusion{{Start: h(3), End: h(3)}}, "start and end are both 03:00"},
		{[]Exclusion{{Whole: true, From: Date{2026, 2, 1}, Until: Date{2026, 1, 1}}}, "is before from"},
	} {
		_, err := NewExcluded(base, tc.excl, time.UTC)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.excl, err, tc.want)
		}
	}
	// Whole days on weekdays only leave the weekend: accepted.
	if _, err := NewExcluded(base, []Exclusion{{Whole: true, Weekdays: []time.Weekday{1, 2, 3, 4, 5}}}, time.UTC); err != nil {
		t.Fatal(err)
	}
}

// A schedule whose every instant an exclusion covers ends instead of
// walking to the year 9999.
func TestExclusionNeverFiringEnds(t *testing.T) {
	s, err := NewExcluded(parseIn(t, "0 3 * * *", time.UTC), []Exclusion{{Start: TimeOfDay(2 * time.Hour), End: TimeOfDay(4 * time.Hour)}}, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Fatalf("got %s", got)
	}
}

func TestParseTimeOfDay(t *testing.T) {
	for in, want := range map[string]string{"02:00": "02:00", "23:59:30": "23:59:30", "24:00": "24:00", "00:00:00": "00:00"} {
		got, err := ParseTimeOfDay(in)
		if err != nil || got.String() != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"2:00", "24:01", "12:60", "-1:00", "aa:bb", "12:00:61", "12:00Z"} {
		if _, err := ParseTimeOfDay(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// Preview's cost per instant for a job of two schedules and exclusions,
// as PreviewSchedule pays it (build, then 100 instants).
func BenchmarkUnionExcludedPreview(b *testing.B) {
	loc, _ := time.LoadLocation("America/New_York")
	// The day before a two-day freeze that holds the spring-forward night.
	from := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
	excl := []Exclusion{
		{Start: TimeOfDay(2 * time.Hour), End: TimeOfDay(4 * time.Hour)},
		{Whole: true, From: Date{2026, 3, 7}, Until: Date{2026, 3, 8}},
		{Start: TimeOfDay(22 * time.Hour), End: TimeOfDay(6 * time.Hour), Weekdays: []time.Weekday{time.Saturday}},
	}
	b.ReportAllocs()
	for b.Loop() {
		a, _ := Parse("*/15 * * * *", Options{Location: loc})
		c, _ := Parse("0 9 * * MON-FRI", Options{Location: loc})
		u, _ := NewUnion(a, c)
		s, err := NewExcluded(u, excl, loc)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for range Preview(s, from, 100) {
			n++
		}
		if n != 100 {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/instant")
}

// After a fall-back the wall readings run through a window's start again:
// the readings before it (here 01:00-01:29 EST) fire, and the search must
// not jump over them to the window's end.
func TestExclusionFallBackRereadsBeforeWindow(t *testing.T) {
	loc, _ := time.LoadLocation("America/New_York")
	s, err := NewExcluded(parseIn(t, "*/20 * * * *", loc), []Exclusion{{Start: TimeOfDay(90 * time.Minute), End: TimeOfDay(3 * time.Hour)}}, loc)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 1, 4, 50, 0, 0, time.UTC) // 00:50 EDT
	var got []string
	for tt := range Preview(s, from, 5) {
		got = append(got, tt.In(loc).Format("15:04 MST"))
	}
	if want := "01:00 EDT 01:20 EDT 01:00 EST 01:20 EST 03:00 EST"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// The costliest shapes within the limits: ten schedules in the union, and
// twenty exclusions that remove most instants (every minute, but not in
// working hours on weekdays, nor over a two-week freeze the preview
// starts in), with the notes PreviewSchedule lists (at most 1,000).
func BenchmarkUnionExcludedPreviewWorst(b *testing.B) {
	loc, _ := time.LoadLocation("Australia/Lord_Howe")
	from := time.Date(2026, 4, 3, 0, 0, 0, 0, time.UTC)
	var excl []Exclusion
	excl = append(excl, Exclusion{Whole: true, From: Date{2026, 4, 1}, Until: Date{2026, 4, 14}})
	for i := range 19 {
		excl = append(excl, Exclusion{Start: TimeOfDay(time.Duration(8*60+i) * time.Minute), End: TimeOfDay(20 * time.Hour),
			Weekdays: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}})
	}
	b.ReportAllocs()
	for b.Loop() {
		var members []Schedule
		for i := range 10 {
			m, _ := Parse(fmt.Sprintf("%d-59/10 * * * *", i), Options{Location: loc})
			members = append(members, m)
		}
		u, _ := NewUnion(members...)
		s, err := NewExcluded(u, excl, loc)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		var last time.Time
		for t := range Preview(s, from, 100) {
			n, last = n+1, t
		}
		if n != 100 || len(Notes(s, from, last, 1000)) != 1000 {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/instant")
}

func TestWeekdayOfDays(t *testing.T) {
	for d := time.Date(1, 1, 1, 12, 0, 0, 0, time.UTC); d.Year() < 2100; d = d.AddDate(0, 0, 997) {
		if got := weekdayOfDays(DateOf(d).days()); got != d.Weekday() {
			t.Fatalf("%s: %s, want %s", d, got, d.Weekday())
		}
	}
}

// Day numbers are consecutive across 1970 (Unix time's sign) and go back
// to the dates they came from.
func TestDayNumbersAreConsecutive(t *testing.T) {
	prev := DateOf(time.Date(1969, 12, 25, 12, 0, 0, 0, time.UTC)).days()
	for d := time.Date(1969, 12, 26, 12, 0, 0, 0, time.UTC); d.Year() < 1971; d = d.AddDate(0, 0, 1) {
		n := DateOf(d).days()
		if n != prev+1 || dateOfDays(n) != DateOf(d) {
			t.Fatalf("%s: day %d after %d, back to %s", d, n, prev, dateOfDays(n))
		}
		prev = n
	}
}

// A union's merged walk is what repeated Next gives.
func TestUnionInstantsMatchNext(t *testing.T) {
	loc, _ := time.LoadLocation("Europe/London")
	var members []Schedule
	for _, e := range []string{"*/7 * * * *", "*/3 1-3 * * *", "30 1 * * *", "0 * * * *"} {
		members = append(members, parseIn(t, e, loc))
	}
	u, err := NewUnion(members...)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC) // over London's fall-back
	want := u.Next(from)
	n := 0
	for got := range instants(u, from) {
		if !got.Equal(want) {
			t.Fatalf("step %d: merged %s, Next %s", n, got, want)
		}
		if n++; n == 2000 {
			break
		}
		want = u.Next(want)
	}
}
