package forecast

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// benchFleet is a fleet's distinct schedules: hourly at each minute, daily
// at each hour, every 5 and 15 minutes, midnight, and every 10 seconds,
// each in ten zones — 1,050 distinct schedules.
func benchFleet(b *testing.B) []Job {
	zones := []string{"UTC", "America/New_York", "America/Los_Angeles", "Europe/London", "Europe/Berlin", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney", "America/Sao_Paulo", "Pacific/Auckland"}
	var exprs []string
	for m := range 60 {
		exprs = append(exprs, fmt.Sprintf("%d * * * *", m))
	}
	for h := range 24 {
		exprs = append(exprs, fmt.Sprintf("0 %d * * *", h))
	}
	for m := range 15 {
		exprs = append(exprs, fmt.Sprintf("%d/15 * * * *", m))
	}
	for m := range 5 {
		exprs = append(exprs, fmt.Sprintf("%d/5 * * * *", m))
	}
	exprs = append(exprs, "0 0 * * *", "*/10 * * * * *")
	var out []Job
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range exprs {
			out = append(out, Job{Expr: e, Cron: e, Zone: z, Key: z + "|" + e, Build: func() (schedule.Schedule, error) {
				return schedule.Parse(e, schedule.Options{Location: loc})
			}})
		}
	}
	return out
}

// BenchmarkForecast10M is the forecast of 10 M jobs over 1,050 distinct
// schedules in 50 tenants, for the windows the api offers: Add of every
// job plus Forecast. The jobs are made as they are added (as the api
// streams them from Postgres), not held.
func BenchmarkForecast10M(b *testing.B) {
	fleet := benchFleet(b)
	tenants := make([]string, 50)
	for i := range tenants {
		tenants[i] = fmt.Sprint("tenant-", i)
	}
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprintf("0193a1b2-0000-7000-8000-%012d", i)
	}
	const jobs = 10_000_000
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		b.Run(window.String(), func(b *testing.B) {
			from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
			for b.Loop() {
				fb, err := New(Options{From: from, Window: window})
				if err != nil {
					b.Fatal(err)
				}
				for i := range jobs {
					// Skewed: a third of the jobs on the first
					// schedules (UTC hourly :00, ...), the rest spread.
					k := i % len(fleet)
					if i%3 == 0 {
						k = i % 7
					}
					j := fleet[k]
					j.ID, j.Tenant, j.Priority = ids[i%len(ids)], tenants[i%len(tenants)], sundialv1.Priority(1+i%4)
					if i%4 == 0 {
						j.Jitter = 30 * time.Second
					}
					fb.Add(j)
				}
				f := fb.Forecast()
				if f.Jobs != jobs || f.Partial != "" {
					b.Fatalf("%d jobs, partial %q", f.Jobs, f.Partial)
				}
				b.ReportMetric(float64(f.Schedules), "schedules")
				b.ReportMetric(float64(len(f.Herds)), "herds")
			}
		})
	}
}

// BenchmarkFromJob is the per-job cost of turning a stored job into the
// forecast's Job (key: deterministic encoding and SHA-256), which the api
// pays for every job it reads.
func BenchmarkFromJob(b *testing.B) {
	job := &sundialv1.Job{Id: "0193a1b2-0000-7000-8000-000000000001", Tenant: "t", Name: "nightly",
		Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}, Timezone: "Europe/Berlin"},
		MaxJitter: durationpb.New(10 * time.Second)}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		_ = FromJob(job, created, nil)
	}
}
