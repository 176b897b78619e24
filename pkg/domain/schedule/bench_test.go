package schedule

import (
	"testing"
	"time"
)

// benchNext measures one Next call, walking forward from each firing to
// the next through 2026-2030 as the prefetcher does, so calls land on
// ordinary days and on transition days alike.
func benchNext(b *testing.B, expr, zone string) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		b.Fatal(err)
	}
	s, err := Parse(expr, Options{Location: loc})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t := start
	b.ReportAllocs()
	for b.Loop() {
		t = s.Next(t)
		if t.IsZero() || t.Year() > 2030 {
			t = start
		}
	}
}

func BenchmarkNextEveryMinuteUTC(b *testing.B)   { benchNext(b, "* * * * *", "UTC") }
func BenchmarkNextEvery5MinNewYork(b *testing.B) { benchNext(b, "*/5 * * * *", "America/New_York") }
func BenchmarkNextHourlyLondon(b *testing.B)     { benchNext(b, "0 * * * *", "Europe/London") }
func BenchmarkNextDaily0230NewYork(b *testing.B) { benchNext(b, "30 2 * * *", "America/New_York") }
func BenchmarkNextWeekdays9LordHowe(b *testing.B) {
	benchNext(b, "0 9 * * MON-FRI", "Australia/Lord_Howe")
}
func BenchmarkNextMonthlyLastUTC(b *testing.B)    { benchNext(b, "0 0 L * *", "UTC") }
func BenchmarkNextLastWeekdaySydney(b *testing.B) { benchNext(b, "0 18 LW * *", "Australia/Sydney") }
func BenchmarkNextThirdFridayLondon(b *testing.B) { benchNext(b, "0 12 * * FRI#3", "Europe/London") }
func BenchmarkNextSecondsChatham(b *testing.B)    { benchNext(b, "*/10 * * * * *", "Pacific/Chatham") }
func BenchmarkNextLeapDayUTC(b *testing.B)        { benchNext(b, "0 0 29 2 *", "UTC") }
func BenchmarkNextEvery90m(b *testing.B)          { benchNext(b, "@every 90m", "America/New_York") }

// BenchmarkParse measures parsing, which the api does on every create and
// the prefetcher on every job it loads.
func BenchmarkParse(b *testing.B) {
	ny, _ := time.LoadLocation("America/New_York")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("0 9 * * MON-FRI", Options{Location: ny}); err != nil {
			b.Fatal(err)
		}
	}
}
