//go:build integration

package migrations

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/forecast"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Migration 00027's fill counts the jobs already stored exactly as
// pkg/domain/forecast's Decoder keys them: jobs written at version 26 (crons
// plain and zoned, jitter, H crons, intervals and a recurrence rule
// anchored at creation, one with start_time, additional schedules, four
// priorities, two tenants, some paused, some deleted), then 00027
// applied; each forecast_schedules row's key, read back through
// Decoder.Count, must hold exactly the jobs whose specs the Decoder gives
// that key, tenant, status and priority — so the PL/pgSQL reader of the
// spec and the Go one agree on every kind of schedule, H one job a key.
func TestForecastFillMatchesDecoder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := testinfra.Postgres(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	sub, err := fsSub()
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 26); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	schedules := []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York", DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * 1-5"}, Timezone: "Europe/Helsinki"},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 H * * *"}, Timezone: "Asia/Ho_Chi_Minh"},
		{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(7 * time.Minute)}},
		{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Hour)}, StartTime: timestamppb.New(start)},
		{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=HOURLY;BYMINUTE=5"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 12 * * *"}, AdditionalSchedules: []*sundialv1.Schedule{
			{Spec: &sundialv1.Schedule_Cron{Cron: "H 18 * * *"}}}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 6 * * *"}, AdditionalSchedules: []*sundialv1.Schedule{
			{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Minute)}}}},
	}
	for _, tenant := range []string{"acme", "globex"} {
		if _, err := harness.CopyJobs(ctx, pool, tenant, 300, harness.CopyOptions{Chunk: 70}, func(i int) *sundialv1.Job {
			j := &sundialv1.Job{Name: fmt.Sprint("j", i), Schedule: schedules[i%len(schedules)], Priority: sundialv1.Priority(1 + i%4),
				Labels: map[string]string{"team": fmt.Sprint("t", i%3)},
				Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}}}
			if i%3 == 0 {
				j.MaxJitter = durationpb.New(time.Duration(1+i%40) * time.Second)
			}
			return j
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Some jobs created a second apart, so intervals split by anchor;
	// some paused, some deleted.
	for _, q := range []string{
		`UPDATE jobs SET created_at = created_at - interval '1 second' WHERE name LIKE '%5'`,
		`UPDATE jobs SET status = 'paused' WHERE name LIKE '%7'`,
		`UPDATE jobs SET status = 'deleted' WHERE name LIKE '%8'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.UpTo(ctx, 27); err != nil {
		t.Fatal(err)
	}

	type key struct{ tenant, status, key string }
	want := map[key]int{}
	d := forecast.NewDecoder(nil)
	rows, err := pool.Query(ctx, `SELECT id::text, tenant, status, priority, created_at, spec FROM jobs WHERE status IN ('active', 'paused')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tenant, status string
		var prio int16
		var created time.Time
		var spec []byte
		if err := rows.Scan(&id, &tenant, &status, &prio, &created, &spec); err != nil {
			t.Fatal(err)
		}
		j, err := d.Job(spec, id, tenant, "", sundialv1.Priority(prio), created)
		if err != nil {
			t.Fatal(err)
		}
		want[key{tenant, status, fmt.Sprintf("%d/%d/%q", j.Priority, j.Jitter, j.Key)}]++
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	got := map[key]int{}
	rows, err = pool.Query(ctx, `SELECT tenant, status, priority, schedule, jitter, anchor, job_id::text, jobs, cardinality(sample) FROM forecast_schedules`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c forecast.Count
		var status string
		var prio int16
		var anchor *time.Time
		var jobID *string
		var sampled int
		if err := rows.Scan(&c.Tenant, &status, &prio, &c.Schedule, &c.Jitter, &anchor, &jobID, &c.Jobs, &sampled); err != nil {
			t.Fatal(err)
		}
		c.Priority = sundialv1.Priority(prio)
		if anchor != nil {
			c.Anchor = *anchor
		}
		if jobID != nil {
			c.JobID = *jobID
		}
		j, _, err := d.Count(c)
		if err != nil {
			t.Fatal(err)
		}
		if sampled != min(c.Jobs, 20) {
			t.Errorf("a row of %d jobs samples %d", c.Jobs, sampled)
		}
		got[key{c.Tenant, status, fmt.Sprintf("%d/%d/%q", j.Priority, j.Jitter, j.Key)}] += c.Jobs
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(want) < 100 {
		t.Fatalf("only %d distinct keys: the set does not exercise H and anchors", len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s %s key %.80s: filled %d jobs, the Decoder counts %d", k.tenant, k.status, k.key, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s %s key %.80s: filled %d jobs the Decoder does not key so", k.tenant, k.status, k.key, n)
		}
	}
}

// A spec that is not a job's encoding is still written: the counting
// trigger never refuses a write. The job is counted under a schedule no
// decoder reads, so the forecast counts it as failed.
func TestForecastTriggerTakesMalformedSpecs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testinfra.Postgres(t)
	if err := Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for i, spec := range [][]byte{{0xff}, {0x2a, 0x7f, 0x01}, {0x0f}, {0x2a, 0x02, 0x0a, 0x05}, {0x2a, 0x03, 0x0a, 0x01, 0xff}} {
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (id, tenant, spec, priority, partition) VALUES ($1, 'acme', $2, 2, 0)`,
			fmt.Sprintf("0193a1b2-0000-7000-8000-%012d", i), spec); err != nil {
			t.Fatalf("spec %x: %v", spec, err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT schedule, jobs FROM forecast_schedule_changes`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	jobs := 0
	for rows.Next() {
		var schedule []byte
		var n int
		if err := rows.Scan(&schedule, &n); err != nil {
			t.Fatal(err)
		}
		jobs += n
		if _, _, err := forecast.NewDecoder(nil).Count(forecast.Count{Tenant: "acme", Schedule: schedule, Jobs: n}); err == nil {
			t.Errorf("schedule %x of a malformed spec decodes", schedule)
		}
	}
	if rows.Err() != nil || jobs != 5 {
		t.Fatalf("%d jobs counted (%v), want the 5 written", jobs, rows.Err())
	}
}
