//go:build integration

package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// The overlap policies and max_concurrency over HTTP/JSON, and
// CancelExecution's route against real Postgres, Redis and Cassandra: an
// execution the ledger does not have is missing, a running one is
// cancelled on behalf of the caller (asking again is harmless), another
// tenant's execution reads as missing, and an ended one is refused (the
// ledger's CANCELLED row outranks its RUNNING one).
func TestIntegrationHTTPOverlapAndCancel(t *testing.T) {
	api := apitest.Start(t, apitest.Options{Ledger: true})
	const target = `"target": {"http": {"url": "https://reports.example/run", "cancel_url": "https://reports.example/cancel"}}`
	code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme,
		`{"job": {"name": "two", "schedule": {"cron": "@hourly"}, `+target+`, "max_concurrency": 2}}`)
	if code != 400 || !strings.Contains(got["message"].(string), "max_concurrency") {
		t.Fatalf("max_concurrency 2 under ALLOW: %d %v", code, got)
	}
	code, got, _ = call(t, api, "POST", "/v1/jobs", apitest.TokenAcme,
		`{"job": {"name": "queue", "schedule": {"cron": "@hourly"}, `+target+`, "overlap": "OVERLAP_POLICY_BUFFER_ALL", "max_concurrency": 3}}`)
	if code != 200 || job(got)["overlap"] != "OVERLAP_POLICY_BUFFER_ALL" || job(got)["max_concurrency"] != float64(3) {
		t.Fatalf("BUFFER_ALL, 3: %d %v", code, got)
	}
	id := job(got)["id"].(string)
	if code, got, _ := call(t, api, "PATCH", "/v1/jobs/"+id+"?update_mask=overlap,max_concurrency", apitest.TokenAcme,
		`{"overlap": "OVERLAP_POLICY_TERMINATE_OTHER", "max_concurrency": 1}`); code != 200 || job(got)["overlap"] != "OVERLAP_POLICY_TERMINATE_OTHER" {
		t.Fatalf("update to TERMINATE_OTHER: %d %v", code, got)
	}

	exec := uuid.NewString()
	record := func(status sundialv1.ExecutionStatus) {
		t.Helper()
		now := time.Now()
		if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{ExecutionId: exec, JobId: id, Tenant: "acme", Attempt: 1,
			Status: status, ScheduledTime: timestamppb.New(now), FireTime: timestamppb.New(now), FenceToken: 1}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/v1/jobs/" + id + "/executions/" + exec + ":cancel"
	if code, got, _ := call(t, api, "POST", path, apitest.TokenAcme, "{}"); code != 404 {
		t.Fatalf("cancel before the ledger has it: %d %v", code, got)
	}
	record(sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	code, got, _ = call(t, api, "POST", path, apitest.TokenAcme, "{}")
	who, _ := got["cancelled_by"].(string)
	if code != 200 || got["execution_id"] != exec || got["status"] != "EXECUTION_STATUS_RUNNING" || !strings.HasPrefix(who, "acme") {
		t.Fatalf("cancel: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", path, apitest.TokenAcme, "{}"); code != 200 || got["cancelled_by"] != who {
		t.Fatalf("cancel again: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", path, apitest.TokenGlobex, "{}"); code != 404 {
		t.Fatalf("another tenant: %d %v", code, got)
	}
	// Each cancel request the api recorded is in the job's trail, naming
	// who asked and the execution; the other tenant's refused one is not.
	code, got, _ = call(t, api, "GET", "/v1/jobs/"+id+"/audit", apitest.TokenAcme, "")
	cancels := 0
	for _, e := range got["entries"].([]any) {
		if e := e.(map[string]any); e["action"] == "cancel" {
			cancels++
			if e["actor"] != who || !strings.Contains(e["detail"].(string), exec) {
				t.Fatalf("the cancel's audit entry: %v", e)
			}
		}
	}
	if code != 200 || cancels != 2 {
		t.Fatalf("the job's trail has %d cancel entries (%d), want 2", cancels, code)
	}
	record(sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED)
	if code, got, _ := call(t, api, "POST", path, apitest.TokenAcme, "{}"); code != 400 || got["code"] != float64(9) {
		t.Fatalf("cancel of an ended execution: %d %v, want FailedPrecondition", code, got)
	}
}
