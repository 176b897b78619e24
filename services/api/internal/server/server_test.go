package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// untouchable is a store every write method of which fails the test: a
// request refused by validation must never reach it. Reads are not
// overridden (the embedded nil interface panics if one is reached).
type untouchable struct {
	Store
	t *testing.T
}

func (u untouchable) Create(context.Context, string, store.CreateOptions, store.BuildFunc) (*sundialv1.Job, bool, error) {
	u.t.Error("Create reached the store")
	return nil, false, errors.New("unexpected")
}

func (u untouchable) Mutate(context.Context, string, string, store.Change, store.MutateFunc) (store.Mutated, error) {
	u.t.Error("Mutate reached the store")
	return store.Mutated{}, errors.New("unexpected")
}

func (u untouchable) Stage(context.Context, string, string, bool, store.StageFunc) (store.StageResult, error) {
	u.t.Error("Stage reached the store")
	return store.StageResult{}, errors.New("unexpected")
}

func (u untouchable) List(context.Context, string, store.ListQuery) ([]*sundialv1.Job, error) {
	u.t.Error("List reached the store")
	return nil, errors.New("unexpected")
}

type noVersions struct{}

func (noVersions) PublishVersion(context.Context, string, int64) error { return nil }

func newService(t *testing.T, st Store) *JobService {
	t.Helper()
	s, err := NewJobService(Config{Store: st, Versions: noVersions{}, Clock: clock.NewFake(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var tenantCtx = auth.WithTenant(context.Background(), "acme")

func validJob() *sundialv1.Job {
	return &sundialv1.Job{
		Name:     "report",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 3 * * *"}},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: "https://hooks.example/run",
		}}},
	}
}

// violations returns the BadRequest field violations of an InvalidArgument.
func violations(t *testing.T, err error) map[string]string {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	out := map[string]string{}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out[v.GetField()] = v.GetDescription()
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("InvalidArgument without BadRequest details: %v", err)
	}
	return out
}

func TestCreateJobRefusesBadInputWithoutWriting(t *testing.T) {
	s := newService(t, untouchable{t: t})
	cases := map[string]struct {
		req    *sundialv1.CreateJobRequest
		fields []string
	}{
		"no job": {&sundialv1.CreateJobRequest{}, []string{"job"}},
		"bad cron and url": {&sundialv1.CreateJobRequest{Job: func() *sundialv1.Job {
			j := validJob()
			j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}
			j.GetTarget().GetHttp().Url = "not a url"
			return j
		}()}, []string{"schedule.cron", "target.http.url"}},
		"jitter": {&sundialv1.CreateJobRequest{Job: func() *sundialv1.Job {
			j := validJob()
			j.MaxJitter = durationpb.New(2 * time.Minute)
			return j
		}()}, []string{"max_jitter"}},
		"idempotency key": {&sundialv1.CreateJobRequest{Job: validJob(), IdempotencyKey: strings.Repeat("k", 300)}, []string{"idempotency_key"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.CreateJob(tenantCtx, tc.req)
			got := violations(t, err)
			for _, f := range tc.fields {
				if _, ok := got[f]; !ok {
					t.Errorf("no violation for %s in %v", f, got)
				}
				if !strings.Contains(status.Convert(err).Message(), f+": ") {
					t.Errorf("message %q does not name %s", status.Convert(err).Message(), f)
				}
			}
		})
	}
}

func TestCallsWithoutTenantAreUnauthenticated(t *testing.T) {
	s := newService(t, untouchable{t: t})
	ctx := context.Background()
	_, err := s.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: validJob()})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("CreateJob without tenant: %v", err)
	}
	_, err = s.PreviewSchedule(ctx, &sundialv1.PreviewScheduleRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("PreviewSchedule without tenant: %v", err)
	}
}

func TestIDsMustBeUUIDs(t *testing.T) {
	s := newService(t, untouchable{t: t})
	check := func(name string, err error, field string) {
		t.Helper()
		if _, ok := violations(t, err)[field]; !ok {
			t.Errorf("%s: no violation for %s: %v", name, field, err)
		}
	}
	_, err := s.GetJob(tenantCtx, &sundialv1.GetJobRequest{Id: "nope"})
	check("GetJob", err, "id")
	_, err = s.PauseJob(tenantCtx, &sundialv1.PauseJobRequest{})
	check("PauseJob", err, "id")
	_, err = s.ResumeJob(tenantCtx, &sundialv1.ResumeJobRequest{Id: "1"})
	check("ResumeJob", err, "id")
	_, err = s.DeleteJob(tenantCtx, &sundialv1.DeleteJobRequest{Id: "x"})
	check("DeleteJob", err, "id")
	_, err = s.TriggerJob(tenantCtx, &sundialv1.TriggerJobRequest{Id: "x"})
	check("TriggerJob", err, "id")
	_, err = s.UpdateJob(tenantCtx, &sundialv1.UpdateJobRequest{Job: &sundialv1.Job{Id: "x"}})
	check("UpdateJob", err, "job.id")
	_, err = s.ListExecutions(tenantCtx, &sundialv1.ListExecutionsRequest{JobId: "x"})
	check("ListExecutions", err, "job_id")
	_, err = s.GetExecution(tenantCtx, &sundialv1.GetExecutionRequest{ExecutionId: "x"})
	check("GetExecution", err, "execution_id")
}

const someID = "01900000-0000-7000-8000-000000000001"

func TestUpdateJobRefusesBadMasks(t *testing.T) {
	s := newService(t, untouchable{t: t})
	for name, tc := range map[string]struct {
		job   *sundialv1.Job
		paths []string
	}{
		"status":        {&sundialv1.Job{Id: someID}, []string{"status"}},
		"version":       {&sundialv1.Job{Id: someID}, []string{"name", "version"}},
		"unknown":       {&sundialv1.Job{Id: someID}, []string{"colour"}},
		"deep unknown":  {&sundialv1.Job{Id: someID}, []string{"schedule.colour"}},
		"into scalar":   {&sundialv1.Job{Id: someID}, []string{"name.first"}},
		"into map":      {&sundialv1.Job{Id: someID}, []string{"labels.team"}},
		"star not sole": {&sundialv1.Job{Id: someID}, []string{"*", "name"}},
		"empty job":     {&sundialv1.Job{Id: someID}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var mask *fieldmaskpb.FieldMask
			if tc.paths != nil {
				mask = &fieldmaskpb.FieldMask{Paths: tc.paths}
			}
			_, err := s.UpdateJob(tenantCtx, &sundialv1.UpdateJobRequest{Job: tc.job, UpdateMask: mask})
			if _, ok := violations(t, err)["update_mask"]; !ok {
				t.Fatalf("no update_mask violation: %v", err)
			}
		})
	}
}

func TestListJobsRefusesBadInput(t *testing.T) {
	s := newService(t, untouchable{t: t})
	for name, tc := range map[string]struct {
		req   *sundialv1.ListJobsRequest
		field string
	}{
		"page size":   {&sundialv1.ListJobsRequest{PageSize: -1}, "page_size"},
		"status":      {&sundialv1.ListJobsRequest{Status: 17}, "status"},
		"labels":      {&sundialv1.ListJobsRequest{Labels: map[string]string{"bad key": "v"}}, `labels["bad key"]`},
		"token":       {&sundialv1.ListJobsRequest{PageToken: "garbage!"}, "page_token"},
		"token other": {&sundialv1.ListJobsRequest{PageToken: encodeCursor(listCursor{After: someID, Filter: listFilterDigest(0, map[string]string{"a": "b"}, "")})}, "page_token"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.ListJobs(tenantCtx, tc.req)
			if _, ok := violations(t, err)[tc.field]; !ok {
				t.Fatalf("no violation for %s: %v", tc.field, err)
			}
		})
	}
}

// fixedNowStore hands the build function a database clock far from the
// test's own, to show CreateJob schedules by the database clock.
type fixedNowStore struct {
	Store
	now   time.Time
	usage store.Usage
	// asked records the last create's options.
	asked *store.CreateOptions
}

func (f fixedNowStore) Create(_ context.Context, _ string, opts store.CreateOptions, build store.BuildFunc) (*sundialv1.Job, bool, error) {
	if f.asked != nil {
		*f.asked = opts
	}
	j, err := build(f.now, f.usage)
	return j, false, err
}

func TestCreateJobSchedulesByDatabaseClock(t *testing.T) {
	dbNow := time.Date(2031, 7, 1, 10, 30, 0, 0, time.UTC)
	s := newService(t, fixedNowStore{now: dbNow})
	resp, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: validJob()})
	if err != nil {
		t.Fatal(err)
	}
	j := resp.GetJob()
	if want := time.Date(2031, 7, 2, 3, 0, 0, 0, time.UTC); !j.GetNextFireTime().AsTime().Equal(want) {
		t.Fatalf("next_fire_time = %v, want %v", j.GetNextFireTime().AsTime(), want)
	}
	if j.GetTenant() != "acme" || j.GetVersion() != 1 || j.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("server-owned fields: %v", j)
	}
	if j.GetPriority() != sundialv1.Priority_PRIORITY_MEDIUM || j.GetRetry().GetMaxAttempts() != 1 {
		t.Fatalf("defaults not filled: %v", j)
	}

	// A one-off before the database's now never fires: refused.
	past := validJob()
	past.Schedule.Spec = &sundialv1.Schedule_Once{Once: timestamppb.New(dbNow.Add(-time.Minute))}
	_, err = s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: past})
	if _, ok := violations(t, err)["schedule"]; !ok {
		t.Fatalf("past one-off: %v", err)
	}
}

func TestCreateJobIgnoresServerOwnedFields(t *testing.T) {
	s := newService(t, fixedNowStore{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
	j := validJob()
	j.Id, j.Tenant, j.Version, j.Status = someID, "globex", 42, sundialv1.JobStatus_JOB_STATUS_PAUSED
	resp, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetJob()
	if got.GetId() == someID || got.GetTenant() != "acme" || got.GetVersion() != 1 || got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("client set server-owned fields: %v", got)
	}
}

func TestPreviewSchedule(t *testing.T) {
	s := newService(t, untouchable{t: t})
	resp, err := s.PreviewSchedule(tenantCtx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York"},
		From:     timestamppb.New(time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)),
		Count:    3,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{
		time.Date(2026, 3, 7, 7, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), // spring-forward: shifted past the gap
		time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC),
	}
	if len(resp.GetTimes()) != len(want) {
		t.Fatalf("times = %v", resp.GetTimes())
	}
	for i, ts := range resp.GetTimes() {
		if !ts.AsTime().Equal(want[i]) {
			t.Fatalf("times[%d] = %v, want %v", i, ts.AsTime(), want[i])
		}
	}
	if resp.GetDescription() == "" {
		t.Fatal("no description")
	}

	// Default count and start (the injected clock).
	resp, err = s.PreviewSchedule(tenantCtx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Hour)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTimes()) != defaultPreviewCount || !resp.GetTimes()[0].AsTime().Equal(time.Date(2026, 1, 5, 13, 0, 0, 0, time.UTC)) {
		t.Fatalf("default preview = %v", resp.GetTimes())
	}

	_, err = s.PreviewSchedule(tenantCtx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * *"}},
		Count:    -1,
	})
	v := violations(t, err)
	if _, ok := v["schedule.cron"]; !ok {
		t.Fatalf("no schedule.cron violation: %v", v)
	}
	if _, ok := v["count"]; !ok {
		t.Fatalf("no count violation: %v", v)
	}
}

func TestMaskApplication(t *testing.T) {
	cur := validJob()
	cur.Labels = map[string]string{"team": "a"}
	cur.Retry = &sundialv1.RetryPolicy{MaxAttempts: 3, Backoff: sundialv1.Backoff_BACKOFF_FIXED}
	src := &sundialv1.Job{
		Name:     "renamed",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(time.Minute)}},
		Retry:    &sundialv1.RetryPolicy{MaxAttempts: 5},
	}

	// Empty mask: the fields src sets.
	paths, err := resolveMask(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(paths, ",") != "name,schedule,retry" {
		t.Fatalf("implied mask = %v", paths)
	}

	dst := proto.Clone(cur).(*sundialv1.Job)
	applyMask(dst, src, []string{"retry.max_attempts", "schedule.interval", "labels"})
	if dst.GetRetry().GetMaxAttempts() != 5 || dst.GetRetry().GetBackoff() != sundialv1.Backoff_BACKOFF_FIXED {
		t.Fatalf("retry.max_attempts: %v", dst.GetRetry())
	}
	if dst.GetSchedule().GetInterval().AsDuration() != time.Minute || dst.GetSchedule().GetCron() != "" {
		t.Fatalf("schedule.interval must replace the cron oneof member: %v", dst.GetSchedule())
	}
	if len(dst.GetLabels()) != 0 {
		t.Fatalf("labels unset in src must be cleared: %v", dst.GetLabels())
	}
	if dst.GetName() != "report" {
		t.Fatal("a field outside the mask changed")
	}

	// A path into a message src lacks clears the field.
	dst = proto.Clone(cur).(*sundialv1.Job)
	applyMask(dst, &sundialv1.Job{}, []string{"target.http.url"})
	if dst.GetTarget().GetHttp().GetUrl() != "" {
		t.Fatal("target.http.url not cleared")
	}

	all, err := resolveMask(src, &fieldmaskpb.FieldMask{Paths: []string{"*"}})
	if err != nil || len(all) != len(updatable) {
		t.Fatalf("* = %v, %v", all, err)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	f := listFilterDigest(sundialv1.JobStatus_JOB_STATUS_ACTIVE, map[string]string{"a": "bc"}, "")
	if f == listFilterDigest(sundialv1.JobStatus_JOB_STATUS_ACTIVE, map[string]string{"a": "bc"}, "b") {
		t.Fatal("a name search must not reuse another filter's page tokens")
	}
	if f == listFilterDigest(sundialv1.JobStatus_JOB_STATUS_ACTIVE, map[string]string{"ab": "c"}, "") {
		t.Fatal("different label filters share a digest")
	}
	tok := encodeCursor(listCursor{After: someID, Filter: f})
	c, err := decodeCursor(tok, f)
	if err != nil || c.After != someID {
		t.Fatalf("decode = %v, %v", c, err)
	}
	if _, err := decodeCursor(tok, listFilterDigest(0, nil, "")); err == nil {
		t.Fatal("token accepted for other filters")
	}
}

// A priority filter has page tokens of its own; without one the digest is
// what it was before the filter existed, so older tokens stay valid.
func TestPriorityFilterDigest(t *testing.T) {
	base := jobFilter{status: sundialv1.JobStatus_JOB_STATUS_ACTIVE, labels: map[string]string{"team": "billing"}}
	_, plain, err := base.query()
	if err != nil || plain != listFilterDigest(base.status, base.labels, "") {
		t.Fatalf("no priority: %q %v", plain, err)
	}
	high := base
	high.priority = sundialv1.Priority_PRIORITY_HIGH
	q, hd, err := high.query()
	if err != nil || hd == plain || q.Priority != sundialv1.Priority_PRIORITY_HIGH {
		t.Fatalf("high: %q %v %v", hd, q.Priority, err)
	}
	low := base
	low.priority = sundialv1.Priority_PRIORITY_LOW
	if _, ld, _ := low.query(); ld == hd {
		t.Fatal("two priorities share a digest")
	}
	bad := base
	bad.priority = 9
	if _, _, err := bad.query(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("an unknown priority: %v", err)
	}
}

// ledgerFake answers history calls from a fixed set of attempts.
type ledgerFake struct {
	attempts []*sundialv1.ExecutionAttempt
}

func (l ledgerFake) ListByJob(context.Context, string, int, string) ([]*sundialv1.ExecutionAttempt, string, error) {
	return l.attempts, "", nil
}

func (l ledgerFake) GetExecution(_ context.Context, id string) ([]*sundialv1.ExecutionAttempt, error) {
	var out []*sundialv1.ExecutionAttempt
	for _, a := range l.attempts {
		if a.GetExecutionId() == id {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, ledger.ErrNotFound
	}
	return out, nil
}

func TestGetExecutionHidesOtherTenants(t *testing.T) {
	const execID = "01900000-0000-7000-8000-0000000000e1"
	s, err := NewJobService(Config{Store: untouchable{t: t}, Versions: noVersions{}, Executions: ledgerFake{attempts: []*sundialv1.ExecutionAttempt{
		{ExecutionId: execID, Tenant: "globex", Attempt: 1},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetExecution(tenantCtx, &sundialv1.GetExecutionRequest{ExecutionId: execID}); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's execution: %v", err)
	}
	if _, err := s.GetExecution(auth.WithTenant(context.Background(), "globex"), &sundialv1.GetExecutionRequest{ExecutionId: execID}); err != nil {
		t.Fatalf("own execution: %v", err)
	}
	if _, err := s.GetExecution(tenantCtx, &sundialv1.GetExecutionRequest{ExecutionId: someID}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing execution: %v", err)
	}
}

func TestGRPCServerLifecycle(t *testing.T) {
	tokens, err := auth.NewTokens(map[string]string{"tok": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: newService(t, untouchable{t: t})})
	if err != nil {
		t.Fatal(err)
	}
	// Stoppable before start, and more than once.
	unused, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: newService(t, untouchable{t: t})})
	if err != nil {
		t.Fatal(err)
	}
	unused.Stop()
	unused.Stop()

	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, _, err := net.SplitHostPort(srv.Addr()); err != nil || strings.HasSuffix(srv.Addr(), ":0") {
		t.Fatalf("Addr = %q", srv.Addr())
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Health needs no token and says SERVING.
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: sundialv1.JobService_ServiceDesc.ServiceName})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
	// Reflection needs no token and lists the JobService.
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, svc := range rr.GetListServicesResponse().GetService() {
		found = found || svc.GetName() == sundialv1.JobService_ServiceDesc.ServiceName
	}
	if !found {
		t.Fatalf("reflection does not list the JobService: %v", rr)
	}
	_ = rs.CloseSend()

	client := sundialv1.NewJobServiceClient(conn)
	_, err = client.PreviewSchedule(ctx, &sundialv1.PreviewScheduleRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call without token: %v", err)
	}
	_, err = client.PreviewSchedule(ctx, &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
	}, grpc.PerRPCCredentials(auth.Bearer("tok")))
	if err != nil {
		t.Fatalf("call with token: %v", err)
	}
	srv.Stop()
	srv.Stop()
}
