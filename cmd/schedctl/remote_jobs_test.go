package main

// Unit tests of the job commands that had only integration tests: get,
// pause, resume, delete, history and server-preview, against the fake api
// (remote_test.go), so their requests and output are checked without the
// real services.

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeJobCalls records the job-state and history requests of fakeAPI.
type fakeJobCalls struct {
	mu         sync.Mutex
	ids        []string // "get J1", "pause J1", ...
	executions []*sundialv1.ListExecutionsRequest
	execution  string
	preview    *sundialv1.PreviewScheduleRequest
}

func (f *fakeAPI) calls() *fakeJobCalls { return &f.jobs }

func (f *fakeAPI) record(what string) {
	c := f.calls()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, what)
}

// atVersion is how a recorded call shows its expected_version: "@3", or
// nothing when it expects any version.
func atVersion(v int64) string {
	if v == 0 {
		return ""
	}
	return "@" + strconv.FormatInt(v, 10)
}

// fakeJob is the job the fake answers with, in status s at version v.
func fakeJob(id string, s sundialv1.JobStatus, v int64, next *timestamppb.Timestamp) *sundialv1.Job {
	return &sundialv1.Job{Id: id, Name: "nightly", Status: s, Version: v, NextFireTime: next,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * *"}, Timezone: "Europe/Paris"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/", Method: "POST"}}}}
}

func (f *fakeAPI) GetJob(_ context.Context, req *sundialv1.GetJobRequest) (*sundialv1.GetJobResponse, error) {
	f.record("get " + req.GetId())
	return &sundialv1.GetJobResponse{Job: fakeJob(req.GetId(), sundialv1.JobStatus_JOB_STATUS_ACTIVE, 2, timestamppb.New(fakeNow.Add(time.Hour)))}, nil
}

func (f *fakeAPI) PauseJob(_ context.Context, req *sundialv1.PauseJobRequest) (*sundialv1.PauseJobResponse, error) {
	f.record("pause " + req.GetId() + atVersion(req.GetExpectedVersion()))
	return &sundialv1.PauseJobResponse{Job: fakeJob(req.GetId(), sundialv1.JobStatus_JOB_STATUS_PAUSED, 3, nil)}, nil
}

func (f *fakeAPI) ResumeJob(_ context.Context, req *sundialv1.ResumeJobRequest) (*sundialv1.ResumeJobResponse, error) {
	f.record("resume " + req.GetId() + atVersion(req.GetExpectedVersion()))
	return &sundialv1.ResumeJobResponse{Job: fakeJob(req.GetId(), sundialv1.JobStatus_JOB_STATUS_ACTIVE, 4, timestamppb.New(fakeNow.Add(time.Hour)))}, nil
}

func (f *fakeAPI) DeleteJob(_ context.Context, req *sundialv1.DeleteJobRequest) (*sundialv1.DeleteJobResponse, error) {
	f.record("delete " + req.GetId() + atVersion(req.GetExpectedVersion()))
	return &sundialv1.DeleteJobResponse{Job: fakeJob(req.GetId(), sundialv1.JobStatus_JOB_STATUS_DELETED, 5, nil)}, nil
}

func attemptFixture(exec string, attempt int32, s sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{ExecutionId: exec, JobId: "J1", Attempt: attempt, Status: s,
		ScheduledTime: timestamppb.New(fakeNow.Add(-time.Hour)), Lateness: durationpb.New(2 * time.Millisecond),
		Duration: durationpb.New(84 * time.Millisecond), HttpStatus: 503, Worker: "w-1", Error: "HTTP 503"}
}

func (f *fakeAPI) ListExecutions(_ context.Context, req *sundialv1.ListExecutionsRequest) (*sundialv1.ListExecutionsResponse, error) {
	c := f.calls()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.executions = append(c.executions, req)
	return &sundialv1.ListExecutionsResponse{Attempts: []*sundialv1.ExecutionAttempt{
		attemptFixture("E2", 1, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED)}, NextPageToken: "h2"}, nil
}

func (f *fakeAPI) GetExecution(_ context.Context, req *sundialv1.GetExecutionRequest) (*sundialv1.GetExecutionResponse, error) {
	c := f.calls()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.execution = req.GetExecutionId()
	return &sundialv1.GetExecutionResponse{Attempts: []*sundialv1.ExecutionAttempt{
		attemptFixture(req.GetExecutionId(), 2, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD),
		attemptFixture(req.GetExecutionId(), 1, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED)}}, nil
}

func (f *fakeAPI) PreviewSchedule(_ context.Context, req *sundialv1.PreviewScheduleRequest) (*sundialv1.PreviewScheduleResponse, error) {
	c := f.calls()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.preview = req
	return &sundialv1.PreviewScheduleResponse{Description: "at 02:30 (America/New_York)", Times: []*timestamppb.Timestamp{
		timestamppb.New(time.Date(2026, 3, 7, 7, 30, 0, 0, time.UTC)), timestamppb.New(time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC))}}, nil
}

func TestGetPauseResumeDelete(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "get", "J1")
	if code != 0 || !strings.Contains(out, "J1") || !strings.Contains(out, "0 9 * * * (Europe/Paris)") ||
		!strings.Contains(out, "active (version 2)") || !strings.Contains(out, "2026-11-22T13:00:00Z") {
		t.Fatalf("get: exit %d\n%s%s", code, out, stderr)
	}
	for _, tc := range []struct{ cmd, want string }{
		{"pause", "job J1 paused: status paused, version 3, next fire -\n"},
		{"resume", "job J1 resumed: status active, version 4, next fire 2026-11-22T13:00:00Z\n"},
		{"delete", "job J1 deleted: status deleted, version 5, next fire -\n"},
	} {
		if code, out, stderr := run(t, addr, nil, tc.cmd, "J1"); code != 0 || out != tc.want {
			t.Errorf("%s: exit %d, stdout %q, want %q (%s)", tc.cmd, code, out, tc.want, stderr)
		}
	}
	code, out, _ = run(t, addr, nil, "pause", "J1", "-o", "json")
	var job struct {
		ID      string `json:"id"`
		Status  string `json:"status"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &job); code != 0 || err != nil || job.ID != "J1" || job.Status != "JOB_STATUS_PAUSED" || job.Version != "3" {
		t.Fatalf("pause -o json: exit %d %v\n%s", code, err, out)
	}
	for _, args := range [][]string{{"pause"}, {"resume", "a", "b"}, {"delete"}} {
		if code, _, _ := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	c := f.calls()
	want := []string{"get J1", "pause J1", "resume J1", "delete J1", "pause J1"}
	if strings.Join(c.ids, ",") != strings.Join(want, ",") {
		t.Fatalf("calls %q, want %q", c.ids, want)
	}
}

func TestHistory(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "history", "J1", "--page-size", "5", "--page-token", "h1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c := f.calls()
	if r := c.executions[0]; r.GetJobId() != "J1" || r.GetPageSize() != 5 || r.GetPageToken() != "h1" {
		t.Fatalf("request: %v", r)
	}
	if !strings.HasPrefix(out, "SCHEDULED ") || !strings.Contains(out, "E2") || !strings.Contains(out, "FAILED") ||
		!strings.Contains(out, "503") || !strings.Contains(out, "HTTP 503") || !strings.Contains(stderr, "more: --page-token h2") {
		t.Fatalf("table:\n%s%s", out, stderr)
	}
	code, out, _ = run(t, addr, nil, "history", "--execution", "E7")
	if code != 0 || c.execution != "E7" || strings.Count(out, "E7") != 2 || !strings.Contains(out, "DEAD") {
		t.Fatalf("--execution: exit %d, asked for %q\n%s", code, c.execution, out)
	}
	code, out, _ = run(t, addr, nil, "history", "J1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"next_page_token": "h2"`) || !strings.Contains(out, `"execution_id": "E2"`) {
		t.Fatalf("-o json: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"history"}, {"history", "J1", "--execution", "E7"}} {
		if code, _, _ := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestServerPreview(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "server-preview", "--cron", "30 2 * * *", "--timezone", "America/New_York",
		"--from", "2026-03-07T00:00:00Z", "-n", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := f.calls().preview
	if r.GetSchedule().GetCron() != "30 2 * * *" || r.GetSchedule().GetTimezone() != "America/New_York" || r.GetCount() != 2 ||
		!r.GetFrom().AsTime().Equal(time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("request: %v", r)
	}
	want := "at 02:30 (America/New_York)\n" +
		"2026-03-07T07:30:00Z  Sat 2026-03-07 02:30:00 EST\n" +
		"2026-03-08T07:00:00Z  Sun 2026-03-08 03:00:00 EDT\n"
	if out != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, want)
	}
	code, _, _ = run(t, addr, nil, "server-preview", "--rrule", "FREQ=DAILY;BYHOUR=9", "--start", "2026-03-01T00:00:00Z")
	if r := f.calls().preview; code != 0 || r.GetSchedule().GetRrule() != "FREQ=DAILY;BYHOUR=9" || r.GetCount() != 10 {
		t.Fatalf("--rrule: exit %d, request %v", code, r)
	}
	for name, args := range map[string][]string{
		"no schedule": {"server-preview"},
		"bad from":    {"server-preview", "--cron", "@daily", "--from", "tomorrow"},
		"arguments":   {"server-preview", "--cron", "@daily", "extra"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", name, code, stderr)
		}
	}
}
