//go:build integration

package schedule

// The recurrence-rule oracle: python-dateutil's rrule, an independent
// implementation, expands random rules into wall readings; this file turns
// each reading into the instants it fires at by the DST rules stated in
// DESIGN.md, from first principles (which instants show the reading), and
// Next must produce exactly those instants.
//
// dateutil comes from PyPI into a virtualenv that `make dateutil` creates
// under .tools (test-integration depends on it). Without it the test fails:
// a skipped oracle would pass silently.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dateutilPython finds the interpreter of the virtualenv with dateutil.
func dateutilPython(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SUNDIAL_DATEUTIL_PYTHON"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../../.tools/dateutil/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the dateutil oracle needs python-dateutil: run `make dateutil` (a virtualenv under .tools) or set SUNDIAL_DATEUTIL_PYTHON: %v", err)
	}
	return p
}

type oracleCase struct {
	ID      int      `json:"id"`
	Rule    string   `json:"rule"`
	Dtstart string   `json:"dtstart"`
	Exdate  []string `json:"exdate,omitempty"`
	Rdate   []string `json:"rdate,omitempty"`
	End     string   `json:"end"`
	Limit   int      `json:"limit"`

	zone    string
	loc     *time.Location
	start   time.Time
	gap     GapPolicy
	rep     RepeatPolicy
	hourly  bool
	sched   Schedule
	end     time.Time
	results oracleResult
}

type oracleResult struct {
	ID        int      `json:"id"`
	Readings  []string `json:"readings"`
	Truncated bool     `json:"truncated"`
}

const isoWall = "2006-01-02T15:04:05"

func isoOf(w int64) string { return time.Unix(w, 0).UTC().Format(isoWall) }

// runDateutil expands every case in one python process.
func runDateutil(t *testing.T, cases []*oracleCase) {
	t.Helper()
	cmd := exec.Command(dateutilPython(t), "testdata/dateutil/expand.py")
	var in strings.Builder
	enc := json.NewEncoder(&in)
	for _, c := range cases {
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Stdin = strings.NewReader(in.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dateutil oracle: %v", err)
	}
	byID := map[int]*oracleCase{}
	for _, c := range cases {
		byID[c.ID] = c
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		var r oracleResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("dateutil oracle output: %v", err)
		}
		byID[r.ID].results = r
		n++
	}
	if n != len(cases) {
		t.Fatalf("dateutil oracle answered %d cases of %d", n, len(cases))
	}
}

// resolver turns wall readings of one zone into instants by definition: the
// instants showing a reading are found by trying every offset the zone uses
// near it; a reading no instant shows is in a gap, and shifts to the first
// instant showing a later reading.
type resolver struct {
	loc     *time.Location
	offsets []int64
	maxOff  int64
	trans   []time.Time
}

func newResolver(loc *time.Location, from, to time.Time) *resolver {
	r := &resolver{loc: loc, trans: transitions(loc, from, to)}
	seen := map[int64]bool{}
	for t := from.Unix(); t <= to.Unix(); t += 3600 {
		_, o := time.Unix(t, 0).In(loc).Zone()
		if !seen[int64(o)] {
			seen[int64(o)] = true
			r.offsets = append(r.offsets, int64(o))
		}
	}
	r.maxOff = slices.Max(r.offsets)
	return r
}

func (r *resolver) wallKey(t int64) int64 { return wallOf(time.Unix(t, 0).In(r.loc)).key() }

// shown returns the instants whose wall reading is k, in order.
func (r *resolver) shown(k int64) []int64 {
	var shown []int64
	for _, o := range r.offsets {
		if t := k - o; r.wallKey(t) == k {
			shown = append(shown, t)
		}
	}
	slices.Sort(shown)
	return slices.Compact(shown)
}

// fires returns the instants at which reading k fires.
func (r *resolver) fires(k int64, hourly bool, gap GapPolicy, rep RepeatPolicy) []int64 {
	shown := r.shown(k)
	if len(shown) > 0 {
		switch {
		case hourly || rep == RepeatBoth:
			return shown
		case rep == RepeatLast:
			return shown[len(shown)-1:]
		default:
			return shown[:1]
		}
	}
	if hourly || gap == GapSkip {
		return nil
	}
	for _, tr := range r.trans {
		if T := tr.Unix(); r.wallKey(T-1) < k && k < r.wallKey(T) {
			return []int64{T}
		}
	}
	panic(fmt.Sprintf("reading %s is shown by no instant and in no gap", isoOf(k)))
}

// genRule builds a random rule aimed at the DST transition `at` of loc:
// DTSTART a while before it, and hours that fall in its gap or repeat.
func genRule(r *rand.Rand, loc *time.Location, at time.Time) (rule string, start time.Time, hot []int) {
	local := at.In(loc)
	for _, d := range []time.Duration{-90 * time.Minute, -30 * time.Minute, 0, 30 * time.Minute, 90 * time.Minute} {
		hot = append(hot, local.Add(d).Hour())
	}
	pick := func(vals []int, n int) string {
		var s []string
		for _, i := range r.Perm(len(vals))[:min(n, len(vals))] {
			s = append(s, fmt.Sprint(vals[i]))
		}
		return strings.Join(s, ",")
	}
	ints := func(lo, hi int) []int {
		var v []int
		for i := lo; i <= hi; i++ {
			if i != 0 {
				v = append(v, i)
			}
		}
		return v
	}
	freq := []string{"HOURLY", "DAILY", "DAILY", "WEEKLY", "WEEKLY", "MONTHLY", "MONTHLY", "YEARLY", "YEARLY"}[r.IntN(9)]
	var parts []string
	parts = append(parts, "FREQ="+freq)
	interval := 1
	if r.IntN(3) == 0 {
		interval = 2 + r.IntN(4)
		parts = append(parts, fmt.Sprintf("INTERVAL=%d", interval))
	}
	var lead time.Duration
	switch freq {
	case "HOURLY":
		lead = time.Duration(r.IntN(5*24)) * time.Hour
	case "DAILY":
		lead = time.Duration(r.IntN(60)) * 24 * time.Hour
	case "WEEKLY":
		lead = time.Duration(r.IntN(20)) * 7 * 24 * time.Hour
	default:
		lead = time.Duration(r.IntN(700)) * 24 * time.Hour
	}
	start = local.Add(-lead - time.Duration(r.IntN(24*60))*time.Minute).Truncate(time.Minute)

	byCount := 0
	if r.IntN(3) == 0 {
		// Aim at the transition's month half the time.
		m := []int{int(local.Month())}
		if r.IntN(2) == 0 {
			m = append(m, 1+r.IntN(12))
		}
		parts = append(parts, "BYMONTH="+pick(m, 2))
		byCount++
	}
	if freq == "YEARLY" && r.IntN(5) == 0 {
		// Week numbers where dateutil's week numbering is sound: it
		// mishandles days at a year's start that belong to the last week
		// (52 or 53) of the previous year, and negative numbers that reach
		// into the next year.
		parts = append(parts, "BYWEEKNO="+pick(append(ints(1, 51), -1, -2, -10), 1+r.IntN(3)))
		byCount++
	}
	if r.IntN(6) == 0 {
		parts = append(parts, "BYYEARDAY="+pick(append(ints(1, 366), ints(-366, -1)...), 1+r.IntN(40)))
		byCount++
	}
	if freq != "HOURLY" && r.IntN(3) == 0 || r.IntN(6) == 0 {
		parts = append(parts, "BYMONTHDAY="+pick(append(ints(1, 31), ints(-7, -1)...), 1+r.IntN(8)))
		byCount++
	}
	if r.IntN(2) == 0 {
		// Plain weekdays or ordinals, never both: dateutil requires a day
		// to match both kinds where RFC 5545 (and Sundial) take either.
		if (freq == "MONTHLY" || freq == "YEARLY") && !strings.Contains(strings.Join(parts, ";"), "BYWEEKNO") && r.IntN(2) == 0 {
			var items []string
			for range 1 + r.IntN(3) {
				n := []int{1, 2, 3, 4, -1, -2}[r.IntN(6)]
				if freq == "YEARLY" && r.IntN(3) == 0 {
					n = []int{1, 10, 20, 40, 52, -1, -5, -30}[r.IntN(8)]
				}
				items = append(items, fmt.Sprintf("%d%s", n, rfcDays[r.IntN(7)]))
			}
			parts = append(parts, "BYDAY="+strings.Join(items, ","))
		} else {
			var items []string
			for _, i := range r.Perm(7)[:1+r.IntN(5)] {
				items = append(items, rfcDays[i])
			}
			parts = append(parts, "BYDAY="+strings.Join(items, ","))
		}
		byCount++
	}
	if freq != "HOURLY" || r.IntN(3) == 0 {
		if r.IntN(4) != 0 {
			hs := append([]int{}, hot...)
			hs = append(hs, r.IntN(24))
			parts = append(parts, "BYHOUR="+pick(hs, 1+r.IntN(3)))
			byCount++
		} else if r.IntN(3) == 0 {
			parts = append(parts, "BYHOUR="+pick(ints(0, 23), 24))
			byCount++
		}
	}
	if r.IntN(2) == 0 {
		parts = append(parts, "BYMINUTE="+pick([]int{0, 15, 30, 45, r.IntN(60)}, 1+r.IntN(3)))
		byCount++
	}
	if r.IntN(4) == 0 {
		parts = append(parts, "BYSECOND="+pick([]int{0, 1, 30, 59, r.IntN(60)}, 1+r.IntN(3)))
		byCount++
	} else if r.IntN(4) == 0 {
		// DTSTART's second is the default.
		start = start.Add(time.Duration(r.IntN(60)) * time.Second)
	}
	if byCount > 0 && r.IntN(4) == 0 {
		parts = append(parts, "BYSETPOS="+pick([]int{1, 2, 3, -1, -2, 5, -7}, 1+r.IntN(2)))
	}
	wkst := r.IntN(7)
	if r.IntN(3) == 0 {
		parts = append(parts, "WKST="+rfcDays[wkst])
	} else {
		wkst = 1
	}
	if freq == "WEEKLY" && strings.Contains(strings.Join(parts, ";"), "BYSETPOS") {
		// dateutil starts its first week at DTSTART rather than at WKST,
		// so BYSETPOS picks from a partial week; start on WKST.
		start = start.AddDate(0, 0, -(int(start.Weekday())-wkst+7)%7)
	}
	switch r.IntN(4) {
	case 0:
		parts = append(parts, fmt.Sprintf("COUNT=%d", 1+r.IntN(60)))
	case 1:
		until := local.Add(time.Duration(r.IntN(48*60)-24*60) * time.Minute)
		parts = append(parts, "UNTIL="+until.Format("20060102T150405"))
	}
	r.Shuffle(len(parts)-1, func(i, j int) { parts[i+1], parts[j+1] = parts[j+1], parts[i+1] })
	return strings.Join(parts, ";"), start, hot
}

// genDSTRule builds a rule that surely meets the transition `at`: readings
// every day (or week, on the transition's weekday) in the hours around it,
// from a DTSTART a few days before.
func genDSTRule(r *rand.Rand, loc *time.Location, at time.Time) (string, time.Time) {
	local := at.In(loc)
	hours := map[int]bool{}
	for _, d := range []time.Duration{-time.Hour, 0, time.Hour} {
		hours[local.Add(d).Hour()] = true
		hours[local.Add(d).Add(-90*time.Minute).Hour()] = true
	}
	var hs []string
	for h := range 24 {
		if hours[h] {
			hs = append(hs, fmt.Sprint(h))
		}
	}
	var rule string
	switch r.IntN(4) {
	case 0:
		rule = "FREQ=WEEKLY;BYDAY=" + rfcDays[int(local.Weekday())]
	case 1:
		rule = fmt.Sprintf("FREQ=HOURLY;INTERVAL=%d", 1+r.IntN(3))
	default:
		rule = "FREQ=DAILY"
	}
	if !strings.HasPrefix(rule, "FREQ=HOURLY") || r.IntN(2) == 0 {
		rule += ";BYHOUR=" + strings.Join(hs, ",")
	}
	rule += ";BYMINUTE=" + []string{"0,30", "15,45", "0,10,20,30,40,50", "5"}[r.IntN(4)]
	if r.IntN(3) == 0 {
		rule += fmt.Sprintf(";COUNT=%d", 5+r.IntN(40))
	}
	start := local.Add(-time.Duration(1+r.IntN(72)) * time.Hour).Truncate(time.Hour)
	return rule, start
}

func TestRRuleAgainstDateutil(t *testing.T) {
	r := oracleRand(t)
	perZone := oracleCount(24, 8)
	from, to := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	var cases []*oracleCase
	resolvers := map[string]*resolver{}
	refused := 0
	for _, z := range oracleZones {
		loc := mustZone(t, z)
		res := newResolver(loc, from.AddDate(-3, 0, 0), to.AddDate(3, 0, 0))
		resolvers[z] = res
		tr := transitions(loc, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), to)
		if len(tr) == 0 {
			tr = []time.Time{time.Date(2027, 3, 14, 12, 0, 0, 0, time.UTC)} // an ordinary day
		}
		for range perZone {
			at := tr[r.IntN(len(tr))]
			text, start, _ := genRule(r, loc, at)
			if r.IntN(3) == 0 {
				text, start = genDSTRule(r, loc, at)
			}
			c := &oracleCase{ID: len(cases), Rule: text, zone: z, loc: loc, start: start,
				gap: GapPolicy(r.IntN(2)), rep: RepeatPolicy(r.IntN(3)), Limit: 250}
			c.Dtstart = start.Format(isoWall)
			c.end = start.AddDate(3, 0, 0)
			c.End = c.end.Format(isoWall)
			full := "RRULE:" + text
			// EXDATEs and RDATEs on the minute grid around the transition,
			// in its gap and repeat as often as not.
			for range r.IntN(4) {
				w := wallSeconds(at.In(loc).Add(time.Duration(r.IntN(6*60)-3*60) * time.Minute).Truncate(time.Minute))
				if r.IntN(2) == 0 {
					c.Rdate = append(c.Rdate, isoOf(w))
				}
			}
			s0, err := ParseRRule(full, start, Options{Location: loc})
			if err != nil {
				refused++
				continue
			}
			// Exclude a few of the rule's own readings.
			rr := s0.(*rrule)
			w := rr.dtstart
			for range r.IntN(4) {
				x, ok := rr.ruleNext(w+int64(r.IntN(3))*3600*24, 1<<62)
				if !ok {
					break
				}
				c.Exdate = append(c.Exdate, isoOf(x))
				w = x + 1
			}
			toRFC := func(v []string) string {
				var s []string
				for _, x := range v {
					tt, _ := time.Parse(isoWall, x)
					s = append(s, tt.Format("20060102T150405"))
				}
				return strings.Join(s, ",")
			}
			if len(c.Exdate) > 0 {
				full += "\nEXDATE:" + toRFC(c.Exdate)
			}
			if len(c.Rdate) > 0 {
				full += "\nRDATE:" + toRFC(c.Rdate)
			}
			s, err := ParseRRule(full, start, Options{Location: loc, Gap: c.gap, Repeat: c.rep})
			if err != nil {
				// The EXDATEs took every reading the rule had.
				refused++
				continue
			}
			c.sched, c.hourly = s, s.(*rrule).everyHour()
			c.Rule = text
			cases = append(cases, c)
		}
	}
	if refused > len(cases)/3 {
		t.Fatalf("the generator made %d rules that never fire against %d that do; it is not testing much", refused, len(cases))
	}
	runDateutil(t, cases)

	failures, readings, inGap, repeated := 0, 0, 0, 0
	for _, c := range cases {
		res := resolvers[c.zone]
		got := c.results.Readings
		readings += len(got)
		cut := wallSeconds(c.end) - res.maxOff
		if c.results.Truncated {
			last, _ := time.Parse(isoWall, got[len(got)-1])
			cut = last.Unix() - res.maxOff
		}
		var want []int64
		for _, x := range got {
			k, _ := time.Parse(isoWall, x)
			switch len(res.shown(k.Unix())) {
			case 0:
				inGap++
			case 1:
			default:
				repeated++
			}
			for _, inst := range res.fires(k.Unix(), c.hourly, c.gap, c.rep) {
				if inst <= cut {
					want = append(want, inst)
				}
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
		var have []int64
		for x := c.sched.Next(c.start.AddDate(0, 0, -1)); !x.IsZero() && x.Unix() <= cut; x = c.sched.Next(x) {
			have = append(have, x.Unix())
			if len(have) > len(want)+1 {
				break
			}
		}
		if !slices.Equal(have, want) {
			failures++
			t.Errorf("case %d: %q (EXDATE %v, RDATE %v) from %s in %s, gap %v, repeat %v:\n%s", c.ID, c.Rule, c.Exdate, c.Rdate,
				c.Dtstart, c.zone, c.gap, c.rep, diffInstants(c.loc, have, want))
		} else if len(want) > 0 {
			// Next from arbitrary instants, not only along the chain.
			for range 3 {
				after := time.Unix(want[0]+r.Int64N(want[len(want)-1]-want[0]+1), r.Int64N(1e9))
				i, _ := slices.BinarySearch(want, after.Unix()+1)
				if x := c.sched.Next(after); i < len(want) && x.Unix() != want[i] {
					failures++
					t.Errorf("case %d: %q in %s: Next(%v) = %v, want %v", c.ID, c.Rule, c.zone, after.UTC(), x.UTC(), time.Unix(want[i], 0).UTC())
				}
			}
		}
		if failures > 10 {
			t.Fatal("too many differences")
		}
	}
	t.Logf("%d rules in %d zones (%d generated rules never fire and were refused), %d readings compared, %d in a DST gap, %d repeated",
		len(cases), len(oracleZones), refused, readings, inGap, repeated)
	if inGap == 0 || repeated == 0 {
		t.Fatal("no reading fell in a DST gap or repeat: the generator misses the transitions")
	}
}
