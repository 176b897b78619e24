package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeAPI records the last request of each kind and answers from canned
// data. It runs behind the real authentication interceptor.
// fakeNow is the clock the commands run with in these tests.
var fakeNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type fakeAPI struct {
	dlq   fakeDLQ
	jobs  fakeJobCalls  // remote_jobs_test.go
	cals  fakeCalendars // calendars_test.go
	keys  fakeKeys      // signingkeys_test.go
	toks  fakeTokens    // tokens_test.go
	audit fakeAudit     // audit_test.go

	sundialv1.UnimplementedJobServiceServer
	mu       sync.Mutex
	create   *sundialv1.CreateJobRequest
	update   *sundialv1.UpdateJobRequest
	lists    []*sundialv1.ListJobsRequest
	backfill *sundialv1.BackfillJobRequest
	tenant   string
}

func (f *fakeAPI) CreateJob(ctx context.Context, req *sundialv1.CreateJobRequest) (*sundialv1.CreateJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.create = req
	f.tenant, _ = auth.TenantFrom(ctx)
	if req.GetJob().GetSchedule().GetCron() == "bad" {
		st, _ := status.New(codes.InvalidArgument, "schedule.cron: nope").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "schedule.cron", Description: "nope"}},
		})
		return nil, st.Err()
	}
	j := proto.Clone(req.GetJob()).(*sundialv1.Job)
	j.Id, j.Version, j.Status = "01900000-0000-7000-8000-000000000001", 1, sundialv1.JobStatus_JOB_STATUS_ACTIVE
	return &sundialv1.CreateJobResponse{Job: j}, nil
}

func (f *fakeAPI) UpdateJob(_ context.Context, req *sundialv1.UpdateJobRequest) (*sundialv1.UpdateJobResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.update = req
	return &sundialv1.UpdateJobResponse{Job: req.GetJob()}, nil
}

func (f *fakeAPI) ListJobs(_ context.Context, req *sundialv1.ListJobsRequest) (*sundialv1.ListJobsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, req)
	if req.GetPageToken() == "" {
		return &sundialv1.ListJobsResponse{Jobs: []*sundialv1.Job{{Id: "a", Name: "first"}}, NextPageToken: "p2"}, nil
	}
	return &sundialv1.ListJobsResponse{Jobs: []*sundialv1.Job{{Id: "b", Name: "second"}}}, nil
}

func (f *fakeAPI) TriggerJob(_ context.Context, req *sundialv1.TriggerJobRequest) (*sundialv1.TriggerJobResponse, error) {
	return &sundialv1.TriggerJobResponse{ExecutionId: "exec-" + req.GetId(), ScheduledTime: timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}, nil
}

func startFake(t *testing.T) (*fakeAPI, string) {
	t.Helper()
	tokens, err := auth.NewTokens(map[string]string{"tok": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(tokens.UnaryServerInterceptor()))
	f := &fakeAPI{}
	sundialv1.RegisterJobServiceServer(srv, f)
	sundialv1.RegisterDeadLetterServiceServer(srv, &f.dlq)
	sundialv1.RegisterCalendarServiceServer(srv, &f.cals)
	sundialv1.RegisterSigningKeyServiceServer(srv, &f.keys)
	sundialv1.RegisterTokenServiceServer(srv, &f.toks)
	sundialv1.RegisterForecastServiceServer(srv, fakeForecast{})
	sundialv1.RegisterAuditServiceServer(srv, &f.audit)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return f, ln.Addr().String()
}

// run runs a gRPC subcommand as the CLI would, with SUNDIAL_ADDR and
// SUNDIAL_TOKEN in its environment.
func run(t *testing.T, addr string, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cio := cmdIO{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": "tok"}[k]
	}, Now: func() time.Time { return fakeNow }}
	cmd, ok := lookup(args[0])
	if !ok || !cmd.run.remote() {
		t.Fatalf("no gRPC command %q", args[0])
	}
	code := cmd.invoke(context.Background(), &env{io: cio, now: cio.now}, args[1:])
	return code, stdout.String(), stderr.String()
}

func TestCreateFromFileAndFlags(t *testing.T) {
	f, addr := startFake(t)
	file := filepath.Join(t.TempDir(), "job.yaml")
	err := os.WriteFile(file, []byte(`
name: from-file
labels: {team: billing}
schedule:
  cron: "0 9 * * MON-FRI"
  timezone: Europe/Paris
  dst_gap: skip
target:
  http:
    url: https://hooks.example/run
payload: {report: daily}
priority: HIGH
retry: {max_attempts: 3, backoff: exponential_with_jitter, initial_delay: 2s}
misfire: {action: RUN_ALL}
max_jitter: 10s
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, addr, nil, "create", "-f", file, "--name", "override", "--idempotency-key", "k1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	req := f.create
	j := req.GetJob()
	if f.tenant != "acme" || req.GetIdempotencyKey() != "k1" {
		t.Fatalf("tenant %q key %q", f.tenant, req.GetIdempotencyKey())
	}
	if j.GetName() != "override" || j.GetLabels()["team"] != "billing" || j.GetSchedule().GetTimezone() != "Europe/Paris" ||
		j.GetSchedule().GetDstGap() != sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP ||
		j.GetPriority() != sundialv1.Priority_PRIORITY_HIGH || j.GetRetry().GetBackoff() != sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER ||
		j.GetRetry().GetInitialDelay().AsDuration() != 2*time.Second || j.GetMisfire().GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL ||
		j.GetMaxJitter().AsDuration() != 10*time.Second {
		t.Fatalf("job sent: %v", j)
	}
	if string(j.GetPayload()) != `{"report":"daily"}` {
		t.Fatalf("payload = %q", j.GetPayload())
	}
	if !strings.Contains(out, "override") || !strings.Contains(out, "HIGH") {
		t.Fatalf("table output:\n%s", out)
	}
}

func TestCreateFromFlagsOnly(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "create", "--name", "k", "--every", "90s", "--kafka-topic", "billing.events",
		"--label", "a=1", "--label", "b=2", "--payload", "hi", "--overlap", "skip", "--start", "2030-01-01T00:00:00Z")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	j := f.create.GetJob()
	if j.GetSchedule().GetInterval().AsDuration() != 90*time.Second || j.GetTarget().GetKafka().GetTopic() != "billing.events" ||
		len(j.GetLabels()) != 2 || string(j.GetPayload()) != "hi" || j.GetOverlap() != sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP ||
		!j.GetSchedule().GetStartTime().AsTime().Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("job sent: %v", j)
	}
}

func TestUsageErrors(t *testing.T) {
	_, addr := startFake(t)
	for name, args := range map[string][]string{
		"two schedules": {"create", "--cron", "* * * * *", "--every", "1m"},
		"bad enum":      {"create", "--priority", "urgent"},
		"bad instant":   {"create", "--once", "tomorrow"},
		"get no id":     {"get"},
		"get two ids":   {"get", "a", "b"},
		"bad output":    {"get", "a", "-o", "yaml"},
		"update empty":  {"update", "a"},
		"unknown flag":  {"list", "--colour"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", name, code, stderr)
		}
	}
	if code, _, stderr := run(t, addr, map[string]string{"SUNDIAL_TOKEN": ""}, "list"); code != 2 || !strings.Contains(stderr, "SUNDIAL_TOKEN") {
		t.Fatalf("no token: exit %d %s", code, stderr)
	}
}

func TestServerErrorsNameTheField(t *testing.T) {
	_, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "create", "--cron", "bad", "--url", "https://x.example/")
	if code != 1 || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, "  schedule.cron: nope") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	// A wrong token is the server's refusal, exit 1.
	code, _, stderr = run(t, addr, nil, "list", "--token", "wrong")
	if code != 1 || !strings.Contains(stderr, "Unauthenticated") {
		t.Fatalf("wrong token: exit %d %s", code, stderr)
	}
}

func TestUpdateMaskFromFlags(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "update", "J1", "--cron", "0 8 * * *", "--timezone", "Asia/Tokyo", "--max-attempts", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := f.update.GetUpdateMask().GetPaths()
	want := []string{"retry.max_attempts", "schedule.cron", "schedule.timezone"}
	if !slices.Equal(got, want) || f.update.GetJob().GetId() != "J1" {
		t.Fatalf("mask %v id %q, want %v", got, f.update.GetJob().GetId(), want)
	}

	file := filepath.Join(t.TempDir(), "patch.json")
	if err := os.WriteFile(file, []byte(`{"priority": "LOW", "target": {"http": {"url": "https://new.example/"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, addr, nil, "update", "-f", file, "J2", "--name", "n")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got = f.update.GetUpdateMask().GetPaths()
	slices.Sort(got)
	if want := []string{"name", "name", "priority", "target"}; !slices.Equal(got, want) {
		t.Fatalf("mask with file = %v, want %v", got, want)
	}
}

func TestListFollowsPagesAndPrintsJSON(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "list", "--all", "--label", "team=a", "--status", "paused", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(f.lists) != 2 || f.lists[1].GetPageToken() != "p2" || f.lists[0].GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED ||
		f.lists[1].GetLabels()["team"] != "a" {
		t.Fatalf("requests: %v", f.lists)
	}
	var resp struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Jobs) != 2 || resp.Jobs[1].ID != "b" {
		t.Fatalf("json output %q: %v", out, err)
	}
	// Without --all: one page and a hint on stderr.
	code, out, stderr = run(t, addr, nil, "list")
	if code != 0 || !strings.Contains(out, "first") || strings.Contains(out, "second") || !strings.Contains(stderr, "--page-token p2") {
		t.Fatalf("one page: exit %d\n%s\n%s", code, out, stderr)
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	_, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "trigger", "J9", "-o", "json")
	if code != 0 || !strings.Contains(out, `"execution_id": "exec-J9"`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = run(t, addr, nil, "trigger", "--", "J8")
	if code != 0 || !strings.Contains(out, "exec-J8") {
		t.Fatalf("after --: exit %d %s", code, out)
	}
}

func TestParseJobFileRoundTrip(t *testing.T) {
	j := &sundialv1.Job{
		Id: "x", Name: "n", Payload: []byte("raw bytes"), Priority: sundialv1.Priority_PRIORITY_LOW,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))}},
	}
	b, err := jsonOut.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := parseJobFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, j) {
		t.Fatalf("round trip:\n%v\n%v", back, j)
	}
	if _, err := parseJobFile([]byte("- a list")); err == nil {
		t.Fatal("accepted a list")
	}
	if _, err := parseJobFile([]byte("colour: red")); err == nil {
		t.Fatal("accepted an unknown field")
	}
}
