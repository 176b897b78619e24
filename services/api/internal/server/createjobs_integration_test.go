//go:build integration

package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// batch is n every-minute jobs named prefix-<i>, keyed prefix-<i> when keyed.
func batch(prefix string, n int, keyed bool) []*sundialv1.CreateJobRequest {
	items := make([]*sundialv1.CreateJobRequest, n)
	for i := range items {
		name := fmt.Sprintf("%s-%d", prefix, i)
		items[i] = &sundialv1.CreateJobRequest{Job: everyMinute(name)}
		if keyed {
			items[i].IdempotencyKey = name
		}
	}
	return items
}

// badFields are the BadRequest fields of err.
func badFields(err error) []string {
	var out []string
	for _, v := range fieldViolations(status.Convert(err)) {
		out = append(out, v.GetField())
	}
	return out
}

// An invalid item refuses an ALL_OR_NOTHING call naming the item's index
// and field, and writes nothing (no job, no audit row, no notification);
// the same call made valid creates every job with what a single create
// writes: its audit row and a wake-up of the prefetcher.
func TestIntegrationCreateJobsAllOrNothing(t *testing.T) {
	h := newHarness(t, nil)
	listener, err := pgx.ConnectConfig(h.ctx, h.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(h.ctx, "LISTEN "+jobwake.Channel); err != nil {
		t.Fatal(err)
	}

	items := batch("aon", 5, true)
	items[3].Job.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "61 * * * *"}
	items[1].Job.Target = nil
	_, err = h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items}, as(tokenAcme))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateJobs with bad items: %v, want InvalidArgument", err)
	}
	fields := badFields(err)
	if strings.Join(fields, ",") != "items[1].target,items[3].schedule.cron" {
		t.Fatalf("fields %v, want items[1].target and items[3].schedule.cron; message %q", fields, status.Convert(err).Message())
	}
	if !strings.Contains(status.Convert(err).Message(), "2 of 5 items refused, nothing created") {
		t.Fatalf("message %q", status.Convert(err).Message())
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("%d jobs written by a refused call", n)
	}

	// A refusal found inside the transaction (a schedule with no instant
	// left) rolls back the items already inserted before it.
	items = batch("aon", 5, true)
	items[4].Job.Schedule.Spec = &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(-time.Hour))}
	_, err = h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items}, as(tokenAcme))
	if status.Code(err) != codes.InvalidArgument || strings.Join(badFields(err), ",") != "items[4].schedule" {
		t.Fatalf("CreateJobs with a spent schedule: %v (fields %v)", err, badFields(err))
	}
	if n := h.count(`SELECT count(*) FROM jobs`) + h.count(`SELECT count(*) FROM job_audit`); n != 0 {
		t.Fatalf("%d rows written by a call refused in its transaction", n)
	}

	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("aon", 5, true)}, as(tokenAcmeOps))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCreated() != 5 || resp.GetRefused() != 0 || len(resp.GetResults()) != 5 {
		t.Fatalf("response %v", resp)
	}
	for i, r := range resp.GetResults() {
		j := r.GetJob()
		if r.GetIndex() != int32(i) || j.GetName() != fmt.Sprintf("aon-%d", i) || j.GetVersion() != 1 || j.GetNextFireTime() == nil || j.GetTenant() != "acme" {
			t.Fatalf("result %d: %v", i, r)
		}
		if n := h.count(`SELECT count(*) FROM job_audit WHERE job_id = $1 AND action = 'create' AND actor = 'acme/ops'`, j.GetId()); n != 1 {
			t.Fatalf("job %d has %d create audit rows by acme/ops", i, n)
		}
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		woke, err := h.jobWake(ctx, listener)
		cancel()
		if err != nil || woke != j.GetId() {
			t.Fatalf("notification %d: %q, %v; want %s", i, woke, err, j.GetId())
		}
		got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: j.GetId()}, as(tokenAcme))
		if err != nil || got.GetJob().GetName() != j.GetName() {
			t.Fatalf("GetJob %d: %v, %v", i, got, err)
		}
	}
}

// PER_ITEM writes the valid items and answers each invalid one with its
// code and the field at fault; an idempotency key repeated within the call
// is refused on the repeat.
func TestIntegrationCreateJobsPerItemErrors(t *testing.T) {
	h := newHarness(t, nil)
	items := batch("per", 6, true)
	items[2].Job.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "not a cron"}
	items[4].Job.Payload = make([]byte, 300<<10)
	items[5].IdempotencyKey = items[0].IdempotencyKey
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items, Mode: sundialv1.CreateJobsMode_CREATE_JOBS_MODE_PER_ITEM}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCreated() != 3 || resp.GetRefused() != 3 {
		t.Fatalf("created %d refused %d, want 3 and 3", resp.GetCreated(), resp.GetRefused())
	}
	wantField := map[int]string{2: "schedule.cron", 4: "payload", 5: "idempotency_key"}
	for i, r := range resp.GetResults() {
		field, bad := wantField[i]
		if !bad {
			if r.GetJob().GetId() == "" || r.GetError() != nil {
				t.Fatalf("item %d: %v", i, r)
			}
			continue
		}
		e := r.GetError()
		if r.GetJob() != nil || e.GetCode() != "INVALID_ARGUMENT" || len(e.GetFields()) == 0 || e.GetFields()[0].GetField() != field {
			t.Fatalf("item %d: %v, want INVALID_ARGUMENT on %s", i, r, field)
		}
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'acme'`); n != 3 {
		t.Fatalf("%d jobs, want the 3 valid ones", n)
	}
}

// Repeating a call with the same keys creates nothing twice and returns
// the same job ids; a key sent again with another job is refused on its
// item, naming idempotency_key.
func TestIntegrationCreateJobsIdempotentRepeat(t *testing.T) {
	h := newHarness(t, nil)
	first, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("idem", 20, true)}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	// The repeat adds two new items, in the middle.
	items := batch("idem", 20, true)
	items = append(items[:10], append(batch("idem-new", 2, true), items[10:]...)...)
	again, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetCreated() != 2 || again.GetReplayed() != 20 {
		t.Fatalf("repeat: created %d replayed %d, want 2 and 20", again.GetCreated(), again.GetReplayed())
	}
	for i, r := range first.GetResults() {
		j := i
		if i >= 10 {
			j = i + 2
		}
		if got := again.GetResults()[j]; !got.GetReplayed() || got.GetJob().GetId() != r.GetJob().GetId() {
			t.Fatalf("item %d: repeat gave %v, first call %s", i, got, r.GetJob().GetId())
		}
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 22 {
		t.Fatalf("%d jobs after the repeat, want 22", n)
	}
	// A single CreateJob with one of the keys replays the same job too:
	// one home for keys.
	one, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("idem-3"), IdempotencyKey: "idem-3"}, as(tokenAcme))
	if err != nil || one.GetJob().GetId() != first.GetResults()[3].GetJob().GetId() {
		t.Fatalf("CreateJob with a batch's key: %v, %v", one, err)
	}

	changed := batch("idem", 3, true)
	changed[1].Job.Name = "something else"
	_, err = h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: changed}, as(tokenAcme))
	if status.Code(err) != codes.AlreadyExists || strings.Join(badFields(err), ",") != "items[1].idempotency_key" {
		t.Fatalf("key reused with another job: %v (fields %v)", err, badFields(err))
	}
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: changed, Mode: sundialv1.CreateJobsMode_CREATE_JOBS_MODE_PER_ITEM}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetResults()[1].GetError(); e.GetCode() != "ALREADY_EXISTS" || e.GetFields()[0].GetField() != "idempotency_key" || resp.GetReplayed() != 2 {
		t.Fatalf("per item, key reused: %v", resp)
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 22 {
		t.Fatalf("%d jobs, want still 22", n)
	}
}

// The quotas count the items of a call, not the call: a batch that would
// take the tenant past max_jobs or create_rate is refused whole in
// ALL_OR_NOTHING mode and cut at the limit in PER_ITEM mode.
func TestIntegrationCreateJobsQuotaCountsItems(t *testing.T) {
	f, err := quotas.ParseFile([]byte(`
tenants:
  acme: {max_jobs: 10}
  globex: {create_rate_per_minute: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.DefaultLimits(), f)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, harnessOptions{quotas: q})
	if _, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("q", 8, false)}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("over", 3, false)}, as(tokenAcme))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "items[2]: quota max_jobs: tenant acme has 10 jobs (limit 10)") {
		t.Fatalf("a batch past max_jobs: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'acme'`); n != 8 {
		t.Fatalf("acme has %d jobs after a refused batch, want 8", n)
	}
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("over", 3, false), Mode: sundialv1.CreateJobsMode_CREATE_JOBS_MODE_PER_ITEM}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCreated() != 2 || resp.GetResults()[2].GetError().GetCode() != "RESOURCE_EXHAUSTED" ||
		!strings.HasPrefix(resp.GetResults()[2].GetError().GetMessage(), "quota max_jobs:") {
		t.Fatalf("per item past max_jobs: %v", resp)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE tenant = 'acme'`); n != 10 {
		t.Fatalf("acme has %d jobs, limit 10", n)
	}

	// create_rate: one call of 5 items is 5 creates, not 1.
	_, err = h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("g", 5, false)}, as(tokenGlobex))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "quota create_rate: tenant globex created 4 jobs in the last minute (limit 4 per minute)") {
		t.Fatalf("a batch past create_rate: %v", err)
	}
	if _, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("g", 4, false)}, as(tokenGlobex)); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: everyMinute("g-single")}, as(tokenGlobex))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a single create after a batch used the rate: %v", err)
	}
}

// 1,000 items a call are taken; 1,001 are refused naming items, and an
// empty call too.
func TestIntegrationCreateJobsSizeLimit(t *testing.T) {
	h := newHarness(t, nil)
	_, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("big", MaxCreateJobs+1, false)}, as(tokenAcme))
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || strings.Join(badFields(err), ",") != "items" || !strings.Contains(st.Message(), "holds 1001 jobs; at most 1000 a call") {
		t.Fatalf("1,001 items: %v", err)
	}
	if _, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{}, as(tokenAcme)); status.Code(err) != codes.InvalidArgument || strings.Join(badFields(err), ",") != "items" {
		t.Fatalf("no items: %v", err)
	}
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: batch("big", MaxCreateJobs, true)}, as(tokenAcme))
	if err != nil || resp.GetCreated() != MaxCreateJobs {
		t.Fatalf("1,000 items: %v, %v", resp.GetCreated(), err)
	}
	if n := h.count(`SELECT count(*) FROM job_audit WHERE action = 'create'`); n != MaxCreateJobs {
		t.Fatalf("%d audit rows for 1,000 jobs", n)
	}
}

// An item created paused is stored PAUSED with no next fire time, wakes
// no prefetcher, and fires from its resume on.
func TestIntegrationCreateJobsPaused(t *testing.T) {
	h := newHarness(t, nil)
	items := batch("paused", 2, true)
	items[1].Paused = true
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	active, paused := resp.GetResults()[0].GetJob(), resp.GetResults()[1].GetJob()
	if active.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE || paused.GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED || paused.GetNextFireTime() != nil {
		t.Fatalf("statuses %v / %v, paused next %v", active.GetStatus(), paused.GetStatus(), paused.GetNextFireTime())
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'paused' AND next_fire_at IS NULL`, paused.GetId()); n != 1 {
		t.Fatal("the paused job is not stored paused")
	}
	// The same key sent active is another request.
	items[1].Paused = false
	if _, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items}, as(tokenAcme)); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the paused item's key sent active: %v", err)
	}
	res, err := h.client.ResumeJob(h.ctx, &sundialv1.ResumeJobRequest{Id: paused.GetId()}, as(tokenAcme))
	if err != nil || res.GetJob().GetNextFireTime() == nil {
		t.Fatalf("resume: %v, %v", res, err)
	}
}

// min_interval is checked for every item; items with the same schedule
// share one verdict within a call (checkIntervalOnce), the same one each
// would get alone.
func TestIntegrationCreateJobsMinInterval(t *testing.T) {
	f, err := quotas.ParseFile([]byte("tenants:\n  acme: {min_interval: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.DefaultLimits(), f)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, harnessOptions{quotas: q})
	items := batch("gap", 4, false)
	items[1].Job.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "*/30 * * * * *"}
	items[3].Job.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "*/30 * * * * *"}
	resp, err := h.client.CreateJobs(h.ctx, &sundialv1.CreateJobsRequest{Items: items, Mode: sundialv1.CreateJobsMode_CREATE_JOBS_MODE_PER_ITEM}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		fast := i == 1 || i == 3
		if e := r.GetError(); fast != (e != nil) || fast && (e.GetCode() != "RESOURCE_EXHAUSTED" || !strings.HasPrefix(e.GetMessage(), "quota min_interval: ")) {
			t.Fatalf("item %d: %v", i, r)
		}
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 2 {
		t.Fatalf("%d jobs, want the 2 slow ones", n)
	}
}
