package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The table output names the herd as the issue words it, with the
// suggestions and the busiest seconds.
func TestPrintForecast(t *testing.T) {
	midnight := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	due := make([]int64, 60)
	exp := make([]float64, 60)
	due[0], exp[0], exp[1] = 14200, 11053.3, 53.3
	f := &sundialv1.GetForecastResponse{
		From: timestamppb.New(midnight.Add(-5 * time.Hour)), Window: durationpb.New(24 * time.Hour),
		Jobs: 14250, Schedules: 31, Firings: 14412, Partial: "stopped at max_schedules: 3 jobs in 2 rarer schedules not counted",
		Peaks: []*sundialv1.ForecastPeak{{Time: timestamppb.New(midnight), Firings: 14200, Due: due, Expected: exp}},
		Herds: []*sundialv1.ForecastHerd{{Time: timestamppb.New(midnight), Firings: 14200, NoJitter: 11000, ExpectedPeak: 11053.3,
			Schedules: []*sundialv1.ForecastHerdSchedule{{Expression: "0 0 * * *", Timezone: "UTC", Jobs: 14200, NoJitter: 11000,
				SuggestedJitter: durationpb.New(time.Minute), SuggestedExpression: "H 0 * * *", MoreJobs: 14199,
				Sample: []*sundialv1.ForecastHerdJob{{Id: "0193-a", Tenant: "acme", Name: "nightly", MaxJitter: durationpb.New(0), Slot: "37 0 * * *"}}}}}},
		ByTenant: []*sundialv1.ForecastSeries{{Name: "acme", Total: 14412, Peak: 14200, PeakTime: timestamppb.New(midnight)}},
	}
	var b bytes.Buffer
	printForecast(&b, f)
	out := b.String()
	for _, want := range []string{
		"14,412 firings due from 14,250 active jobs (31 distinct schedules)",
		"PARTIAL: stopped at max_schedules",
		"2026-11-29 00:00  14,200",
		":00 14,200→11053.3",
		"HERD: 14,200 firings at 2026-11-29 00:00:00 UTC, 11,000 of them from jobs with no jitter",
		"max_jitter 1m0s or cron H 0 * * *",
		"nightly  0193-a  acme  jitter 0s  → 37 0 * * *",
		"… and 14,199 more jobs on 0 0 * * *",
		"acme  14,412   14,200 at 2026-11-29 00:00\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 14200: "14,200", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

// fakeForecast is the fake api's ForecastService: an empty forecast of
// the window asked for.
type fakeForecast struct {
	sundialv1.UnimplementedForecastServiceServer
}

func (fakeForecast) GetForecast(_ context.Context, req *sundialv1.GetForecastRequest) (*sundialv1.GetForecastResponse, error) {
	return &sundialv1.GetForecastResponse{From: timestamppb.New(fakeNow), Window: req.GetWindow()}, nil
}

// schedctl forecast sends the window, priority and herd settings it was
// given, and refuses a priority that is not one.
func TestForecastRequest(t *testing.T) {
	_, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "forecast", "--window", "168h", "--priority", "critical")
	if code != 0 || !strings.Contains(out, "for 168h0m0s: 0 firings due from 0 active jobs") || !strings.Contains(out, "no herds") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	code, _, stderr = run(t, addr, nil, "forecast", "--priority", "PRIORITY_LOW")
	if code != 2 || !strings.Contains(stderr, `--priority: "PRIORITY_LOW" is not one of CRITICAL, HIGH, MEDIUM, LOW`) {
		t.Fatalf("--priority PRIORITY_LOW: exit %d, %s", code, stderr)
	}
}
