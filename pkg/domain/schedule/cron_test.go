package schedule

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// rfc is how the tables write instants: RFC 3339 with the zone's offset,
// which names one instant exactly and shows the wall time beside it.
const rfc = time.RFC3339

// next returns the first n firings after from, formatted in the schedule's
// zone.
func next(t *testing.T, s Schedule, from time.Time, n int) []string {
	t.Helper()
	var out []string
	for x := range Preview(s, from, n) {
		out = append(out, x.Format(rfc))
	}
	return out
}

func mustParse(t testing.TB, expr string, opts Options) Schedule {
	t.Helper()
	s, err := Parse(expr, opts)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return s
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	x, err := time.Parse(rfc, s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestConstructs covers every piece of the syntax in UTC, from Thursday
// 2026-01-01T00:00:00Z (Next is strictly after it).
func TestConstructs(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		expr string
		want []string
	}{
		{"* * * * *", []string{"2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z", "2026-01-01T00:03:00Z"}},
		{"*/15 * * * *", []string{"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:45:00Z", "2026-01-01T01:00:00Z"}},
		{"5/20 * * * *", []string{"2026-01-01T00:05:00Z", "2026-01-01T00:25:00Z", "2026-01-01T00:45:00Z", "2026-01-01T01:05:00Z"}},
		{"10-20/5 3 * * *", []string{"2026-01-01T03:10:00Z", "2026-01-01T03:15:00Z", "2026-01-01T03:20:00Z", "2026-01-02T03:10:00Z"}},
		{"0 8-10 * * *", []string{"2026-01-01T08:00:00Z", "2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-02T08:00:00Z"}},
		{"0,30 12 * * *", []string{"2026-01-01T12:00:00Z", "2026-01-01T12:30:00Z", "2026-01-02T12:00:00Z"}},
		{"0 9 * * MON-FRI", []string{"2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z", "2026-01-05T09:00:00Z"}},
		{"0 9 * * mon-fri/2", []string{"2026-01-02T09:00:00Z", "2026-01-05T09:00:00Z", "2026-01-07T09:00:00Z"}},
		{"0 0 1,15 * *", []string{"2026-01-15T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-15T00:00:00Z"}},
		{"0 0 1 JAN,jul *", []string{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"0 0 1 */4 *", []string{"2026-05-01T00:00:00Z", "2026-09-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		// Day-of-week 0 and 7 are both Sunday.
		{"0 0 * * 0", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * 7", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * Sun", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * 5-7", []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-09T00:00:00Z"}},
		// Both day fields restricted: either matches (Friday, or the 13th).
		{"0 0 13 * FRI", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z"}},
		// A stepped star restricts: the 1st, 11th, 21st, 31st, or a Monday.
		{"0 0 */10 * MON", []string{"2026-01-05T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z", "2026-01-19T00:00:00Z", "2026-01-21T00:00:00Z"}},
		// "?" and "*/1" leave the other day field in charge.
		{"0 0 13 * ?", []string{"2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"}},
		{"0 0 ? * FRI", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"0 0 */1 * FRI", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"}},
		// Quartz day-of-month. January 31st 2026 is a Saturday, February
		// 1st and 15th Sundays, May 31st a Sunday, August 1st and 15th
		// Saturdays.
		{"0 0 L * *", []string{"2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"}},
		{"0 0 L-2 * *", []string{"2026-01-29T00:00:00Z", "2026-02-26T00:00:00Z", "2026-03-29T00:00:00Z"}},
		{"0 0 LW * *", []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z", "2026-05-29T00:00:00Z"}},
		{"0 0 15W * *", []string{"2026-01-15T00:00:00Z", "2026-02-16T00:00:00Z", "2026-03-16T00:00:00Z", "2026-04-15T00:00:00Z", "2026-05-15T00:00:00Z", "2026-06-15T00:00:00Z", "2026-07-15T00:00:00Z", "2026-08-14T00:00:00Z"}},
		{"0 0 1W * *", []string{"2026-02-02T00:00:00Z", "2026-03-02T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z", "2026-08-03T00:00:00Z"}},
		// 31W: nothing in 30-day months, never into the next month.
		{"0 0 31W * *", []string{"2026-01-30T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-29T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z", "2026-10-30T00:00:00Z"}},
		{"0 0 1,L * *", []string{"2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-28T00:00:00Z"}},
		// Quartz day-of-week, cron numbering (5 = Friday).
		{"0 0 * * 5L", []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"}},
		{"0 0 * * FRIL", []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"}},
		{"0 0 * * 5#3", []string{"2026-01-16T00:00:00Z", "2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z"}},
		{"0 0 * * MON#5", []string{"2026-03-30T00:00:00Z", "2026-06-29T00:00:00Z", "2026-08-31T00:00:00Z"}},
		{"0 0 * * 1#1,FRI#3", []string{"2026-01-05T00:00:00Z", "2026-01-16T00:00:00Z", "2026-02-02T00:00:00Z", "2026-02-20T00:00:00Z"}},
		{"0 0 * * 7#1", []string{"2026-01-04T00:00:00Z", "2026-02-01T00:00:00Z"}},
		// February 29th comes every four years.
		{"0 0 29 2 *", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		// Six fields: seconds first.
		{"*/20 * * * * *", []string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"30 0 0 1 1 *", []string{"2026-01-01T00:00:30Z", "2027-01-01T00:00:30Z"}},
		{"15,45 * 14 * * *", []string{"2026-01-01T14:00:15Z", "2026-01-01T14:00:45Z", "2026-01-01T14:01:15Z"}},
		// Macros.
		{"@yearly", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@annually", []string{"2027-01-01T00:00:00Z"}},
		{"@monthly", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@weekly", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"@daily", []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"}},
		{"@midnight", []string{"2026-01-02T00:00:00Z"}},
		{"@hourly", []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"@HOURLY", []string{"2026-01-01T01:00:00Z"}},
		// @every anchors at the Unix epoch. 2026-01-01T00:00Z (1767225600)
		// is a multiple of 90 minutes from it, and 8 seconds past a
		// multiple of 11 seconds.
		{"@every 90m", []string{"2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"}},
		{"@every 11s", []string{"2026-01-01T00:00:03Z", "2026-01-01T00:00:14Z"}},
		// Spacing and leading zeros are free.
		{"  00 09   *  *  1 ", []string{"2026-01-05T09:00:00Z"}},
	}
	for _, tc := range tests {
		s := mustParse(t, tc.expr, Options{})
		if got := next(t, s, from, len(tc.want)); !slices.Equal(got, tc.want) {
			t.Errorf("%q:\n got %v\nwant %v", tc.expr, got, tc.want)
		}
	}
}

// dstCase is one row of the DST tables: an expression in a zone under a
// policy, and its exact firings after `from`.
type dstCase struct {
	name string
	expr string
	gap  GapPolicy
	rep  RepeatPolicy
	from string
	want []string
}

func runDST(t *testing.T, zone string, tests []dstCase) {
	t.Helper()
	loc := mustZone(t, zone)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.expr, Options{Location: loc, Gap: tc.gap, Repeat: tc.rep})
			got := next(t, s, mustTime(t, tc.from), len(tc.want))
			if !slices.Equal(got, tc.want) {
				t.Errorf("%q in %s (gap %v, repeat %v) after %s:\n got %v\nwant %v", tc.expr, zone, tc.gap, tc.rep, tc.from, got, tc.want)
			}
		})
	}
}

// New York: 2026-03-08 02:00 EST becomes 03:00 EDT (07:00Z); 2026-11-01
// 02:00 EDT becomes 01:00 EST (06:00Z), so 01:00-01:59 happens twice.
func TestDSTNewYork(t *testing.T) {
	t.Parallel()
	spring, fall := "2026-03-07T12:00:00-05:00", "2026-10-31T12:00:00-04:00"
	runDST(t, "America/New_York", []dstCase{
		{"gap shift", "30 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"gap skip", "30 2 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-03-09T02:30:00-04:00"}},
		{"gap shift at the hour", "0 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"several gap matches collapse", "0,15,30,45 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		// 02:00 shifts to 03:00 EDT, which also matches for real: one
		// firing at that instant, not two.
		{"shifted and real coincide", "0 2,3 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T03:00:00-04:00"}},
		// 02:30 shifts to 03:00; 03:30 is a real match of its own.
		{"shifted then real", "30 2,3 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"skip keeps the real match", "30 2,3 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"before the gap is untouched", "59 1 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T01:59:00-05:00", "2026-03-09T01:59:00-04:00"}},
		// Hour "*": real elapsed time; 02:xx simply does not happen.
		{"hourly through the gap", "*/30 * * * *", GapShift, RepeatFirst, "2026-03-08T00:45:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"}},
		{"hourly ignores skip", "30 * * * *", GapSkip, RepeatFirst, "2026-03-08T00:45:00-05:00",
			[]string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"}},
		{"first", "30 1 * * *", GapShift, RepeatFirst, fall,
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"last", "30 1 * * *", GapShift, RepeatLast, fall,
			[]string{"2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"both", "30 1 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"}},
		{"not repeated", "0 2 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-11-01T02:00:00-05:00", "2026-11-02T02:00:00-05:00"}},
		{"hours 0-3, first", "0 0-3 * * *", GapShift, RepeatFirst, "2026-10-31T23:30:00-04:00",
			[]string{"2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		{"hours 0-3, last", "0 0-3 * * *", GapShift, RepeatLast, "2026-10-31T23:30:00-04:00",
			[]string{"2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		{"hours 0-3, both", "0 0-3 * * *", GapShift, RepeatBoth, "2026-10-31T23:30:00-04:00",
			[]string{"2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		// Hour "*" fires at both occurrences whatever the policy.
		{"hourly, first", "30 * * * *", GapShift, RepeatFirst, "2026-11-01T00:00:00-04:00",
			[]string{"2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"}},
		{"hourly, last", "30 * * * *", GapShift, RepeatLast, "2026-11-01T00:00:00-04:00",
			[]string{"2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"}},
		// Next from inside the repeated hour, after the first 01:30.
		{"inside repeat, first", "30 1 * * *", GapShift, RepeatFirst, "2026-11-01T01:45:00-04:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"inside repeat, last", "30 1 * * *", GapShift, RepeatLast, "2026-11-01T01:45:00-04:00",
			[]string{"2026-11-01T01:30:00-05:00"}},
		{"inside repeat, both", "30 1 * * *", GapShift, RepeatBoth, "2026-11-01T01:45:00-04:00",
			[]string{"2026-11-01T01:30:00-05:00"}},
		// Next from exactly the instant before the gap closes.
		{"from the last second before the gap", "30 2 * * *", GapShift, RepeatFirst, "2026-03-08T01:59:59-05:00",
			[]string{"2026-03-08T03:00:00-04:00"}},
		{"from the transition itself", "30 2 * * *", GapShift, RepeatFirst, "2026-03-08T03:00:00-04:00",
			[]string{"2026-03-09T02:30:00-04:00"}},
	})
	runDST(t, "America/New_York", []dstCase{
		{"first, every 20 minutes of the hour", "*/20 1 * * *", GapShift, RepeatFirst, fall,
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00", "2026-11-02T01:00:00-05:00"}},
		{"last, every 20 minutes of the hour", "*/20 1 * * *", GapShift, RepeatLast, fall,
			[]string{"2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00", "2026-11-02T01:00:00-05:00"}},
		{"both, every 20 minutes of the hour", "*/20 1 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
				"2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00"}},
		{"seconds in the gap collapse", "*/10 * 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:00:10-04:00"}},
	})
}

// London: 2026-03-29 01:00 GMT becomes 02:00 BST; 2026-10-25 02:00 BST
// becomes 01:00 GMT.
func TestDSTLondon(t *testing.T) {
	t.Parallel()
	runDST(t, "Europe/London", []dstCase{
		{"gap shift", "30 1 * * *", GapShift, RepeatFirst, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
		{"gap skip", "30 1 * * *", GapSkip, RepeatFirst, "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T01:30:00+01:00"}},
		{"first", "30 1 * * *", GapShift, RepeatFirst, "2026-10-24T12:00:00+01:00",
			[]string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
		{"last", "30 1 * * *", GapShift, RepeatLast, "2026-10-24T12:00:00+01:00",
			[]string{"2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"}},
		{"both", "30 1 * * *", GapShift, RepeatBoth, "2026-10-24T12:00:00+01:00",
			[]string{"2026-10-25T01:30:00+01:00", "2026-10-25T01:30:00Z"}},
		{"midnight is untouched", "0 0 * * *", GapShift, RepeatFirst, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-30T00:00:00+01:00"}},
	})
}

// Sydney, southern hemisphere: 2026-04-05 03:00 AEDT becomes 02:00 AEST;
// 2026-10-04 02:00 AEST becomes 03:00 AEDT.
func TestDSTSydney(t *testing.T) {
	t.Parallel()
	runDST(t, "Australia/Sydney", []dstCase{
		{"first", "30 2 * * *", GapShift, RepeatFirst, "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"}},
		{"last", "30 2 * * *", GapShift, RepeatLast, "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T02:30:00+10:00", "2026-04-06T02:30:00+10:00"}},
		{"both", "30 2 * * *", GapShift, RepeatBoth, "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T02:30:00+11:00", "2026-04-05T02:30:00+10:00", "2026-04-06T02:30:00+10:00"}},
		{"gap shift", "30 2 * * *", GapShift, RepeatFirst, "2026-10-03T12:00:00+10:00",
			[]string{"2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"}},
		{"gap skip", "30 2 * * *", GapSkip, RepeatFirst, "2026-10-03T12:00:00+10:00",
			[]string{"2026-10-05T02:30:00+11:00"}},
		{"hourly in the repeat", "0 * * * *", GapShift, RepeatFirst, "2026-04-05T01:30:00+11:00",
			[]string{"2026-04-05T02:00:00+11:00", "2026-04-05T02:00:00+10:00", "2026-04-05T03:00:00+10:00"}},
	})
}

// Lord Howe moves by 30 minutes: 2026-04-05 02:00 (+11) becomes 01:30
// (+10:30), so 01:30-01:59 happens twice; 2026-10-04 02:00 (+10:30)
// becomes 02:30 (+11), so 02:00-02:29 never happens.
func TestDSTLordHowe(t *testing.T) {
	t.Parallel()
	fall, spring := "2026-04-04T12:00:00+11:00", "2026-10-03T12:00:00+10:30"
	runDST(t, "Australia/Lord_Howe", []dstCase{
		{"first", "45 1 * * *", GapShift, RepeatFirst, fall,
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"last", "45 1 * * *", GapShift, RepeatLast, fall,
			[]string{"2026-04-05T01:45:00+10:30", "2026-04-06T01:45:00+10:30"}},
		{"both", "45 1 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30"}},
		{"before the repeated half hour", "15 1 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-04-05T01:15:00+11:00", "2026-04-06T01:15:00+10:30"}},
		{"first, half-hourly in hour 1", "*/30 1 * * *", GapShift, RepeatFirst, fall,
			[]string{"2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-06T01:00:00+10:30"}},
		{"last, half-hourly in hour 1", "*/30 1 * * *", GapShift, RepeatLast, fall,
			[]string{"2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-06T01:00:00+10:30"}},
		{"hourly through the repeat", "*/15 * * * *", GapShift, RepeatFirst, "2026-04-05T00:50:00+11:00",
			[]string{"2026-04-05T01:00:00+11:00", "2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
				"2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
		{"gap shift", "15 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"gap skip", "15 2 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-10-05T02:15:00+11:00"}},
		// 02:00 shifts to 02:30, where the real 02:30 also matches.
		{"shifted and real coincide", "0,30 2 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"}},
		{"skip keeps the real half hour", "0,30 2 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"}},
		{"hourly through the gap", "*/15 * * * *", GapShift, RepeatFirst, "2026-10-04T01:20:00+10:30",
			[]string{"2026-10-04T01:30:00+10:30", "2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"}},
	})
}

// Chatham keeps a 45-minute offset: 2026-04-05 03:45 (+13:45) becomes 02:45
// (+12:45); 2026-09-27 02:45 (+12:45) becomes 03:45 (+13:45).
func TestDSTChatham(t *testing.T) {
	t.Parallel()
	fall, spring := "2026-04-04T12:00:00+13:45", "2026-09-26T12:00:00+12:45"
	runDST(t, "Pacific/Chatham", []dstCase{
		{"first", "0 3 * * *", GapShift, RepeatFirst, fall,
			[]string{"2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"}},
		{"last", "0 3 * * *", GapShift, RepeatLast, fall,
			[]string{"2026-04-05T03:00:00+12:45", "2026-04-06T03:00:00+12:45"}},
		{"both", "0 3 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-04-05T03:00:00+13:45", "2026-04-05T03:00:00+12:45"}},
		{"before the repeat", "30 2 * * *", GapShift, RepeatBoth, fall,
			[]string{"2026-04-05T02:30:00+13:45", "2026-04-06T02:30:00+12:45"}},
		{"gap shift", "0 3 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"}},
		{"gap skip", "0 3 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-09-28T03:00:00+13:45"}},
		{"gap across an hour boundary", "50 2,3 * * *", GapShift, RepeatFirst, spring,
			[]string{"2026-09-27T03:45:00+13:45", "2026-09-27T03:50:00+13:45", "2026-09-28T02:50:00+13:45"}},
		{"first real minute after the gap", "45 3 * * *", GapSkip, RepeatFirst, spring,
			[]string{"2026-09-27T03:45:00+13:45"}},
	})
}

// Kolkata has had no transitions since 1945; its half-hour offset still
// moves day boundaries away from UTC's.
func TestKolkata(t *testing.T) {
	t.Parallel()
	runDST(t, "Asia/Kolkata", []dstCase{
		{"ordinary", "30 2 * * *", GapShift, RepeatFirst, "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T02:30:00+05:30", "2026-03-09T02:30:00+05:30"}},
		// 2026-02-01 00:00 IST is 2026-01-31 18:30Z, before `from`.
		{"month boundary", "0 0 1 * *", GapShift, RepeatFirst, "2026-01-31T20:00:00Z",
			[]string{"2026-03-01T00:00:00+05:30"}},
		{"hourly", "0 * * * *", GapShift, RepeatFirst, "2026-01-31T18:45:00Z",
			[]string{"2026-02-01T01:00:00+05:30"}},
	})
}

// Santiago springs forward at midnight (2026-09-06 00:00 becomes 01:00), so
// a daily midnight job's time does not exist that day.
func TestDSTSantiagoMidnight(t *testing.T) {
	t.Parallel()
	runDST(t, "America/Santiago", []dstCase{
		{"shift", "0 0 * * *", GapShift, RepeatFirst, "2026-09-05T12:00:00-04:00",
			[]string{"2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"}},
		{"skip", "0 0 * * *", GapSkip, RepeatFirst, "2026-09-05T12:00:00-04:00",
			[]string{"2026-09-07T00:00:00-03:00"}},
		// 2026-04-04 24:00 (-03) becomes 23:00 (-04): 23:xx repeats.
		{"last", "30 23 * * *", GapShift, RepeatLast, "2026-04-04T12:00:00-03:00",
			[]string{"2026-04-04T23:30:00-04:00", "2026-04-05T23:30:00-04:00"}},
	})
}

// Zones whose rules changed: Samoa skipped Friday 2011-12-30 entirely;
// Moscow moved back an hour for good on 2014-10-26.
func TestRuleChanges(t *testing.T) {
	t.Parallel()
	runDST(t, "Pacific/Apia", []dstCase{
		{"a whole day's firings collapse into one", "0 9,17 * * *", GapShift, RepeatFirst, "2011-12-29T12:00:00-10:00",
			[]string{"2011-12-29T17:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T09:00:00+14:00"}},
		{"skip", "0 9,17 * * *", GapSkip, RepeatFirst, "2011-12-29T12:00:00-10:00",
			[]string{"2011-12-29T17:00:00-10:00", "2011-12-31T09:00:00+14:00"}},
		{"day-of-month that never was", "0 12 30 12 *", GapShift, RepeatFirst, "2011-12-01T00:00:00-10:00",
			[]string{"2011-12-31T00:00:00+14:00", "2012-12-30T12:00:00+14:00"}},
	})
	runDST(t, "Europe/Moscow", []dstCase{
		{"first", "30 1 * * *", GapShift, RepeatFirst, "2014-10-25T12:00:00+04:00",
			[]string{"2014-10-26T01:30:00+04:00", "2014-10-27T01:30:00+03:00"}},
		{"last", "30 1 * * *", GapShift, RepeatLast, "2014-10-25T12:00:00+04:00",
			[]string{"2014-10-26T01:30:00+03:00", "2014-10-27T01:30:00+03:00"}},
	})
}

// TestPastTheTzTable runs across the last UTC day of a leap year in years
// Go serves from a zone's TZ footer rule, where ZoneBounds reports a period
// ending before the instant asked about (golang/go#81583). Next must
// neither loop nor skip: an hourly job fires every hour through it.
func TestPastTheTzTable(t *testing.T) {
	t.Parallel()
	for _, loc := range []*time.Location{mustZone(t, "America/New_York"), ruleOnlyZone(t, "rule/New_York", "EST5EDT,M3.2.0,M11.1.0")} {
		for _, year := range []int{2028, 2040} {
			s := mustParse(t, "0 * * * *", Options{Location: loc})
			from := time.Date(year, 12, 30, 12, 0, 0, 0, time.UTC)
			prev := from
			for x := range Preview(s, from, 72) {
				if d := x.Sub(prev); d != time.Hour && prev != from {
					t.Fatalf("%s %d: %v follows %v", loc, year, x, prev)
				}
				prev = x
			}
			if want := from.Add(72 * time.Hour); !prev.Equal(want) {
				t.Errorf("%s %d: 72nd firing %v, want %v", loc, year, prev, want)
			}
			y := mustParse(t, "0 0 1 1 *", Options{Location: loc})
			if got, want := y.Next(time.Date(year, 6, 1, 0, 0, 0, 0, time.UTC)), time.Date(year+1, 1, 1, 0, 0, 0, 0, loc); !got.Equal(want) {
				t.Errorf("%s: New Year %d: got %v, want %v", loc, year+1, got, want)
			}
		}
	}
}

// TestRepeatAcrossPeriodSplit: a zone that falls back at 23:30Z on 31
// December, where Go also starts a new footer-rule period at 00:00Z, in
// the middle of the repeated half hour. FIRST must still see 00:15 as
// repeated.
func TestRepeatAcrossPeriodSplit(t *testing.T) {
	t.Parallel()
	loc := ruleOnlyZone(t, "rule/NewYearFallBack", "AAA0BBB,J180/2,J365/24:30")
	from := mustTime(t, "2026-12-31T12:00:00Z")
	for _, tc := range []struct {
		rep  RepeatPolicy
		want []string
	}{
		{RepeatFirst, []string{"2027-01-01T00:15:00+01:00", "2027-01-02T00:15:00Z"}},
		{RepeatLast, []string{"2027-01-01T00:15:00Z", "2027-01-02T00:15:00Z"}},
		{RepeatBoth, []string{"2027-01-01T00:15:00+01:00", "2027-01-01T00:15:00Z"}},
	} {
		s := mustParse(t, "15 0 * * *", Options{Location: loc, Repeat: tc.rep})
		if got := next(t, s, from, 2); !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.rep, got, tc.want)
		}
	}
}

// TestUTCAndFixedZones covers zones that never change offset, which take
// a path without zone lookups.
func TestUTCAndFixedZones(t *testing.T) {
	t.Parallel()
	from := mustTime(t, "2026-03-08T06:59:00Z")
	for _, loc := range []*time.Location{nil, time.UTC, mustZone(t, "UTC"), mustZone(t, "Etc/GMT+5"), time.FixedZone("x", -5*3600)} {
		s := mustParse(t, "30 2 * * *", Options{Location: loc})
		// 02:30 at -05:00 all year is 07:30Z, DST or not.
		want := "2026-03-08T07:30:00Z"
		if loc == nil || loc.String() == "UTC" {
			want = "2026-03-09T02:30:00Z"
		}
		if got := s.Next(from).UTC().Format(rfc); got != want {
			t.Errorf("%v: got %s, want %s", loc, got, want)
		}
	}
}

func TestNextReturnsZoneAndWholeSeconds(t *testing.T) {
	t.Parallel()
	loc := mustZone(t, "Europe/London")
	s := mustParse(t, "0 12 * * *", Options{Location: loc})
	// From a sub-second instant just before the firing: still that firing.
	x := s.Next(time.Date(2026, 6, 1, 11, 59, 59, 999999999, loc))
	if x.Location() != loc || !x.Equal(time.Date(2026, 6, 1, 12, 0, 0, 0, loc)) {
		t.Errorf("got %v", x)
	}
	// From exactly the firing: the next one.
	if y := s.Next(x); !y.Equal(time.Date(2026, 6, 2, 12, 0, 0, 0, loc)) {
		t.Errorf("got %v", y)
	}
	// A monotonic clock reading on `after` changes nothing.
	now := time.Now()
	if a, b := s.Next(now), s.Next(now.Round(0)); !a.Equal(b) {
		t.Errorf("monotonic reading changed Next: %v vs %v", a, b)
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	start := mustTime(t, "2026-01-10T00:00:00Z")
	end := mustTime(t, "2026-01-12T00:00:00Z")
	s := mustParse(t, "0 0 * * *", Options{Start: start, End: end})
	got := next(t, s, mustTime(t, "2026-01-01T00:00:00Z"), 10)
	// Start and End are both inclusive.
	want := []string{"2026-01-10T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if x := s.Next(end); !x.IsZero() {
		t.Errorf("Next(End) = %v, want zero", x)
	}
	// A Start between firings.
	s = mustParse(t, "0 0 * * *", Options{Start: start.Add(time.Second)})
	if got := s.Next(time.Time{}).Format(rfc); got != "2026-01-11T00:00:00Z" {
		t.Errorf("got %s", got)
	}
	// End before Start: never fires.
	s = mustParse(t, "* * * * *", Options{Start: end, End: start})
	if x := s.Next(time.Time{}); !x.IsZero() {
		t.Errorf("got %v, want zero", x)
	}
}

func TestFarFuture(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "0 0 29 2 *", Options{Location: mustZone(t, "America/New_York")})
	// 9996 is the last leap year a firing can fall in.
	if got := s.Next(mustTime(t, "9990-01-01T00:00:00Z")).Format(rfc); got != "9992-02-29T00:00:00-05:00" {
		t.Errorf("got %s", got)
	}
	if x := s.Next(mustTime(t, "9996-03-01T00:00:00Z")); !x.IsZero() {
		t.Errorf("got %v, want zero past 9999", x)
	}
	if x := s.Next(time.Unix(1<<62, 0)); !x.IsZero() {
		t.Errorf("got %v, want zero", x)
	}
	// From the zero Time and from far before it.
	every := mustParse(t, "@every 1h", Options{})
	if got := every.Next(time.Time{}).Format(rfc); got != "1970-01-01T00:00:00Z" {
		t.Errorf("@every from zero time: %s", got)
	}
	if got := mustParse(t, "0 0 1 1 *", Options{}).Next(time.Unix(-1<<62, 0)).Format(rfc); got != "0001-01-01T00:00:00Z" {
		t.Errorf("from the distant past: %s", got)
	}
}

// TestConcurrentNext exercises one schedule from many goroutines; run with
// -race it shows that Next shares nothing mutable.
func TestConcurrentNext(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "*/7 1-3 * * *", Options{Location: mustZone(t, "America/New_York"), Repeat: RepeatBoth})
	want := next(t, s, mustTime(t, "2026-10-31T00:00:00Z"), 50)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := next(t, s, mustTime(t, "2026-10-31T00:00:00Z"), 50); !slices.Equal(got, want) {
				t.Errorf("concurrent Next disagreed")
			}
		})
	}
	wg.Wait()
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, field, token, msg string
	}{
		{"", "expression", "", "expression: the expression is empty"},
		{"* * *", "expression", "* * *", `expression: "* * *" has 3 fields; want 5`},
		{"* * * * * * *", "expression", "* * * * * * *", "has 7 fields"},
		{"0 0 32 * *", "day-of-month", "32", "day-of-month: 32 is out of range 1-31"},
		{"0 0 0 * *", "day-of-month", "0", "day-of-month: 0 is out of range 1-31"},
		{"60 * * * *", "minute", "60", "minute: 60 is out of range 0-59"},
		{"60 * * * * *", "second", "60", "second: 60 is out of range 0-59"},
		{"0 24 * * *", "hour", "24", "hour: 24 is out of range 0-23"},
		{"0 0 * 13 *", "month", "13", "month: 13 is out of range 1-12"},
		{"0 0 * * 8", "day-of-week", "8", "day-of-week: 8 is out of range 0-7"},
		{"0 0 * FOO *", "month", "FOO", `month: "FOO" is not a number or a month name (JAN-DEC)`},
		{"0 0 * * FUNDAY", "day-of-week", "FUNDAY", `day-of-week: "FUNDAY" is not a number or a day name (SUN-SAT)`},
		{"x * * * *", "minute", "x", `minute: "x" is not a number`},
		{"5-1 * * * *", "minute", "5-1", "minute: the range 5-1 runs backwards"},
		{"0 0 * * FRI-MON", "day-of-week", "FRI-MON", "runs backwards"},
		{"*/0 * * * *", "minute", "*/0", "minute: the step 0 in */0 is out of range 1-59"},
		{"*/60 * * * *", "minute", "*/60", "out of range 1-59"},
		{"*/x * * * *", "minute", "*/x", `the step "x" in */x is not a number`},
		{"1,,2 * * * *", "minute", "1,,2", "has an empty list item"},
		{"1, * * * *", "minute", "1,", "has an empty list item"},
		{"*,5 * * * *", "minute", "*", "cannot be combined"},
		{"-5 * * * *", "minute", "-5", "missing a number"},
		{"? * * * *", "minute", "?", "? is only allowed in day-of-month and day-of-week"},
		{"0 0 ?/2 * *", "day-of-month", "?/2", "stands alone"},
		{"0 0 1,? * *", "day-of-month", "?", "cannot be combined"},
		{"0 0 L-31 * *", "day-of-month", "L-31", "the offset 31 is out of range 0-30"},
		{"0 0 L-x * *", "day-of-month", "L-x", "L-n needs a number"},
		{"0 0 32W * *", "day-of-month", "32", "32 is out of range 1-31"},
		{"0 0 1-5W * *", "day-of-month", "1-5W", "L and W are written alone"},
		{"0 0 L/2 * *", "day-of-month", "L/2", "L and W are written alone"},
		{"0 0 * * L", "day-of-week", "L", "L alone is ambiguous"},
		{"0 0 * * 5#6", "day-of-week", "5#6", "occurrence"},
		{"0 0 * * 5#0", "day-of-week", "5#0", "occurrence"},
		{"0 0 * * 9#1", "day-of-week", "9", "9 is out of range 0-7"},
		{"0 0 * * 1-5L", "day-of-week", "1-5L", "L and # are written alone"},
		{"0 0 30 2 *", "expression", "0 0 30 2 *", "never fires"},
		{"0 0 L-29 2 *", "expression", "0 0 L-29 2 *", "never fires"},
		{"@fortnightly", "expression", "@fortnightly", "not a known macro"},
		{"@daily 5", "expression", "@daily 5", "takes no fields"},
		{"@every", "expression", "@every", "takes one duration"},
		{"@every soon", "expression", "soon", "not a duration"},
		{"@every 500ms", "expression", "500ms", "at least 1s"},
		{"@every 1.5s", "expression", "1.5s", "whole number of seconds"},
		{"@every -1m", "expression", "-1m", "at least 1s"},
		{"CRON_TZ=Europe/London 0 9 * * *", "expression", "CRON_TZ=Europe/London", "time zone is not part of the expression"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.expr, Options{})
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want a *ParseError", tc.expr, err)
			continue
		}
		if pe.Field != tc.field || pe.Token != tc.token || !strings.Contains(pe.Error(), tc.msg) {
			t.Errorf("Parse(%q) = {Field %q, Token %q, %q}, want field %q, token %q, containing %q",
				tc.expr, pe.Field, pe.Token, pe.Error(), tc.field, tc.token, tc.msg)
		}
	}
}

func TestCanonicalString(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, want string }{
		{"0 9 * * MON-FRI", "0 9 * * 1-5"},
		{"0 9 ? * mon,wed,fri", "0 9 * * 1,3,5"},
		{"*/15 * * * *", "*/15 * * * *"},
		{"*/30 * * * *", "0,30 * * * *"},
		{"5/20 * * * *", "5,25,45 * * * *"},
		{"5/10 * * * *", "5/10 * * * *"},
		{"0-30/10 * * * *", "0-30/10 * * * *"},
		{"1,2,3,4,10,11 * * * *", "1-4,10,11 * * * *"},
		{"0 0 * * 7", "0 0 * * 0"},
		{"0 0 * * 0-7", "0 0 * * 0-6"}, // restricted, unlike "*"
		{"0 0 1-31 * MON", "0 0 1-31 * 1"},
		{"0 0 */1 * MON", "0 0 * * 1"},
		{"0 0 * JAN-DEC *", "0 0 * * *"},
		{"0 0 * */3 *", "0 0 * */3 *"},
		{"0 0 L,15W,LW,L-3,1 * *", "0 0 1,L,L-3,LW,15W * *"},
		{"0 0 * * FRIL,MON#2,SUN#1", "0 0 * * 5L,0#1,1#2"},
		{"0 0 * * 1,FRI#3", "0 0 * * 1,5#3"},
		{"0 0 0 * * *", "0 0 * * *"},
		{"30 0 0 * * *", "30 0 0 * * *"},
		{"* * * * * *", "* * * * * *"},
		{"@daily", "0 0 * * *"},
		{"@weekly", "0 0 * * 0"},
		{"@every 90m", "@every 1h30m0s"},
		{"0 0 1 1 *", "0 0 1 1 *"},
	}
	for _, tc := range tests {
		s := mustParse(t, tc.expr, Options{})
		if got := s.String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.expr, got, tc.want)
		}
		// The canonical form is canonical: it is its own canonical form.
		if again := mustParse(t, s.String(), Options{}).String(); again != s.String() {
			t.Errorf("%q: canonical %q re-renders as %q", tc.expr, s.String(), again)
		}
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	tests := []struct {
		expr string
		opts Options
		want string
	}{
		{"0 9 * * MON-FRI", Options{Location: ny}, "at 09:00 on Monday through Friday (America/New_York)"},
		{"*/15 * * * *", Options{}, "every 15 minutes (UTC)"},
		{"* * * * *", Options{}, "every minute (UTC)"},
		{"30 2 * * *", Options{Location: ny, Gap: GapSkip}, "at 02:30 (America/New_York; DST gap SKIP, repeat FIRST)"},
		{"0 0 L * *", Options{}, "at 00:00 on the last day of the month (UTC)"},
		{"0 12 13 * FRI", Options{}, "at 12:00 on day 13 of the month or on Friday (UTC)"},
		{"0 12 * * 5#3", Options{}, "at 12:00 on the third Friday (UTC)"},
		{"0 8,12,18 * JAN,JUL *", Options{}, "at 08:00, 12:00 and 18:00 in January and July (UTC)"},
		{"15 * * * *", Options{}, "at minute 15 of every hour (UTC)"},
		{"@every 90m", Options{}, "every 1h30m0s from 1970-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		if got := mustParse(t, tc.expr, tc.opts).Describe(); got != tc.want {
			t.Errorf("Describe(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want GapPolicy
	}{{"SHIFT", GapShift}, {"shift", GapShift}, {" Skip ", GapSkip}, {"", GapShift}} {
		if got, err := ParseGapPolicy(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseGapPolicy(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want RepeatPolicy
	}{{"FIRST", RepeatFirst}, {"last", RepeatLast}, {"Both", RepeatBoth}, {"", RepeatFirst}} {
		if got, err := ParseRepeatPolicy(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseRepeatPolicy(%q) = %v, %v", tc.in, got, err)
		}
	}
	if _, err := ParseGapPolicy("LATER"); err == nil || !strings.Contains(err.Error(), "SHIFT or SKIP") {
		t.Errorf("ParseGapPolicy(LATER) error = %v", err)
	}
	if _, err := ParseRepeatPolicy("TWICE"); err == nil || !strings.Contains(err.Error(), "FIRST, LAST or BOTH") {
		t.Errorf("ParseRepeatPolicy(TWICE) error = %v", err)
	}
	// Text round trip, as flag.TextVar and config loaders use it.
	var g GapPolicy
	var r RepeatPolicy
	if err := g.UnmarshalText([]byte("skip")); err != nil || g != GapSkip {
		t.Errorf("UnmarshalText: %v %v", g, err)
	}
	if err := r.UnmarshalText([]byte("both")); err != nil || r != RepeatBoth {
		t.Errorf("UnmarshalText: %v %v", r, err)
	}
	if b, err := GapSkip.MarshalText(); err != nil || string(b) != "SKIP" {
		t.Errorf("MarshalText: %s %v", b, err)
	}
	if b, err := RepeatLast.MarshalText(); err != nil || string(b) != "LAST" {
		t.Errorf("MarshalText: %s %v", b, err)
	}
	if _, err := GapPolicy(7).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid policy succeeded")
	}
	if s := RepeatPolicy(9).String(); s != "RepeatPolicy(9)" {
		t.Errorf("String = %q", s)
	}
}

func TestPreview(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "0 * * * *", Options{End: mustTime(t, "2026-01-01T03:00:00Z")})
	from := mustTime(t, "2026-01-01T00:00:00Z")
	if got := next(t, s, from, 0); len(got) != 0 {
		t.Errorf("n=0 yielded %v", got)
	}
	if got := next(t, s, from, -1); len(got) != 0 {
		t.Errorf("n=-1 yielded %v", got)
	}
	// Stops at End even when more are asked for.
	if got := next(t, s, from, 10); !slices.Equal(got, []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"}) {
		t.Errorf("got %v", got)
	}
	// Stops when the consumer stops.
	n := 0
	for range Preview(s, from, 10) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("break after one yielded %d", n)
	}
}
