package console

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The 24-hour chart draws one bar per 10 minutes, each as tall as its
// busiest minute, and marks the bar holding a herd.
func TestForecastBars(t *testing.T) {
	from := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	mins := make([]int64, 24*60)
	mins[300] = 1000 // 00:00
	mins[301] = 10
	mins[65] = 250 // 20:05
	mins[66] = 400
	f := &sundialv1.GetForecastResponse{From: timestamppb.New(from), Minutes: mins,
		Herds: []*sundialv1.ForecastHerd{{Time: timestamppb.New(from.Add(300 * time.Minute)), Firings: 1000}}}
	bars, buckets, maxV := forecastBars(f, 10*time.Minute)
	if len(bars) != 144 || len(buckets) != 144 || maxV != 1000 {
		t.Fatalf("%d bars, %d rows, max %d; want 144, 144, 1000", len(bars), len(buckets), maxV)
	}
	if b := bars[30]; !b.Herd || b.H != "120.0" || b.Y != "0.0" || buckets[30].Total != "1,010" || buckets[30].Start != "Nov 29 00:00" {
		t.Fatalf("the midnight bar %+v %+v: want a full-height herd bar of 1,010 in all", b, buckets[30])
	}
	if b := bars[6]; b.Herd || b.H != "48.0" || buckets[6].Busiest != "400" || buckets[6].Total != "650" {
		t.Fatalf("the 20:00 bar %+v %+v: want the busiest minute (400) at 48 of 120", b, buckets[6])
	}
	for i, b := range bars {
		if x, _ := strconv.ParseFloat(b.X, 64); x < 0 || x > 600 {
			t.Fatalf("bar %d at x=%s, outside the box", i, b.X)
		}
		if i != 6 && i != 30 && b.H != "0.0" {
			t.Fatalf("bar %d has height %s with nothing due", i, b.H)
		}
	}
	// An hour's window: one bar a minute; a minute with one firing is
	// still visible next to a thousand.
	small := make([]int64, 60)
	small[0], small[59] = 1000, 1
	bars, _, _ = forecastBars(&sundialv1.GetForecastResponse{From: timestamppb.New(from), Minutes: small}, time.Minute)
	if len(bars) != 60 || bars[59].H != "1.0" || bars[59].W != "9.5" {
		t.Fatalf("hour window: %d bars, last %+v", len(bars), bars[59])
	}
}

func TestBusiestSeconds(t *testing.T) {
	due := make([]int64, 60)
	exp := make([]float64, 60)
	due[0], due[30], due[59] = 500, 20, 700
	exp[0], exp[30], exp[59] = 12.5, 20, 35
	got := busiestSeconds(&sundialv1.ForecastPeak{Due: due, Expected: exp})
	if want := ":59 700 due, 35 with jitter; :00 500 due, 12.5 with jitter; :30 20 due, 20 with jitter"; got != want {
		t.Fatalf("busiestSeconds = %q, want %q", got, want)
	}
}
