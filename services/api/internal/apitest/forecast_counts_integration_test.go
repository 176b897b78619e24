//go:build integration

package apitest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/forecast"
	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// The forecast's per-schedule counts (migration 00027) follow every write
// of jobs, and GetForecast over them answers what the per-job computation
// it replaced (every active job's spec read and counted, pkg/domain/forecast's
// Decoder) answers, on a mixed set: plain and zoned crons with DST
// policies, jitter, H crons (a count row per job), intervals anchored at
// their creation, a recurrence rule, a one-off, additional schedules, four
// priorities, two tenants. After each write path — CreateJob, a CreateJobs
// batch, UpdateJob changing the schedule and the jitter, pause and resume,
// DeleteJob, bulk pause, resume and delete, and the writers beside the
// api (pkg/postgres/jobcompletion completing a job, a row deleted outright) — the
// two are compared field by field, and the table's active and paused
// totals are compared with the jobs.
func TestIntegrationForecastCountsFollowWrites(t *testing.T) {
	from := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	api := apitest.Start(t, apitest.Options{ForecastClock: fixedClock{at: from}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	acme := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	globex := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenGlobex))
	forecasts := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenOperator))

	schedules := []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "*/15 * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York", DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * 1-5"}, Timezone: "Europe/London"},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H H * * *"}, Timezone: "Asia/Tokyo"},
		{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(7 * time.Minute)}},
		{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=HOURLY;INTERVAL=3"}},
		{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(from.Add(90 * time.Minute))}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 12 * * *"}, AdditionalSchedules: []*sundialv1.Schedule{
			{Spec: &sundialv1.Schedule_Cron{Cron: "H 18 * * *"}}}},
	}
	job := func(i int, label string) *sundialv1.Job {
		j := cronJob(fmt.Sprint("mix-", label, "-", i))
		j.Schedule = schedules[i%len(schedules)]
		j.Priority = sundialv1.Priority(1 + i%4)
		if i%3 == 0 {
			j.MaxJitter = durationpb.New(time.Duration(1+i%50) * time.Second)
		}
		j.Labels = map[string]string{"set": label}
		return j
	}

	// check compares GetForecast with the per-job computation for the
	// operator's view (every tenant) and for acme alone, and the table's
	// totals with the jobs.
	check := func(step string) {
		t.Helper()
		for _, tenant := range []string{"", "acme"} {
			got, err := forecasts.GetForecast(ctx, &sundialv1.GetForecastRequest{Tenant: tenant, Window: durationpb.New(24 * time.Hour), HerdThreshold: 5})
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			want := perJobForecast(t, ctx, api, tenant, from)
			sampled := map[string]string{}
			compareForecasts(t, step+" ("+cmpOr(tenant, "every tenant")+")", got, want, sampled)
			// A listed job is an active job of the schedule it is
			// listed under.
			for id, expr := range sampled {
				var status string
				var spec []byte
				if err := api.Pool.QueryRow(ctx, `SELECT status, spec FROM jobs WHERE id = $1`, id).Scan(&status, &spec); err != nil {
					t.Fatalf("%s: listed job %s: %v", step, id, err)
				}
				j, err := forecast.NewDecoder(nil).Job(spec, id, "", "", 0, from)
				if status != "active" || err != nil || j.Expr != expr {
					t.Fatalf("%s: listed job %s under %q is %s with schedule %q (%v)", step, id, expr, status, j.Expr, err)
				}
			}
		}
		for _, status := range []string{"active", "paused"} {
			var counted, jobs int64
			if err := api.Pool.QueryRow(ctx, `SELECT coalesce(sum(jobs), 0) FROM forecast_schedules WHERE status = $1`, status).Scan(&counted); err != nil {
				t.Fatal(err)
			}
			if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = $1`, status).Scan(&jobs); err != nil {
				t.Fatal(err)
			}
			if counted != jobs {
				t.Errorf("%s: forecast_schedules counts %d %s jobs, jobs holds %d", step, counted, status, jobs)
			}
		}
	}

	var ids []string
	for i := range 30 {
		c := acme
		if i%5 == 4 {
			c = globex
		}
		resp, err := c.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: job(i, "single")})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if c == acme {
			ids = append(ids, resp.GetJob().GetId())
		}
	}
	check("CreateJob")

	var items []*sundialv1.CreateJobRequest
	for i := range 200 {
		items = append(items, &sundialv1.CreateJobRequest{Job: job(i, "batch")})
	}
	batch, err := acme.CreateJobs(ctx, &sundialv1.CreateJobsRequest{Items: items})
	if err != nil || batch.GetCreated() != 200 {
		t.Fatalf("CreateJobs: %d created, %v", batch.GetCreated(), err)
	}
	check("CreateJobs")

	for _, id := range ids[:6] {
		got, err := acme.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		j := got.GetJob()
		j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}}
		j.MaxJitter = nil
		if _, err := acme.UpdateJob(ctx, &sundialv1.UpdateJobRequest{Job: j}); err != nil {
			t.Fatalf("update %s: %v", id, err)
		}
	}
	check("UpdateJob")

	if _, err := acme.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: ids[7]}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: ids[8]}); err != nil {
		t.Fatal(err)
	}
	check("PauseJob")
	if _, err := acme.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: ids[7]}); err != nil {
		t.Fatal(err)
	}
	check("ResumeJob")
	if _, err := acme.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: ids[9]}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: ids[8]}); err != nil { // a paused one
		t.Fatal(err)
	}
	check("DeleteJob")

	batchLabel := map[string]string{"set": "batch"}
	// Three bulk actions with no forecast between: 1,200 changes, more
	// than one round of the fold.
	for _, action := range []sundialv1.BulkAction{sundialv1.BulkAction_BULK_ACTION_PAUSE, sundialv1.BulkAction_BULK_ACTION_RESUME, sundialv1.BulkAction_BULK_ACTION_PAUSE} {
		if _, err := acme.BulkJobAction(ctx, &sundialv1.BulkJobActionRequest{Action: action, Labels: batchLabel}); err != nil {
			t.Fatalf("%s: %v", action, err)
		}
	}
	var pending int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM forecast_schedule_changes`).Scan(&pending); err != nil || pending <= 1000 {
		t.Fatalf("%d changes pending (%v), want more than one fold round", pending, err)
	}
	check("three bulk actions, one fold")
	if _, err := acme.BulkJobAction(ctx, &sundialv1.BulkJobActionRequest{Action: sundialv1.BulkAction_BULK_ACTION_RESUME, Labels: batchLabel}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		action sundialv1.BulkAction
		name   string
	}{{sundialv1.BulkAction_BULK_ACTION_PAUSE, "bulk pause"}, {sundialv1.BulkAction_BULK_ACTION_RESUME, "bulk resume"},
		{sundialv1.BulkAction_BULK_ACTION_PAUSE, "bulk pause again"}, {sundialv1.BulkAction_BULK_ACTION_DELETE, "bulk delete"}} {
		if _, err := acme.BulkJobAction(ctx, &sundialv1.BulkJobActionRequest{Action: step.action, Labels: batchLabel}); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		check(step.name)
	}
	var left int64
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE labels @> '{"set":"batch"}' AND status <> 'deleted'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("bulk delete left %d batch jobs (%v)", left, err)
	}

	// The writers beside the api's store: a job that ran out, completed
	// by pkg/postgres/jobcompletion as the worker does, and a row deleted outright
	// (retention purges only completed and deleted jobs, never counted).
	var done uuid.UUID
	var version int64
	if err := api.Pool.QueryRow(ctx, `UPDATE jobs SET next_fire_at = NULL WHERE id = $1 RETURNING id, version`, ids[10]).Scan(&done, &version); err != nil {
		t.Fatal(err)
	}
	completed, err := jobcompletion.Complete(ctx, api.Pool, "system:test", []jobcompletion.Job{{ID: done, Version: version, Detail: map[string]any{"why": "test"}}})
	if err != nil || !completed[0] {
		t.Fatalf("complete %s: %v %v", done, completed, err)
	}
	check("jobcompletion.Complete")
	if _, err := api.Pool.Exec(ctx, `DELETE FROM jobs WHERE id = ANY($1::uuid[])`, ids[11:13]); err != nil {
		t.Fatal(err)
	}
	check("DELETE FROM jobs")
}

// perJobForecast is the forecast as the api computed it before the
// counts: every active job of tenant ("" every tenant's) read from jobs and
// decoded by forecast.Decoder, then counted one by one.
func perJobForecast(t *testing.T, ctx context.Context, api *apitest.API, tenant string, from time.Time) *forecast.Forecast {
	t.Helper()
	b, err := forecast.New(forecast.Options{From: from, Window: 24 * time.Hour, HerdThreshold: 5})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := api.Pool.Query(ctx, `SELECT id::text, tenant, name, priority, created_at, spec FROM jobs
		WHERE status = 'active' AND ($1 = '' OR tenant = $1)`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	dec := forecast.NewDecoder(nil)
	for rows.Next() {
		var id, ten, name string
		var prio int16
		var created time.Time
		var spec []byte
		if err := rows.Scan(&id, &ten, &name, &prio, &created, &spec); err != nil {
			t.Fatal(err)
		}
		j, err := dec.Job(spec, id, ten, name, sundialv1.Priority(prio), created)
		if err != nil {
			t.Fatal(err)
		}
		b.Add(j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.Forecast()
}

// compareForecasts fails unless got (the api's answer) and want (the
// per-job computation) agree on everything counted: jobs, schedules,
// firings, every minute, the per-priority and per-tenant series, the
// peaks' seconds and the herds with their schedules. The herds' sample
// jobs may be other jobs of the same schedule, and fewer (the counts keep
// up to 20 ids a schedule and do not refill one after its jobs leave);
// each must be named, and is put in sampled with its schedule.
func compareForecasts(t *testing.T, step string, got *sundialv1.GetForecastResponse, want *forecast.Forecast, sampled map[string]string) {
	t.Helper()
	if got.GetJobs() != int64(want.Jobs) || got.GetSchedules() != int64(want.Schedules) || got.GetFirings() != want.Firings ||
		got.GetFailedJobs() != int64(want.Failed) || got.GetPartial() != want.Partial {
		t.Fatalf("%s: %d jobs, %d schedules, %d firings, %d failed, partial %q; per job: %d, %d, %d, %d, %q", step,
			got.GetJobs(), got.GetSchedules(), got.GetFirings(), got.GetFailedJobs(), got.GetPartial(),
			want.Jobs, want.Schedules, want.Firings, want.Failed, want.Partial)
	}
	if want.Jobs == 0 {
		t.Fatalf("%s: no jobs to compare", step)
	}
	if !slices.Equal(got.GetMinutes(), want.Minutes) {
		t.Fatalf("%s: the minutes differ from the per-job computation's", step)
	}
	series := func(name string, g []*sundialv1.ForecastSeries, w []forecast.Series) {
		if len(g) != len(w) {
			t.Fatalf("%s: %d %s series, per job %d", step, len(g), name, len(w))
		}
		for i := range g {
			if g[i].GetName() != w[i].Name || g[i].GetTotal() != w[i].Total || g[i].GetPeak() != w[i].Peak {
				t.Fatalf("%s: %s series %d: %s %d (peak %d); per job %s %d (peak %d)", step, name, i,
					g[i].GetName(), g[i].GetTotal(), g[i].GetPeak(), w[i].Name, w[i].Total, w[i].Peak)
			}
		}
	}
	series("priority", got.GetByPriority(), want.ByPriority)
	series("tenant", got.GetByTenant(), want.ByTenant)
	if len(got.GetPeaks()) != len(want.Peaks) {
		t.Fatalf("%s: %d peaks, per job %d", step, len(got.GetPeaks()), len(want.Peaks))
	}
	for i, p := range got.GetPeaks() {
		if !p.GetTime().AsTime().Equal(want.Peaks[i].At) || !slices.Equal(p.GetDue(), want.Peaks[i].Due[:]) || !slices.Equal(p.GetExpected(), want.Peaks[i].Expected[:]) {
			t.Fatalf("%s: peak %d at %s differs from the per-job one at %s", step, i, p.GetTime().AsTime(), want.Peaks[i].At)
		}
	}
	if len(got.GetHerds()) != len(want.Herds) {
		t.Fatalf("%s: %d herds, per job %d", step, len(got.GetHerds()), len(want.Herds))
	}
	for i, h := range got.GetHerds() {
		w := want.Herds[i]
		if !h.GetTime().AsTime().Equal(w.At) || h.GetFirings() != w.Firings || h.GetNoJitter() != w.NoJitter ||
			h.GetExpectedPeak() != w.ExpectedPeak || len(h.GetSchedules()) != len(w.Schedules) {
			t.Fatalf("%s: herd %d: %s %d firings (%d no jitter, %d schedules); per job %s %d (%d, %d)", step, i,
				h.GetTime().AsTime(), h.GetFirings(), h.GetNoJitter(), len(h.GetSchedules()), w.At, w.Firings, w.NoJitter, len(w.Schedules))
		}
		for k, s := range h.GetSchedules() {
			ws := w.Schedules[k]
			if s.GetExpression() != ws.Expr || s.GetTimezone() != ws.Zone || s.GetJobs() != int64(ws.Jobs) ||
				s.GetNoJitter() != int64(ws.NoJitter) || s.GetSuggestedExpression() != ws.SuggestH ||
				len(s.GetSample()) > len(ws.Sample) || int64(len(s.GetSample()))+s.GetMoreJobs() != s.GetJobs() {
				t.Fatalf("%s: herd %d schedule %d: %q %s %d jobs (%d no jitter, %d listed); per job %q %s %d (%d, %d)", step, i, k,
					s.GetExpression(), s.GetTimezone(), s.GetJobs(), s.GetNoJitter(), len(s.GetSample()),
					ws.Expr, ws.Zone, ws.Jobs, ws.NoJitter, len(ws.Sample))
			}
			for _, j := range s.GetSample() {
				if j.GetName() == "" || j.GetId() == "" {
					t.Fatalf("%s: herd %d schedule %q lists a job without id or name: %v", step, i, s.GetExpression(), j)
				}
				sampled[j.GetId()] = s.GetExpression()
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A fleet of H jobs is counted on one row per place its H lands, not one
// per job (the fold keys H jobs so, migration 00032), and the forecast
// over those rows is the per-job one. Rows written per job before that
// (simulated here from the triggers' own key) are re-keyed by the next
// fold, including jobs removed before it, whose removals carry the
// per-job key.
func TestIntegrationForecastCountsGroupAnHFleet(t *testing.T) {
	from := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	api := apitest.Start(t, apitest.Options{ForecastClock: fixedClock{at: from}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	acme := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	forecasts := sundialv1.NewForecastServiceClient(dial(t, api, apitest.TokenOperator))

	fleet := []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "H * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H/20 * * * *"}, Timezone: "Europe/Paris"},
	}
	const jobs = 1200
	var ids []string
	for start := 0; start < jobs; start += 200 {
		var items []*sundialv1.CreateJobRequest
		for i := start; i < start+200; i++ {
			j := cronJob(fmt.Sprint("h-", i))
			j.Schedule = fleet[i%len(fleet)]
			items = append(items, &sundialv1.CreateJobRequest{Job: j})
		}
		resp, err := acme.CreateJobs(ctx, &sundialv1.CreateJobsRequest{Items: items})
		if err != nil || resp.GetCreated() != 200 {
			t.Fatalf("CreateJobs: %d created, %v", resp.GetCreated(), err)
		}
		for _, r := range resp.GetResults() {
			ids = append(ids, r.GetJob().GetId())
		}
	}
	check := func(step string, maxRows int) {
		t.Helper()
		got, err := forecasts.GetForecast(ctx, &sundialv1.GetForecastRequest{Window: durationpb.New(24 * time.Hour), HerdThreshold: 5})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		compareForecasts(t, step, got, perJobForecast(t, ctx, api, "", from), map[string]string{})
		var rows, counted, active, unresolved int64
		if err := api.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(jobs), 0), count(*) FILTER (WHERE NOT h_resolved)
			FROM forecast_schedules WHERE status = 'active'`).Scan(&rows, &counted, &unresolved); err != nil {
			t.Fatal(err)
		}
		if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'active'`).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if counted != active || rows > int64(maxRows) || unresolved != 0 {
			t.Fatalf("%s: %d rows (at most %d) count %d jobs of %d active, %d rows keyed per job", step, rows, maxRows, counted, active, unresolved)
		}
	}
	// "H * * * *" lands on one of 60 minutes, "H/20" on one of 20 offsets.
	check("created", 60+20)

	// The rows as a fold before migration 00032 left them: one per job,
	// under the triggers' key.
	if _, err := api.Pool.Exec(ctx, `DELETE FROM forecast_schedules WHERE job_id IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pool.Exec(ctx, `INSERT INTO forecast_schedules (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, sample)
		SELECT j.tenant, j.status, j.priority, k.digest, k.schedule, k.jitter, k.anchor, k.job_id, 1, ARRAY[j.id]
		  FROM jobs AS j, LATERAL forecast_key(j.spec, j.id, j.created_at) AS k
		 WHERE j.status = 'active' AND k.job_id IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	var legacy int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM forecast_schedules WHERE NOT h_resolved`).Scan(&legacy); err != nil || legacy != jobs {
		t.Fatalf("%d rows keyed per job (%v), want %d", legacy, err, jobs)
	}
	// Removed before the next fold: their removals carry the per-job key.
	for _, id := range ids[:100] {
		if _, err := acme.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acme.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: ids[100]}); err != nil {
		t.Fatal(err)
	}
	check("re-keyed, 100 deleted and 1 paused before the fold", 60+20)
	if _, err := acme.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: ids[100]}); err != nil {
		t.Fatal(err)
	}
	check("resumed", 60+20)
}
