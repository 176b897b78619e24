package schedule

import (
	"testing"
	"time"
)

// benchRRulePreview measures what PreviewSchedule does for a rule: parse
// it (from the job's DTSTART) and list the next 100 instants, reported per
// instant. The budget is at most 50 µs per instant (docs/schedules.md,
// "Recurrence rules").
func benchRRulePreview(b *testing.B, rule, zone string) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		b.Fatal(err)
	}
	dtstart := time.Date(2026, 1, 1, 9, 0, 0, 0, loc)
	from := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	const n = 100
	b.ReportAllocs()
	for b.Loop() {
		s, err := ParseRRule(rule, dtstart, Options{Location: loc})
		if err != nil {
			b.Fatal(err)
		}
		k := 0
		for range Preview(s, from, n) {
			k++
		}
		if k != n {
			b.Fatalf("%d instants", k)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/instant")
}

func BenchmarkRRuleSecondTuesdayNewYork(b *testing.B) {
	benchRRulePreview(b, "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0", "America/New_York")
}
func BenchmarkRRuleBiweeklyMonThuLondon(b *testing.B) {
	benchRRulePreview(b, "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH", "Europe/London")
}
func BenchmarkRRuleLastWeekdaySydney(b *testing.B) {
	benchRRulePreview(b, "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", "Australia/Sydney")
}
func BenchmarkRRuleYearlySetposLordHowe(b *testing.B) {
	// The costliest shape: every candidate day of a year is expanded to
	// pick positions.
	benchRRulePreview(b, "FREQ=YEARLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9,17;BYSETPOS=1,-1", "Australia/Lord_Howe")
}
func BenchmarkRRuleHourlyWeekdaysNewYork(b *testing.B) {
	benchRRulePreview(b, "FREQ=HOURLY;BYDAY=MO,TU,WE,TH,FR;BYMINUTE=0;BYSECOND=0", "America/New_York")
}
func BenchmarkRRuleLeapDayCountUTC(b *testing.B) {
	// COUNT is resolved at parse time: 100 readings over 400 years.
	benchRRulePreview(b, "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;COUNT=100", "UTC")
}
func BenchmarkRRuleMaxCountDaily(b *testing.B) {
	// The parse-time walk for the largest COUNT allowed.
	benchRRulePreview(b, "FREQ=DAILY;COUNT=10000;BYHOUR=9,21", "Europe/London")
}
