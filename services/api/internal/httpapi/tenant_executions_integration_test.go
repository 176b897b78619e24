//go:build integration

package httpapi_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// GET /v1/executions: the token's tenant's attempts across its jobs, with
// the range and status filter as query parameters, against real Postgres,
// Redis and Cassandra.
func TestIntegrationHTTPTenantExecutions(t *testing.T) {
	api := apitest.Start(t, apitest.Options{Ledger: true})
	slot := time.Now().Add(-2 * time.Hour).Truncate(time.Minute).UTC()
	for i, st := range []sundialv1.ExecutionStatus{
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
	} {
		at := slot.Add(time.Duration(i) * time.Minute)
		if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{
			ExecutionId: uuid.NewString(), JobId: uuid.NewString(), Tenant: "acme", Attempt: 1,
			Status: st, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at),
		}); err != nil {
			t.Fatal(err)
		}
	}
	code, got, _ := call(t, api, "GET", "/v1/executions", apitest.TokenAcme, "")
	if code != 200 || len(got["attempts"].([]any)) != 3 {
		t.Fatalf("all: %d %v", code, got)
	}
	q := url.Values{"statuses": {"EXECUTION_STATUS_FAILED", "EXECUTION_STATUS_SKIPPED"},
		"start_time": {slot.Format(time.RFC3339)}, "end_time": {slot.Add(time.Hour).Format(time.RFC3339)}}
	code, got, _ = call(t, api, "GET", "/v1/executions?"+q.Encode(), apitest.TokenAcme, "")
	if code != 200 || len(got["attempts"].([]any)) != 2 {
		t.Fatalf("failed and skipped: %d %v", code, got)
	}
	newest := got["attempts"].([]any)[0].(map[string]any)
	if newest["status"] != "EXECUTION_STATUS_SKIPPED" {
		t.Fatalf("newest first: %v", newest)
	}
	if code, got, _ := call(t, api, "GET", "/v1/executions", apitest.TokenGlobex, ""); code != 200 || got["attempts"] != nil {
		t.Fatalf("globex: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/executions?start_time=2030-01-01T00:00:00Z&end_time=2029-01-01T00:00:00Z", apitest.TokenAcme, ""); code != 400 {
		t.Fatalf("an empty range: %d %v", code, got)
	}
}
