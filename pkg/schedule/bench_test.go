package schedule

import (
	"testing"
	"time"
)

// benchNext measures Next on one expression, walking forward from one
// firing to the next so each call does the work a prefetcher does.
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
func BenchmarkNextDaily0930NewYork(b *testing.B) { benchNext(b, "30 9 * * *", "America/New_York") }
func BenchmarkNextWeekdays9LordHowe(b *testing.B) {
	benchNext(b, "0 9 * * MON-FRI", "Australia/Lord_Howe")
}
func BenchmarkNextMonthlyLastUTC(b *testing.B)    { benchNext(b, "0 0 L * *", "UTC") }
func BenchmarkNextThirdFridayLondon(b *testing.B) { benchNext(b, "0 12 * * FRI#3", "Europe/London") }
func BenchmarkNextSecondsChatham(b *testing.B)    { benchNext(b, "*/10 * * * * *", "Pacific/Chatham") }
func BenchmarkNextLeapDayUTC(b *testing.B)        { benchNext(b, "0 0 29 2 *", "UTC") }
