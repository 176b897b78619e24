//go:build integration

package apitest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/testkit/harness"
)

// TestTimingForecast measures GetForecast on the real api over
// $SUNDIAL_FORECAST_TIMING_JOBS jobs of one tenant in Postgres (loaded with
// COPY; 1,440 distinct daily crons), for 24 hours and 7 days, and fails if
// a forecast reads fewer jobs than there are or takes more than 20 µs a
// job. Opt-in: the load takes minutes at millions of jobs. The figures are
// in docs/benchmarks.md.
func TestTimingForecast(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SUNDIAL_FORECAST_TIMING_JOBS"))
	if n <= 0 {
		t.Skip("set SUNDIAL_FORECAST_TIMING_JOBS to run")
	}
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	start := time.Now()
	loaded, err := harness.CopyJobs(ctx, api.Pool, "acme", n, harness.CopyOptions{Streams: 1}, func(i int) *sundialv1.Job {
		return &sundialv1.Job{Name: "job-" + strconv.Itoa(i), Priority: sundialv1.Priority_PRIORITY_MEDIUM,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}}}
	})
	if err != nil {
		t.Fatalf("copy after %d jobs: %v", loaded, err)
	}
	if _, err := api.Pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d jobs in %s", loaded, time.Since(start).Round(time.Second))
	client := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenAcme))
	for _, window := range []time.Duration{24 * time.Hour, 7 * 24 * time.Hour} {
		for round := range 2 { // the second with a warm cache
			s := time.Now()
			f, err := client.GetForecast(ctx, &sundialv1.GetForecastRequest{Window: durationpb.New(window)})
			took := time.Since(s)
			if err != nil {
				t.Fatal(err)
			}
			if f.GetJobs() != int64(n) || f.GetPartial() != "" {
				t.Fatalf("%s: read %d of %d jobs, partial %q", window, f.GetJobs(), n, f.GetPartial())
			}
			perJob := took / time.Duration(n)
			t.Logf("window %s round %d: %d jobs, %d schedules, %d firings, %d herds in %s (%s a job)",
				window, round+1, f.GetJobs(), f.GetSchedules(), f.GetFirings(), len(f.GetHerds()), took.Round(time.Millisecond), perJob)
			if perJob > 20*time.Microsecond {
				t.Errorf("%s a job, want at most 20µs", perJob)
			}
		}
	}
}
