package server

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

func quotaService(t *testing.T, st Store, l quotas.Limits) (*JobService, *Metrics) {
	t.Helper()
	q, err := quotas.Resolve(l, quotas.File{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	s, err := NewJobService(Config{Store: st, Versions: noVersions{}, Quotas: q, Metrics: m,
		Clock: clock.NewFake(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// resourceExhausted checks err is ResourceExhausted naming the quota first,
// with a QuotaFailure detail.
func resourceExhausted(t *testing.T, err error, q string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "quota "+q+": ") {
		t.Fatalf("got %v, want ResourceExhausted for quota %s", err, q)
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.QuotaFailure); ok {
			return
		}
	}
	t.Fatalf("no QuotaFailure detail: %v", st.Details())
}

func TestCreateJobQuotas(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	var asked store.CreateOptions
	limits := quotas.Limits{MaxJobs: 10, MinInterval: time.Minute, CreatesPerMinute: 5}

	// The store is asked to count as far as the limits, over a minute.
	s, _ := quotaService(t, fixedNowStore{now: now, usage: store.Usage{Jobs: 9, CreatedRecently: 4}, asked: &asked}, limits)
	ctx := auth.WithActor(tenantCtx, "acme/deployer")
	if _, err := s.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: validJob()}); err != nil {
		t.Fatal(err)
	}
	if asked.Usage != (store.UsageQuery{JobsUpTo: 10, CreatedWithin: time.Minute, CreatedUpTo: 5}) || asked.Actor != "acme/deployer" {
		t.Fatalf("create options: %+v", asked)
	}

	s, m := quotaService(t, fixedNowStore{now: now, usage: store.Usage{Jobs: 10}}, limits)
	_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: validJob()})
	resourceExhausted(t, err, quotas.MaxJobs)
	if !strings.Contains(err.Error(), "tenant acme has 10 jobs (limit 10)") {
		t.Fatalf("message: %v", err)
	}
	if got := testutil.ToFloat64(m.quotaRejections.WithLabelValues(quotas.MaxJobs)); got != 1 {
		t.Fatalf("max_jobs rejections = %v", got)
	}

	s, m = quotaService(t, fixedNowStore{now: now, usage: store.Usage{CreatedRecently: 5}}, limits)
	_, err = s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: validJob()})
	resourceExhausted(t, err, quotas.CreateRate)
	if got := testutil.ToFloat64(m.quotaRejections.WithLabelValues(quotas.CreateRate)); got != 1 {
		t.Fatalf("create_rate rejections = %v", got)
	}

	s, m = quotaService(t, fixedNowStore{now: now}, limits)
	j := validJob()
	j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "*/30 * * * * *"}
	_, err = s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
	resourceExhausted(t, err, quotas.MinInterval)
	if got := testutil.ToFloat64(m.quotaRejections.WithLabelValues(quotas.MinInterval)); got != 1 {
		t.Fatalf("min_interval rejections = %v", got)
	}
}

// mutateStore runs the decision function over a stored job, as the store
// would, without a database.
type mutateStore struct {
	Store
	now    time.Time
	job    *sundialv1.Job
	change *store.Change
}

func (m mutateStore) Mutate(_ context.Context, _, _ string, change store.Change, fn store.MutateFunc) (store.Mutated, error) {
	if m.change != nil {
		*m.change = change
	}
	next, err := fn(m.now, m.job)
	if err != nil {
		return store.Mutated{}, err
	}
	next.Version = m.job.GetVersion() + 1
	return store.Mutated{Job: next, Changed: true}, nil
}

func TestUpdateJobChecksMinInterval(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cur := validJob()
	cur.Id, cur.Tenant, cur.Version, cur.Status = someID, "acme", 3, sundialv1.JobStatus_JOB_STATUS_ACTIVE
	cur.CreateTime = timestamppb.New(now.Add(-time.Hour))
	var change store.Change
	s, _ := quotaService(t, mutateStore{now: now, job: cur, change: &change}, quotas.Limits{MinInterval: time.Hour})
	_, err := s.UpdateJob(tenantCtx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: someID,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "*/5 * * * *"}}}})
	resourceExhausted(t, err, quotas.MinInterval)

	// A change elsewhere is not checked against the schedule; the audit
	// row names the changed paths and the dropped firings' reason the
	// new version.
	resp, err := s.UpdateJob(tenantCtx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: someID, Name: "renamed"}})
	if err != nil {
		t.Fatal(err)
	}
	if change.Audit.Action != store.ActionUpdate || change.Audit.Actor != "acme/unknown" {
		t.Fatalf("audit: %+v", change.Audit)
	}
	if paths, _ := change.Audit.Detail["paths"].([]string); len(paths) != 1 || paths[0] != "name" {
		t.Fatalf("audit paths: %v", change.Audit.Detail)
	}
	if got := change.DropReason(resp.GetJob()); got != "job updated to version 4" {
		t.Fatalf("drop reason %q", got)
	}
}

func TestTransitionsNameTheirDropReason(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	cur := validJob()
	cur.Id, cur.Tenant, cur.Version, cur.Status = someID, "acme", 3, sundialv1.JobStatus_JOB_STATUS_ACTIVE
	cur.CreateTime = timestamppb.New(now.Add(-time.Hour))
	var change store.Change
	s := newService(t, mutateStore{now: now, job: cur, change: &change})
	if _, err := s.PauseJob(tenantCtx, &sundialv1.PauseJobRequest{Id: someID}); err != nil {
		t.Fatal(err)
	}
	if change.Audit.Action != store.ActionPause || change.DropReason(cur) != "job paused" {
		t.Fatalf("pause: %+v", change.Audit)
	}
	if _, err := s.DeleteJob(tenantCtx, &sundialv1.DeleteJobRequest{Id: someID}); err != nil {
		t.Fatal(err)
	}
	if change.Audit.Action != store.ActionDelete || change.DropReason(cur) != "job deleted" {
		t.Fatalf("delete: %+v", change.Audit)
	}
}

func TestBackfillRefusesBadInputWithoutTheStore(t *testing.T) {
	s := newService(t, untouchable{t: t})
	at := func(h int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC))
	}
	for name, tc := range map[string]struct {
		req   *sundialv1.BackfillJobRequest
		field string
	}{
		"id":        {&sundialv1.BackfillJobRequest{Id: "x", StartTime: at(1), EndTime: at(2)}, "id"},
		"no start":  {&sundialv1.BackfillJobRequest{Id: someID, EndTime: at(2)}, "start_time"},
		"no end":    {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1)}, "end_time"},
		"reversed":  {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(2), EndTime: at(1)}, "end_time"},
		"bad end":   {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: &timestamppb.Timestamp{Seconds: math.MaxInt64}}, "end_time"},
		"rate":      {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: at(2), RatePerSecond: -1}, "rate_per_second"},
		"rate nan":  {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: at(2), RatePerSecond: math.NaN()}, "rate_per_second"},
		"rate huge": {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: at(2), RatePerSecond: 1e9}, "rate_per_second"},
		"max slots": {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: at(2), MaxSlots: MaxBackfillSlots + 1}, "max_slots"},
		"neg slots": {&sundialv1.BackfillJobRequest{Id: someID, StartTime: at(1), EndTime: at(2), MaxSlots: -1}, "max_slots"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.BackfillJob(tenantCtx, tc.req)
			if _, ok := violations(t, err)[tc.field]; !ok {
				t.Fatalf("no violation for %s: %v", tc.field, err)
			}
		})
	}
}

// noDeadLetters fails the test if a refused request reaches it.
type noDeadLetters struct {
	DeadLetterStore
	t *testing.T
}

func (n noDeadLetters) ListDeadLetters(context.Context, string, store.DeadLetterFilter, *store.DeadLetterCursor, int) ([]store.DeadLetter, error) {
	n.t.Error("ListDeadLetters reached the store")
	return nil, errors.New("unexpected")
}

func (n noDeadLetters) Redrive(context.Context, string, string, store.RedriveSelection, bool, store.RedriveFunc) (store.RedriveResult, error) {
	n.t.Error("Redrive reached the store")
	return store.RedriveResult{}, errors.New("unexpected")
}

func TestDeadLetterRequestsRefuseBadInput(t *testing.T) {
	s, err := NewDeadLetterService(DeadLetterConfig{Store: noDeadLetters{t: t}})
	if err != nil {
		t.Fatal(err)
	}
	since := timestamppb.New(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	until := timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for name, tc := range map[string]struct {
		req   *sundialv1.ListDeadLettersRequest
		field string
	}{
		"job id":     {&sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{JobId: "x"}}, "filter.job_id"},
		"range":      {&sundialv1.ListDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{Since: since, Until: until}}, "filter.until"},
		"page size":  {&sundialv1.ListDeadLettersRequest{PageSize: -1}, "page_size"},
		"page token": {&sundialv1.ListDeadLettersRequest{PageToken: "garbage"}, "page_token"},
	} {
		t.Run("list "+name, func(t *testing.T) {
			_, err := s.ListDeadLetters(tenantCtx, tc.req)
			if _, ok := violations(t, err)[tc.field]; !ok {
				t.Fatalf("no violation for %s: %v", tc.field, err)
			}
		})
	}
	for name, tc := range map[string]struct {
		req   *sundialv1.RedriveDeadLettersRequest
		field string
	}{
		"nothing":          {&sundialv1.RedriveDeadLettersRequest{}, "filter"},
		"both":             {&sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}, ExecutionIds: []string{someID}}, "execution_ids"},
		"bad id":           {&sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{someID, "nope"}}, "execution_ids[1]"},
		"include redriven": {&sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{IncludeRedriven: true}}, "filter.include_redriven"},
		"rate":             {&sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}, RatePerSecond: math.Inf(1)}, "rate_per_second"},
		"limit":            {&sundialv1.RedriveDeadLettersRequest{Filter: &sundialv1.DeadLetterFilter{}, Limit: MaxRedriveLimit + 1}, "limit"},
		"ids over limit":   {&sundialv1.RedriveDeadLettersRequest{ExecutionIds: []string{someID, someID}, Limit: 1}, "execution_ids"},
	} {
		t.Run("redrive "+name, func(t *testing.T) {
			_, err := s.RedriveDeadLetters(tenantCtx, tc.req)
			if _, ok := violations(t, err)[tc.field]; !ok {
				t.Fatalf("no violation for %s: %v", tc.field, err)
			}
		})
	}
	if _, err := s.GetDeadLetter(tenantCtx, &sundialv1.GetDeadLetterRequest{ExecutionId: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("GetDeadLetter bad id: %v", err)
	}
	if _, err := s.ListDeadLetters(context.Background(), &sundialv1.ListDeadLettersRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no tenant: %v", err)
	}
}

func TestListJobAuditRefusesBadInput(t *testing.T) {
	s := newService(t, untouchable{t: t})
	if _, err := s.ListJobAudit(tenantCtx, &sundialv1.ListJobAuditRequest{Id: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad id: %v", err)
	}
	if _, ok := violations(t, func() error {
		_, err := s.ListJobAudit(tenantCtx, &sundialv1.ListJobAuditRequest{Id: someID, PageToken: "!!"})
		return err
	}())["page_token"]; !ok {
		t.Fatal("bad page token accepted")
	}
}

func TestPacing(t *testing.T) {
	p := pacer{lead: 2 * time.Minute}
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	if got := p.fireAt(start, 0, 10); !got.Equal(start) {
		t.Fatalf("first = %v", got)
	}
	if got := p.fireAt(start, 25, 10); !got.Equal(start.Add(2500 * time.Millisecond)) {
		t.Fatalf("25th at 10/s = %v", got)
	}
	if got := p.fireAt(start, 3, 0.5); !got.Equal(start.Add(6 * time.Second)) {
		t.Fatalf("3rd at 0.5/s = %v", got)
	}
	if got := outbox.PublishAt(start.Add(10*time.Minute), p.lead, start); !got.Equal(start.Add(8 * time.Minute)) {
		t.Fatalf("publishAt = %v", got)
	}
}
