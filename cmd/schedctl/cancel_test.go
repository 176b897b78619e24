package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// CancelExecution of the fake api: E1 of J1 is running; anything else
// has ended.
func (f *fakeAPI) CancelExecution(_ context.Context, req *sundialv1.CancelExecutionRequest) (*sundialv1.CancelExecutionResponse, error) {
	if req.GetJobId() != "J1" || req.GetExecutionId() != "E1" {
		return nil, status.Error(codes.FailedPrecondition, "execution already ended: attempt 1 is succeeded")
	}
	return &sundialv1.CancelExecutionResponse{ExecutionId: "E1", Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, CancelledBy: "acme/alice"}, nil
}

func TestCancel(t *testing.T) {
	_, addr := startFake(t)
	code, out, errOut := run(t, addr, nil, "cancel", "J1", "E1")
	if code != 0 || !strings.Contains(out, "cancel of execution E1 requested (it was running); the ledger will record it CANCELLED by acme/alice") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, addr, nil, "cancel", "J1", "E2"); code == 0 || !strings.Contains(errOut, "already ended") {
		t.Fatalf("ended execution: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, addr, nil, "cancel", "J1"); code != 2 || !strings.Contains(errOut, "want JOB_ID EXECUTION_ID") {
		t.Fatalf("one argument: exit %d: %s", code, errOut)
	}
}

// A job's text shows its concurrency beside the overlap policy, and its
// cancel_url.
func TestJobTextShowsConcurrencyAndCancelURL(t *testing.T) {
	var b strings.Builder
	r := &remote{io: cmdIO{Stdout: &b}}
	j := &sundialv1.Job{Id: "J1", Name: "q", Overlap: sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL, MaxConcurrency: 3,
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/run", CancelUrl: "https://x.example/cancel"}}}}
	if err := r.printJob(j); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "BUFFER_ALL, 3 at once") || !strings.Contains(out, "https://x.example/cancel") {
		t.Fatalf("job text:\n%s", out)
	}
}
