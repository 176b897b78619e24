package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ListTenantExecutions of the fake api answers one attempt whose error
// says what it was asked (so the test reads the request off the output).
func (f *fakeAPI) ListTenantExecutions(_ context.Context, req *sundialv1.ListTenantExecutionsRequest) (*sundialv1.ListTenantExecutionsResponse, error) {
	a := attemptFixture("E9", 1, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED)
	a.Error = fmt.Sprintf("start=%s end=%s", stamp(req.GetStartTime().AsTime(), req.GetStartTime() != nil), stamp(req.GetEndTime().AsTime(), req.GetEndTime() != nil))
	var st []string
	for _, s := range req.GetStatuses() {
		st = append(st, strings.TrimPrefix(s.String(), "EXECUTION_STATUS_"))
	}
	a.JobId = fmt.Sprintf("statuses=%s,size=%d", strings.Join(st, "+"), req.GetPageSize()) // the JOB column is never cut
	return &sundialv1.ListTenantExecutionsResponse{Attempts: []*sundialv1.ExecutionAttempt{a}, NextPageToken: "x2"}, nil
}

func stamp(t time.Time, set bool) string {
	if !set {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func TestExecutionsCommand(t *testing.T) {
	_, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "executions", "--since", "2026-11-20T00:00:00Z", "--until", "2026-11-21T00:00:00Z",
		"--status", "failed,dead", "--status", "skipped", "--page-size", "7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"SCHEDULED", "JOB", "E9", "FAILED",
		"start=2026-11-20T00:00:00Z end=2026-11-21T00:00:00Z", "statuses=FAILED+DEAD+SKIPPED,size=7"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "--page-token x2") {
		t.Errorf("no next page on stderr: %s", stderr)
	}
	code, out, _ = run(t, addr, nil, "executions")
	if code != 0 || !strings.Contains(out, "start=- end=-") {
		t.Fatalf("defaults are the api's: %d %s", code, out)
	}
	code, _, stderr = run(t, addr, nil, "executions", "--status", "bogus")
	if code != 2 || !strings.Contains(stderr, `--status: "bogus" is not one of`) {
		t.Fatalf("a bad status: %d %s", code, stderr)
	}
	code, _, stderr = run(t, addr, nil, "executions", "--since", "yesterday")
	if code != 2 || !strings.Contains(stderr, "--since") {
		t.Fatalf("a bad --since: %d %s", code, stderr)
	}
}
