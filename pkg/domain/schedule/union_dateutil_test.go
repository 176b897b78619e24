//go:build integration

package schedule

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The union's oracle: python-dateutil expands each member rule on its own
// (rrule_dateutil_test.go's runner), the DST rules turn each member's
// readings into instants by first principles (resolver), the members'
// instants go into one set, and the brute-force exclusion filter of
// union_test.go drops what the exclusions cover. NewExcluded(NewUnion(…))
// must give exactly that set, in order.
func TestUnionAgainstDateutil(t *testing.T) {
	r := oracleRand(t)
	perZone := oracleCount(12, 4)
	from, to := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	type unionCase struct {
		members []*oracleCase
		excl    []Exclusion
		brute   []bruteExcl
		loc     *time.Location
		zone    string
		start   time.Time
		end     time.Time
	}
	var unions []*unionCase
	var all []*oracleCase
	resolvers := map[string]*resolver{}
	for _, z := range oracleZones {
		loc := mustZone(t, z)
		resolvers[z] = newResolver(loc, from.AddDate(-3, 0, 0), to.AddDate(3, 0, 0))
		tr := transitions(loc, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), to)
		if len(tr) == 0 {
			tr = []time.Time{time.Date(2027, 3, 14, 12, 0, 0, 0, time.UTC)}
		}
		for range perZone {
			at := tr[r.IntN(len(tr))]
			u := &unionCase{loc: loc, zone: z}
			for range 2 + r.IntN(2) {
				text, start := genDSTRule(r, loc, at)
				c := &oracleCase{ID: len(all), Rule: text, zone: z, loc: loc, start: start,
					gap: GapPolicy(r.IntN(2)), rep: RepeatPolicy(r.IntN(3)), Limit: 20000}
				// Bounded where the comparison ends, so a union whose last
				// instants are all excluded ends there too.
				s, err := ParseRRule(text, start, Options{Location: loc, Gap: c.gap, Repeat: c.rep, End: at.Add(3 * 24 * time.Hour)})
				if err != nil {
					continue
				}
				c.sched, c.hourly = s, s.(*rrule).everyHour()
				c.Dtstart = start.Format(isoWall)
				c.end = at.Add(4 * 24 * time.Hour)
				c.End = c.end.In(loc).Format(isoWall)
				u.members = append(u.members, c)
				all = append(all, c)
				if u.start.IsZero() || start.Before(u.start) {
					u.start = start
				}
			}
			if len(u.members) == 0 {
				continue
			}
			u.end = at.Add(3 * 24 * time.Hour)
			// Windows around the transition's hours half the time.
			local := at.In(loc)
			for range r.IntN(3) {
				var x Exclusion
				var b bruteExcl
				if r.IntN(2) == 0 {
					s := time.Duration(local.Add(time.Duration(r.IntN(5)-2)*time.Hour).Hour()) * time.Hour
					e := s + time.Duration(30+30*r.IntN(4))*time.Minute
					if e >= 24*time.Hour {
						e -= 24 * time.Hour
					}
					x.Start, x.End, b.start, b.end = TimeOfDay(s), TimeOfDay(e), s, e
				} else {
					s, e := randTOD(r), randTOD(r)
					for e == s {
						e = randTOD(r)
					}
					x.Start, x.End, b.start, b.end = TimeOfDay(s), TimeOfDay(e), s, e
				}
				if r.IntN(3) == 0 {
					w := local.Weekday()
					x.Weekdays, b.days = []time.Weekday{w}, map[time.Weekday]bool{w: true}
				}
				u.excl, u.brute = append(u.excl, x), append(u.brute, b)
			}
			unions = append(unions, u)
		}
	}
	runDateutil(t, all)

	failures, compared := 0, 0
	for i, u := range unions {
		res := resolvers[u.zone]
		set := map[int64]bool{}
		var members []Schedule
		var texts []string
		for _, c := range u.members {
			members = append(members, c.sched)
			texts = append(texts, c.Rule)
			if c.results.Truncated {
				t.Fatalf("case %d: member %q expanded past the limit", i, c.Rule)
			}
			for _, x := range c.results.Readings {
				k, _ := time.Parse(isoWall, x)
				for _, inst := range res.fires(k.Unix(), c.hourly, c.gap, c.rep) {
					set[inst] = true
				}
			}
		}
		var want []int64
		for inst := range set {
			tt := time.Unix(inst, 0)
			if !tt.Before(u.start) && !tt.After(u.end) && !slices.ContainsFunc(u.brute, func(x bruteExcl) bool { return x.covers(tt, u.loc) }) {
				want = append(want, inst)
			}
		}
		slices.Sort(want)
		un, err := NewUnion(members...)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewExcluded(un, u.excl, u.loc)
		if err != nil {
			continue // all excluded: refused, as it should be
		}
		var have []int64
		for x := s.Next(u.start.Add(-time.Nanosecond)); !x.IsZero() && !x.After(u.end); x = s.Next(x) {
			have = append(have, x.Unix())
		}
		compared += len(want)
		if !slices.Equal(have, want) {
			failures++
			t.Errorf("case %d: %s in %s, %s:\n%s", i, strings.Join(texts, " | "), u.zone, s, diffInstants(u.loc, have, want))
			if failures > 10 {
				t.Fatal("too many differences")
			}
		}
	}
	t.Logf("%d unions of %d rules in %d zones, %d instants compared", len(unions), len(all), len(oracleZones), compared)
	if compared == 0 {
		t.Fatal("nothing compared")
	}
}
