package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// wallIn returns the instant of a wall reading in loc that is not in a
// transition (test inputs only).
func wallIn(loc *time.Location, y int, m time.Month, d, h, mi int) time.Time {
	return time.Date(y, m, d, h, mi, 0, 0, loc)
}

// The examples of RFC 5545 section 3.8.5.3 (in America/New_York, as there)
// and the worked examples of docs/schedules.md.
func TestRRuleExamples(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	cases := []struct {
		name, rule string
		dtstart    time.Time
		want       []string // local wall readings, "2006-01-02 15:04"
	}{
		{"monthly on the second-to-last Monday, 6 times", "FREQ=MONTHLY;COUNT=6;BYDAY=-2MO", wallIn(ny, 1997, 9, 22, 9, 0),
			[]string{"1997-09-22 09:00", "1997-10-20 09:00", "1997-11-17 09:00", "1997-12-22 09:00", "1998-01-19 09:00", "1998-02-16 09:00"}},
		{"third of Tuesday, Wednesday or Thursday, 3 months", "FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3", wallIn(ny, 1997, 9, 4, 9, 0),
			[]string{"1997-09-04 09:00", "1997-10-07 09:00", "1997-11-06 09:00"}},
		{"Monday of week 20", "FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO", wallIn(ny, 1997, 5, 12, 9, 0),
			[]string{"1997-05-12 09:00", "1998-05-11 09:00", "1999-05-17 09:00"}},
		{"every 20th Monday of the year", "FREQ=YEARLY;BYDAY=20MO", wallIn(ny, 1997, 5, 19, 9, 0),
			[]string{"1997-05-19 09:00", "1998-05-18 09:00", "1999-05-17 09:00"}},
		{"Friday the 13th", "RRULE:FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13\nEXDATE:19970902T090000", wallIn(ny, 1997, 9, 2, 9, 0),
			[]string{"1998-02-13 09:00", "1998-03-13 09:00", "1998-11-13 09:00", "1999-08-13 09:00", "2000-10-13 09:00"}},
		{"WKST=MO", "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO", wallIn(ny, 1997, 8, 5, 9, 0),
			[]string{"1997-08-05 09:00", "1997-08-10 09:00", "1997-08-19 09:00", "1997-08-24 09:00"}},
		{"WKST=SU", "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU", wallIn(ny, 1997, 8, 5, 9, 0),
			[]string{"1997-08-05 09:00", "1997-08-17 09:00", "1997-08-19 09:00", "1997-08-31 09:00"}},
		{"every other week on Monday, Wednesday and Friday until 24 December", "FREQ=WEEKLY;INTERVAL=2;UNTIL=19971224T000000Z;WKST=SU;BYDAY=MO,WE,FR", wallIn(ny, 1997, 12, 1, 9, 0),
			[]string{"1997-12-01 09:00", "1997-12-03 09:00", "1997-12-05 09:00", "1997-12-15 09:00", "1997-12-17 09:00", "1997-12-19 09:00"}},
		{"the second Tuesday of every month at 09:00", "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0", wallIn(ny, 2026, 11, 26, 14, 7).Add(13 * time.Second),
			[]string{"2026-12-08 09:00", "2027-01-12 09:00", "2027-02-09 09:00", "2027-03-09 09:00"}},
		{"every 2 weeks on Monday and Thursday", "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH", wallIn(ny, 2026, 12, 7, 8, 30),
			[]string{"2026-12-07 08:30", "2026-12-10 08:30", "2026-12-21 08:30", "2026-12-24 08:30", "2027-01-04 08:30"}},
		{"the last weekday of the month", "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", wallIn(ny, 2026, 12, 1, 17, 0),
			[]string{"2026-12-31 17:00", "2027-01-29 17:00", "2027-02-26 17:00", "2027-03-31 17:00", "2027-04-30 17:00"}},
		{"the last business day of the quarter", "FREQ=MONTHLY;INTERVAL=3;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", wallIn(ny, 2026, 12, 1, 17, 0),
			[]string{"2026-12-31 17:00", "2027-03-31 17:00", "2027-06-30 17:00", "2027-09-30 17:00"}},
		{"every 3 hours, business hours", "FREQ=HOURLY;INTERVAL=3;BYHOUR=9,12,15;BYDAY=MO,TU,WE,TH,FR", wallIn(ny, 2026, 12, 4, 9, 0),
			[]string{"2026-12-04 09:00", "2026-12-04 12:00", "2026-12-04 15:00", "2026-12-07 09:00"}},
		{"last day of February and RDATE", "RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=-1\nRDATE:20270704T120000", wallIn(ny, 2027, 1, 1, 6, 0),
			[]string{"2027-02-28 06:00", "2027-07-04 12:00", "2028-02-29 06:00"}},
		{"local UNTIL is inclusive", "FREQ=DAILY;UNTIL=20270103T090000", wallIn(ny, 2027, 1, 1, 9, 0),
			[]string{"2027-01-01 09:00", "2027-01-02 09:00", "2027-01-03 09:00"}},
		{"date UNTIL takes the whole day", "FREQ=DAILY;UNTIL=20270102;BYHOUR=9,23", wallIn(ny, 2027, 1, 1, 0, 0),
			[]string{"2027-01-01 09:00", "2027-01-01 23:00", "2027-01-02 09:00", "2027-01-02 23:00"}},
		{"plain and ordinal weekdays together are a union", "FREQ=MONTHLY;BYDAY=SA,1MO", wallIn(ny, 2027, 2, 1, 9, 0),
			[]string{"2027-02-01 09:00", "2027-02-06 09:00", "2027-02-13 09:00", "2027-02-20 09:00", "2027-02-27 09:00", "2027-03-01 09:00"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseRRule(tc.rule, tc.dtstart, Options{Location: ny})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for x := range Preview(s, tc.dtstart.Add(-time.Second), len(tc.want)+1) {
				got = append(got, x.Format("2006-01-02 15:04"))
			}
			// A rule with COUNT or UNTIL must end where the list does;
			// others go on.
			if !strings.Contains(tc.rule, "COUNT") && !strings.Contains(tc.rule, "UNTIL") && len(got) > len(tc.want) {
				got = got[:len(tc.want)]
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
			// The canonical form reads back to the same schedule.
			s2, err := ParseRRule(s.String(), tc.dtstart, Options{Location: ny})
			if err != nil {
				t.Fatalf("canonical %q: %v", s.String(), err)
			}
			for a, b := range zip(Preview(s, tc.dtstart, 20), Preview(s2, tc.dtstart, 20)) {
				if !a.Equal(b) {
					t.Fatalf("canonical %q differs: %v vs %v", s.String(), a, b)
				}
			}
		})
	}
}

func zip(a, b func(func(time.Time) bool)) func(func(time.Time, time.Time) bool) {
	return func(yield func(time.Time, time.Time) bool) {
		var as, bs []time.Time
		a(func(t time.Time) bool { as = append(as, t); return true })
		b(func(t time.Time) bool { bs = append(bs, t); return true })
		for i := range max(len(as), len(bs)) {
			var x, y time.Time
			if i < len(as) {
				x = as[i]
			}
			if i < len(bs) {
				y = bs[i]
			}
			if !yield(x, y) {
				return
			}
		}
	}
}

// A rule meets daylight saving exactly as cron does.
func TestRRuleDST(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	lh := mustZone(t, "Australia/Lord_Howe")
	utc := func(y int, m time.Month, d, h, mi int) string {
		return time.Date(y, m, d, h, mi, 0, 0, time.UTC).Format(time.RFC3339)
	}
	cases := []struct {
		name   string
		loc    *time.Location
		rule   string
		from   time.Time
		gap    GapPolicy
		repeat RepeatPolicy
		want   []string
	}{
		{"gap SHIFT", ny, "FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0", time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC), GapShift, RepeatFirst,
			[]string{utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)}},
		{"gap SKIP", ny, "FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0", time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC), GapSkip, RepeatFirst,
			[]string{utc(2026, 3, 7, 7, 30), utc(2026, 3, 9, 6, 30)}},
		{"repeat FIRST", ny, "FREQ=DAILY;BYHOUR=1;BYMINUTE=30;BYSECOND=0", time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC), GapShift, RepeatFirst,
			[]string{utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)}},
		{"repeat LAST", ny, "FREQ=DAILY;BYHOUR=1;BYMINUTE=30;BYSECOND=0", time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC), GapShift, RepeatLast,
			[]string{utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)}},
		{"repeat BOTH", ny, "FREQ=DAILY;BYHOUR=1;BYMINUTE=30;BYSECOND=0", time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC), GapShift, RepeatBoth,
			[]string{utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)}},
		{"hourly follows real time", ny, "FREQ=HOURLY;BYMINUTE=0;BYSECOND=0", time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC), GapShift, RepeatFirst,
			[]string{utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 7, 0)}},
		{"hourly through the gap", ny, "FREQ=HOURLY;BYMINUTE=0;BYSECOND=0", time.Date(2026, 3, 8, 5, 30, 0, 0, time.UTC), GapShift, RepeatFirst,
			[]string{utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0)}},
		{"half-hour gap of Lord Howe", lh, "FREQ=DAILY;BYHOUR=2;BYMINUTE=0,15,45;BYSECOND=0", time.Date(2026, 10, 3, 12, 0, 0, 0, time.UTC), GapShift, RepeatFirst,
			// 02:00 and 02:15 fall in the gap (02:00-02:30) and shift to 02:30 +11; 02:45 is real.
			[]string{utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 45), utc(2026, 10, 4, 15, 0)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseRRule(tc.rule, tc.from.Add(-30*24*time.Hour), Options{Location: tc.loc, Gap: tc.gap, Repeat: tc.repeat})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for x := range Preview(s, tc.from, len(tc.want)) {
				got = append(got, x.UTC().Format(time.RFC3339))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

// EXDATE and RDATE in UTC act on instants; a UTC UNTIL bounds the rule but
// not the RDATEs; Start and End bound everything.
func TestRRuleInstantDates(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	start := time.Date(2027, 1, 4, 9, 0, 0, 0, ny)
	s, err := ParseRRule("RRULE:FREQ=DAILY;UNTIL=20270107T000000Z EXDATE:20270105T140000Z RDATE:20270110T120000Z,20270105T140000Z",
		start, Options{Location: ny, End: time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for x := range Preview(s, start.Add(-time.Second), 10) {
		got = append(got, x.UTC().Format(time.RFC3339))
	}
	want := "2027-01-04T14:00:00Z,2027-01-06T14:00:00Z,2027-01-10T12:00:00Z"
	if strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestRRuleErrors(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for rule, want := range map[string]string{
		"":                                          "needs an RRULE line",
		"FREQ=SECONDLY":                             "FREQ=SECONDLY is not supported",
		"FREQ=FORTNIGHTLY":                          "is not one of HOURLY",
		"FREQ=DAILY;FREQ=WEEKLY":                    "FREQ is given twice",
		"FREQ=DAILY;INTERVAL=0":                     "INTERVAL=0 must be a whole number from 1 to 1000",
		"FREQ=DAILY;COUNT=10001":                    "COUNT=10001 must be a whole number from 1 to 10000",
		"FREQ=DAILY;BYMONTHDAY=0":                   `BYMONTHDAY: "0" must be a whole number from 1 to 31 or -31 to -1`,
		"FREQ=YEARLY;BYYEARDAY=367":                 "BYYEARDAY",
		"FREQ=DAILY;BYSETPOS=1":                     "BYSETPOS needs another BY rule",
		"FREQ=MONTHLY;BYDAY=6MO":                    "a month has at most 5 of a weekday",
		"FREQ=YEARLY;BYWEEKNO=1;BYDAY=1MO":          "cannot be combined with BYWEEKNO",
		"FREQ=DAILY;BYDAY=XX":                       `BYDAY: "XX" is not a weekday`,
		"FREQ=DAILY;WKST=XX":                        "WKST=XX is not a weekday",
		"FREQ=DAILY;UNTIL=2027":                     "UNTIL=2027 is not YYYYMMDD",
		"FREQ=DAILY;BYEASTER=0":                     "BYEASTER is not supported",
		"FREQ=DAILY;FOO=1":                          "FOO is not an RRULE part",
		"FREQ=DAILY;COUNT=2;UNTIL=20270101":         "COUNT and UNTIL cannot both be given",
		"FREQ=DAILY RRULE:FREQ=WEEKLY":              "more than one RRULE",
		"FREQ=DAILY EXDATE:20270101":                `EXDATE: "20270101" is not YYYYMMDDTHHMMSS`,
		"DTSTART:20270101T000000 FREQ=DAILY":        "DTSTART is not part of the rule",
		"FREQ=DAILY X-FOO:1":                        "is not an RRULE, EXDATE or RDATE line",
		"FREQ=MONTHLY;BYMONTHDAY=31;BYMONTH=4,6":    "never fires",
		"FREQ=DAILY;UNTIL=20261130T000000":          "never fires",
		"FREQ=DAILY;COUNT=1 EXDATE:20261201T090000": "never fires",
	} {
		_, err := ParseRRule(rule, start, Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Field != FieldRRule || !strings.Contains(pe.Reason, want) {
			t.Errorf("%q: %v, want a ParseError on rrule saying %q", rule, err, want)
		}
		if strings.Contains(want, "never fires") != errors.Is(err, ErrNeverFires) {
			t.Errorf("%q: errors.Is(ErrNeverFires) = %v", rule, errors.Is(err, ErrNeverFires))
		}
	}
}

// Next is strictly increasing and never returns an instant Preview's chain
// would skip, from any starting point, including far from DTSTART.
func TestRRuleNextFarFromDtstart(t *testing.T) {
	syd := mustZone(t, "Australia/Sydney")
	s, err := ParseRRule("FREQ=YEARLY;INTERVAL=3;BYMONTH=2;BYDAY=-1MO;BYHOUR=10;BYMINUTE=0;BYSECOND=0", time.Date(2026, 1, 1, 0, 0, 0, 0, syd), Options{Location: syd})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Next(time.Date(2500, 6, 1, 0, 0, 0, 0, time.UTC))
	// 2500 = 2026 + 3*158 keeps its February, but June is past it: 2503,
	// whose last Monday of February is the 26th.
	if want := time.Date(2503, 2, 26, 10, 0, 0, 0, syd); !got.Equal(want) {
		t.Fatalf("Next = %v, want %v", got, want)
	}
	if x := s.Next(time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC)); !x.IsZero() {
		t.Fatalf("Next past 9999 = %v", x)
	}
}
