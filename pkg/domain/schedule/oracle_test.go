package schedule

// The brute-force oracle: enumerate every instant of a window (each minute,
// or each second over short windows), read its wall clock from the time
// package, and decide from first principles which instants a schedule
// fires at. Next must produce exactly the same instants.
//
// The oracle knows nothing of zone periods, offsets or the engine's walk. Its
// rules, straight from the package documentation:
//
//   - a matching wall time that occurs once fires there;
//   - one that occurs more than once fires at its first occurrence (FIRST),
//     its last (LAST) or all of them (BOTH); always all of them for a
//     schedule matching every hour;
//   - one that never occurs fires, under SHIFT and when the schedule does
//     not match every hour, at the first instant whose wall time is later
//     than it;
//   - a schedule fires at most once per instant.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	oracleSeed = flag.Uint64("oracle.seed", 0, "seed for the random oracle tests (0: from the clock; the seed is logged)")
	oracleN    = flag.Int("oracle.n", 0, "random expressions per oracle test (0: the default sizing, smaller with -short)")
)

func oracleRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *oracleSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("random seed %d (reproduce with -oracle.seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0x5eed))
}

func oracleCount(def, short int) int {
	if *oracleN > 0 {
		return *oracleN
	}
	if testing.Short() {
		return short
	}
	return def
}

// wall is a wall-clock reading, to the second.
type wall struct {
	y           int
	m           time.Month
	d, h, mi, s int
}

func wallOf(t time.Time) wall {
	y, m, d := t.Date()
	h, mi, s := t.Clock()
	return wall{y, m, d, h, mi, s}
}

// key orders wall readings: seconds of a UTC clock showing the same reading.
func (w wall) key() int64 { return time.Date(w.y, w.m, w.d, w.h, w.mi, w.s, 0, time.UTC).Unix() }

// window is the enumeration of one zone over [from, to) at a fixed step,
// prepared once and shared by every expression tested on it.
type window struct {
	zone     string
	loc      *time.Location
	step     int64   // 60 or 1
	inst     []int64 // Unix seconds, ascending
	walls    []wall
	keys     []int64 // walls[i].key()
	first    []bool  // the instant is the first occurrence of its wall reading
	last     []bool  // ... the last occurrence
	missing  []wall  // wall readings (on the step grid) that no instant shows
	shiftTo  []int64
	from, to int64 // compare on (from, to], well inside the enumeration
}

// newWindow enumerates [center-span-margin, center+span+margin) and compares
// on (center-span, center+span]. The margin is wider than any offset change
// in the window, so every wall reading in the compared part has all its
// occurrences enumerated.
func newWindow(loc *time.Location, center time.Time, span, margin time.Duration, step int64) *window {
	w := &window{zone: loc.String(), loc: loc, step: step}
	lo := center.Add(-span - margin).Unix()
	lo -= lo % step
	hi := center.Add(span + margin).Unix()
	w.from, w.to = center.Add(-span).Unix(), center.Add(span).Unix()
	seen := map[int64][]int{}
	for t := lo; t < hi; t += step {
		wl := wallOf(time.Unix(t, 0).In(loc))
		w.inst = append(w.inst, t)
		w.walls = append(w.walls, wl)
		w.keys = append(w.keys, wl.key())
		seen[wl.key()] = append(seen[wl.key()], len(w.inst)-1)
	}
	w.first = make([]bool, len(w.inst))
	w.last = make([]bool, len(w.inst))
	for _, idx := range seen {
		w.first[idx[0]] = true
		w.last[idx[len(idx)-1]] = true
	}
	// runMax[i] is the latest wall reading shown by instants 0..i; it never
	// decreases, so "the first instant whose wall reading is later than k"
	// is a binary search on it.
	runMax := make([]int64, len(w.keys))
	for i, k := range w.keys {
		runMax[i] = k
		if i > 0 {
			runMax[i] = max(k, runMax[i-1])
		}
	}
	// Every wall reading on the grid between the first and the latest
	// shown, stepping through the civil calendar (a UTC clock has no gaps).
	for k := w.keys[0]; k <= runMax[len(runMax)-1]; k += step {
		if _, ok := seen[k]; ok {
			continue
		}
		i, _ := slices.BinarySearch(runMax, k+1)
		w.missing = append(w.missing, wallOf(time.Unix(k, 0).UTC()))
		w.shiftTo = append(w.shiftTo, w.inst[i])
	}
	return w
}

// expect returns the instants in (from, to] at which g fires under the
// given policies.
func (w *window) expect(g *genExpr, gap GapPolicy, rep RepeatPolicy) []int64 {
	hourly := g.hourly()
	var out []int64
	// The day rules are the slow part of matching; remember the last day.
	var lastDay wall
	var lastOK bool
	matches := func(x wall) bool {
		if !g.sec[x.s] || !g.min[x.mi] || !g.hour[x.h] || !g.month[int(x.m)] {
			return false
		}
		if x.y != lastDay.y || x.m != lastDay.m || x.d != lastDay.d {
			lastDay, lastOK = x, g.dayMatches(x.y, x.m, x.d)
		}
		return lastOK
	}
	for i, t := range w.inst {
		if !matches(w.walls[i]) {
			continue
		}
		fire := hourly || rep == RepeatBoth ||
			(rep == RepeatFirst && w.first[i]) ||
			(rep == RepeatLast && w.last[i])
		if fire {
			out = append(out, t)
		}
	}
	if gap == GapShift && !hourly {
		for i, x := range w.missing {
			if matches(x) {
				out = append(out, w.shiftTo[i])
			}
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	i := 0
	for _, t := range out {
		if t > w.from && t <= w.to {
			out[i] = t
			i++
		}
	}
	return out[:i]
}

// check compares Next with the oracle on the window: the chain of firings
// from the window's start, and Next from a few random instants.
func (w *window) check(t *testing.T, r *rand.Rand, g *genExpr, s Schedule, gap GapPolicy, rep RepeatPolicy) bool {
	t.Helper()
	want := w.expect(g, gap, rep)
	var got []int64
	for x := s.Next(time.Unix(w.from, 0)); !x.IsZero() && x.Unix() <= w.to; x = s.Next(x) {
		if x.Nanosecond() != 0 || x.Location() != w.loc {
			t.Errorf("%s in %s: Next returned %v, want a whole second in the schedule's zone", g, w.zone, x)
			return false
		}
		got = append(got, x.Unix())
		if len(got) > len(want)+1 {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s in %s, gap %v, repeat %v, window %v..%v:\n%s", g, w.zone, gap, rep,
			time.Unix(w.from, 0).UTC(), time.Unix(w.to, 0).UTC(), diffInstants(w.loc, got, want))
		return false
	}
	for range 3 {
		after := time.Unix(w.from+r.Int64N(w.to-w.from), r.Int64N(1e9))
		i, _ := slices.BinarySearch(want, after.Unix()+1)
		x := s.Next(after)
		if i < len(want) {
			if x.Unix() != want[i] {
				t.Errorf("%s in %s, gap %v, repeat %v: Next(%v) = %v, want %v", g, w.zone, gap, rep,
					after.UTC(), x.UTC(), time.Unix(want[i], 0).UTC())
				return false
			}
		} else if !x.IsZero() && x.Unix() <= w.to {
			t.Errorf("%s in %s: Next(%v) = %v, want nothing before %v", g, w.zone, after.UTC(), x.UTC(), time.Unix(w.to, 0).UTC())
			return false
		}
	}
	return true
}

func diffInstants(loc *time.Location, got, want []int64) string {
	var sb strings.Builder
	gi, wi := 0, 0
	for n := 0; (gi < len(got) || wi < len(want)) && n < 12; n++ {
		switch {
		case wi >= len(want) || (gi < len(got) && got[gi] < want[wi]):
			fmt.Fprintf(&sb, "  extra   %v\n", time.Unix(got[gi], 0).In(loc))
			gi++
		case gi >= len(got) || want[wi] < got[gi]:
			fmt.Fprintf(&sb, "  missing %v\n", time.Unix(want[wi], 0).In(loc))
			wi++
		default:
			gi++
			wi++
			n--
		}
	}
	return fmt.Sprintf("got %d firings, want %d; first differences:\n%s", len(got), len(want), sb.String())
}

// transitions finds every instant in [from, to) at which loc's UTC offset
// changes, by sampling every hour and bisecting to the second. Like the
// rest of the oracle it avoids ZoneBounds, which the engine uses.
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	offset := func(t int64) int { _, o := time.Unix(t, 0).In(loc).Zone(); return o }
	var out []time.Time
	for t := from.Unix(); t < to.Unix(); t += 3600 {
		if offset(t) == offset(t+3600) {
			continue
		}
		lo, hi := t, t+3600 // offset(lo) != offset(hi)
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if offset(mid) == offset(lo) {
				lo = mid
			} else {
				hi = mid
			}
		}
		out = append(out, time.Unix(hi, 0).UTC())
	}
	return out
}

// The zones of the oracle: the list, plus zones whose transitions
// are unusual — at midnight (Santiago, Havana), by two hours (Troll), by
// "negative DST" (Dublin), or listed year by year rather than by rule
// (Casablanca's Ramadan changes).
var oracleZones = []string{
	"America/New_York", "Europe/London", "Australia/Sydney", "Australia/Lord_Howe",
	"Pacific/Chatham", "Asia/Kolkata", "UTC", "America/Santiago", "America/Havana",
	"Antarctica/Troll", "Europe/Dublin", "Africa/Casablanca",
}

// Transitions from the tz history where rules changed, with unusual shapes.
var historicTransitions = []struct {
	zone string
	at   time.Time
}{
	{"Pacific/Apia", time.Date(2011, 12, 30, 10, 0, 0, 0, time.UTC)},       // skipped Friday 30 December: a 24h gap
	{"America/Caracas", time.Date(2016, 5, 1, 6, 30, 0, 0, time.UTC)},      // -04:30 to -04:00: a 30-minute gap
	{"Europe/Moscow", time.Date(2014, 10, 25, 22, 0, 0, 0, time.UTC)},      // +04 to +03 for good: a repeated hour
	{"Asia/Pyongyang", time.Date(2018, 5, 4, 15, 0, 0, 0, time.UTC)},       // +08:30 to +09: a gap at 23:30
	{"America/Sao_Paulo", time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC)},    // spring forward at midnight
	{"Pacific/Kiritimati", time.Date(1994, 12, 31, 10, 0, 0, 0, time.UTC)}, // -10 to +14: a 24h gap
}

// oracleWindows builds the minute-step windows: each transition of each
// oracle zone in 2026-2030, the historic ones, and a few ordinary days.
func oracleWindows(t *testing.T, step int64, span, margin time.Duration) []*window {
	t.Helper()
	from, to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	var ws []*window
	for _, z := range oracleZones {
		loc := mustZone(t, z)
		tr := transitions(loc, from, to)
		if step == 1 && len(tr) > 2 {
			tr = tr[:2] // second-level windows are costly; one spring, one fall
		}
		for _, at := range tr {
			ws = append(ws, newWindow(loc, at, span, margin, step))
		}
		// An ordinary day too, so zones without transitions are covered.
		ws = append(ws, newWindow(loc, time.Date(2027, 6, 15, 12, 0, 0, 0, time.UTC), span, margin, step))
	}
	// Past 2037 Go computes periods from each zone's TZ footer rule;
	// include a year of that, and the last UTC day of a leap year, where
	// ZoneBounds misreports (golang/go#81583).
	for _, z := range []string{"America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"} {
		loc := mustZone(t, z)
		tr := transitions(loc, time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC))
		for _, at := range append(tr, time.Date(2040, 12, 31, 12, 0, 0, 0, time.UTC)) {
			ws = append(ws, newWindow(loc, at, span, margin, step))
		}
	}
	// The same zones described by their rule alone, as slim tz databases
	// (and some embedded ones) serve every year after a zone's last rule
	// change: the footer-rule path, in 2026-2030.
	for _, rz := range ruleZones {
		loc := ruleOnlyZone(t, rz.name, rz.rule)
		tr := transitions(loc, from, to)
		if step == 1 && len(tr) > 2 {
			tr = tr[:2]
		}
		for _, at := range append(tr, time.Date(2028, 12, 31, 12, 0, 0, 0, time.UTC)) {
			ws = append(ws, newWindow(loc, at, span, margin, step))
		}
	}
	for _, h := range historicTransitions {
		loc := mustZone(t, h.zone)
		tr := transitions(loc, h.at.Add(-3*time.Hour), h.at.Add(3*time.Hour))
		if len(tr) != 1 {
			t.Fatalf("%s: found %d transitions near %v, want 1", h.zone, len(tr), h.at)
		}
		m := margin
		if step == 60 {
			m = max(margin, 26*time.Hour) // these moved by up to a day
		}
		ws = append(ws, newWindow(loc, tr[0], span, m, step))
	}
	return ws
}

// ruleZones are POSIX TZ rules copied from the zones' TZif footers.
var ruleZones = []struct{ name, rule string }{
	{"rule/New_York", "EST5EDT,M3.2.0,M11.1.0"},
	{"rule/Lord_Howe", "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"},
	{"rule/Chatham", "<+1245>-12:45<+1345>,M9.5.0/2:45,M4.1.0/3:45"},
	{"rule/Santiago", "<-04>4<-03>,M9.1.6/24,M4.1.6/24"},
	// A made-up zone that falls back at 23:30Z on 31 December, so Go's
	// new-year period boundary (00:00Z) cuts its repeated half hour in two.
	{"rule/NewYearFallBack", "AAA0BBB,J180/2,J365/24:30"},
}

// ruleOnlyZone builds a zone from a POSIX TZ rule alone: a TZif version 2
// file (RFC 8536) with no transitions, one placeholder local time type,
// and the rule as its footer.
func ruleOnlyZone(t testing.TB, name, rule string) *time.Location {
	t.Helper()
	var b []byte
	be32 := func(v uint32) { b = append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v)) }
	block := func() {
		b = append(b, "TZif2"...)
		b = append(b, make([]byte, 15)...)
		// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
		for _, n := range []uint32{0, 0, 0, 0, 1, 4} {
			be32(n)
		}
		be32(0)                     // the type's UT offset
		b = append(b, 0, 0)         // not DST, designation index 0
		b = append(b, "LMT\x00"...) // designations
	}
	block() // version 1 data, which readers of version 2 skip
	block()
	b = append(b, "\n"+rule+"\n"...)
	loc, err := time.LoadLocationFromTZData(name, b)
	if err != nil {
		t.Fatalf("rule zone %s: %v", rule, err)
	}
	return loc
}

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

// hotHours returns the wall hours around a window's middle, where its
// transition is, so generated schedules often hit the gap or repeat.
func (w *window) hotHours() []int {
	mid := time.Unix((w.from+w.to)/2, 0)
	var hs []int
	for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -time.Second, 0, time.Hour, 2 * time.Hour} {
		hs = append(hs, mid.Add(d).In(w.loc).Hour())
	}
	return hs
}

var allPolicies = []struct {
	gap GapPolicy
	rep RepeatPolicy
}{
	{GapShift, RepeatFirst}, {GapShift, RepeatLast}, {GapShift, RepeatBoth},
	{GapSkip, RepeatFirst}, {GapSkip, RepeatLast}, {GapSkip, RepeatBoth},
}

func runOracle(t *testing.T, ws []*window, n int, seconds bool) {
	r := oracleRand(t)
	failures := 0
	for i := 0; i < n && failures < 5; i++ {
		w := ws[r.IntN(len(ws))]
		g := generate(r, genKnobs{seconds: seconds, hotHours: w.hotHours(), quartz: r.IntN(4) == 0, plainDays: r.IntN(3) > 0})
		for _, p := range allPolicies {
			s, err := Parse(g.text, Options{Location: w.loc, Gap: p.gap, Repeat: p.rep})
			if err != nil {
				if !strings.Contains(err.Error(), "never fires") || !g.neverFires() {
					t.Errorf("Parse(%s): %v", g, err)
					failures++
				}
				break
			}
			if !w.check(t, r, g, s, p.gap, p.rep) {
				failures++
				break
			}
		}
	}
}

// TestOracleMinutes compares Next with the minute-by-minute oracle on
// random five-field expressions around every 2026-2030 transition of the
// oracle zones and around historic rule changes, under all six policy
// combinations.
func TestOracleMinutes(t *testing.T) {
	t.Parallel()
	ws := oracleWindows(t, 60, 8*time.Hour, 3*time.Hour)
	runOracle(t, ws, oracleCount(3000, 400), false)
}

// TestOracleSeconds does the same second by second, with six-field
// expressions, over shorter windows.
func TestOracleSeconds(t *testing.T) {
	t.Parallel()
	ws := oracleWindows(t, 1, 90*time.Minute, 2*time.Hour)
	runOracle(t, ws, oracleCount(300, 60), true)
}

// TestOracleCalendar checks the day fields over all of 2026-2030: random
// day-of-month, month and day-of-week fields (Quartz items included) at
// one time of day, against a day-by-day enumeration, in UTC and at noon in
// a DST zone (where no transition interferes).
func TestOracleCalendar(t *testing.T) {
	t.Parallel()
	r := oracleRand(t)
	from, to := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	n := oracleCount(3000, 500)
	failures := 0
	for i := 0; i < n && failures < 5; i++ {
		g := generate(r, genKnobs{quartz: r.IntN(2) == 0})
		// One time of day: noon and a random minute.
		mi := r.IntN(60)
		g.min, g.hour = [64]bool{}, [64]bool{}
		g.min[mi], g.hour[12] = true, true
		fields := strings.Fields(g.text)
		g.text = strings.Join(append([]string{fmt.Sprint(mi), "12"}, fields[2:]...), " ")

		loc := time.UTC
		if r.IntN(2) == 0 {
			loc = mustZone(t, oracleZones[r.IntN(len(oracleZones))])
		}
		// Dates are the zone's own calendar dates, 2026-01-01 to 2030-12-31.
		var want []time.Time
		for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
			if g.month[int(d.Month())] && g.dayMatches(d.Year(), d.Month(), d.Day()) {
				want = append(want, time.Date(d.Year(), d.Month(), d.Day(), 12, mi, 0, 0, loc))
			}
		}
		start, end := time.Date(2026, 1, 1, 0, 0, 0, 0, loc), time.Date(2031, 1, 1, 0, 0, 0, 0, loc)
		s, err := Parse(g.text, Options{Location: loc})
		if err != nil {
			if !strings.Contains(err.Error(), "never fires") || !g.neverFires() {
				t.Errorf("Parse(%s): %v", g, err)
				failures++
			}
			continue
		}
		var got []time.Time
		for x := s.Next(start.Add(-time.Second)); !x.IsZero() && x.Before(end); x = s.Next(x) {
			got = append(got, x)
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s in %s: got %d firings, want %d\n got %v\nwant %v", g, loc, len(got), len(want), head(got), head(want))
			failures++
		}
	}
}

func head(ts []time.Time) []time.Time {
	if len(ts) > 6 {
		return ts[:6]
	}
	return ts
}

// TestOracleWindowsSeeTransitions guards the oracle itself: its windows must
// actually contain the gaps and repeats they are meant to test.
func TestOracleWindowsSeeTransitions(t *testing.T) {
	loc := mustZone(t, "America/New_York")
	tr := transitions(loc, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	want := []time.Time{time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)}
	if !slices.EqualFunc(tr, want, time.Time.Equal) {
		t.Fatalf("New York 2026 transitions = %v, want %v", tr, want)
	}
	spring := newWindow(loc, tr[0], 4*time.Hour, 3*time.Hour, 60)
	if len(spring.missing) != 60 || spring.missing[0] != (wall{2026, 3, 8, 2, 0, 0}) {
		t.Errorf("spring window: %d missing walls starting %v, want the 60 minutes of 02:00", len(spring.missing), spring.missing[0])
	}
	for i, s := range spring.shiftTo {
		if s != tr[0].Unix() {
			t.Fatalf("missing wall %v shifts to %v, want %v", spring.missing[i], time.Unix(s, 0).UTC(), tr[0])
		}
	}
	fall := newWindow(loc, tr[1], 4*time.Hour, 3*time.Hour, 60)
	repeated := 0
	for i := range fall.inst {
		if !fall.first[i] {
			repeated++
		}
	}
	if repeated != 60 || len(fall.missing) != 0 {
		t.Errorf("fall window: %d repeated walls and %d missing, want 60 and 0", repeated, len(fall.missing))
	}
}
