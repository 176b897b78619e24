//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TestCancelExecutionAcrossTheProcesses cancels a running execution
// through the api, with the four services as processes: the worker holding
// the attempt abandons the slow request, the ledger records the attempt
// CANCELLED naming the caller, no retry fires although the job allows
// three attempts, the target gets a cancel notice at its cancel_url, and
// the one-off job completes (its last slot was cancelled).
func TestCancelExecutionAcrossTheProcesses(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")
	ctx := ctxT(t, 5*time.Minute)
	cl := p.client()

	var mu sync.Mutex
	var attempts []string // Sundial-Attempt of each request
	var notices []map[string]any
	var noticeHeaders []http.Header
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/cancel" {
			var n map[string]any
			_ = json.Unmarshal(body, &n)
			notices = append(notices, n)
			noticeHeaders = append(noticeHeaders, r.Header.Clone())
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		attempts = append(attempts, r.Header.Get(firing.HeaderAttempt))
		mu.Unlock()
		<-r.Context().Done() // slower than anyone waits: only a cancel ends it
	}))
	defer target.Close()

	created, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "slow-one-off",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(5 * time.Second).Truncate(time.Second))}},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
			Url: target.URL + "/run", CancelUrl: target.URL + "/cancel"}}},
		AttemptTimeout: durationpb.New(5 * time.Minute),
		Retry: &sundialv1.RetryPolicy{MaxAttempts: 3, Backoff: sundialv1.Backoff_BACKOFF_FIXED,
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Second)},
	}, IdempotencyKey: "slow-one-off"})
	if err != nil {
		t.Fatal(err)
	}
	jobID := created.GetJob().GetId()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond) // polling other processes' effects
		}
	}
	history := func() []*sundialv1.ExecutionAttempt {
		resp, err := cl.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: jobID, PageSize: 100})
		if err != nil {
			return nil
		}
		return resp.GetAttempts()
	}
	var execID string
	waitFor("the attempt running in the ledger", func() bool {
		for _, a := range history() {
			if a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
				execID = a.GetExecutionId()
				return true
			}
		}
		return false
	})
	res, err := cl.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: jobID, ExecutionId: execID})
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	who := res.GetCancelledBy()
	if who == "" || res.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		t.Fatalf("cancel answer %v", res)
	}
	var rec *sundialv1.ExecutionAttempt
	waitFor("the attempt recorded CANCELLED", func() bool {
		for _, a := range history() {
			if a.GetAttempt() == 1 && a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
				rec = a
				return true
			}
		}
		return false
	})
	if !strings.Contains(rec.GetReason(), "cancelled by "+who+" during the attempt") {
		t.Errorf("CANCELLED record's reason %q does not name %q", rec.GetReason(), who)
	}
	waitFor("the one-off job completed", func() bool {
		resp, err := cl.GetJob(ctx, &sundialv1.GetJobRequest{Id: jobID})
		return err == nil && resp.GetJob().GetStatus() == sundialv1.JobStatus_JOB_STATUS_COMPLETED
	})
	waitFor("the cancel notice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(notices) > 0
	})
	time.Sleep(3 * time.Second) // a retry would have come (1 s backoff)
	mu.Lock()
	if strings.Join(attempts, ",") != "1" {
		t.Errorf("the target saw attempts %v, want only 1", attempts)
	}
	if n := notices[0]; n["execution_id"] != execID || n["cancelled_by"] != who || noticeHeaders[0].Get(firing.HeaderEvent) != firing.EventCancelled {
		t.Errorf("cancel notice %v, headers %v", n, noticeHeaders[0])
	}
	mu.Unlock()
	if _, err := cl.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: jobID, ExecutionId: execID}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second cancel: %v, want FailedPrecondition", err)
	}
}
