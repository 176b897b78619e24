//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// The Executions page lists the signed-in tenant's attempts across its
// jobs from the ledger, filtered by range and status; a filter the console
// cannot read is refused beside the form, asking nothing.
func TestIntegrationConsoleExecutions(t *testing.T) {
	api := startConsole(t, true)
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	jobA, jobB := uuid.NewString(), uuid.NewString()
	for i, rec := range []struct {
		job, tenant string
		st          sundialv1.ExecutionStatus
	}{
		{jobA, "acme", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		{jobB, "acme", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED},
		{uuid.NewString(), "globex", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED},
	} {
		at := slot.Add(time.Duration(i) * time.Minute)
		if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{
			ExecutionId: uuid.NewString(), JobId: rec.job, Tenant: rec.tenant, Attempt: 1,
			Status: rec.st, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at), Reason: "r-" + rec.tenant,
		}); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)

	code, page, _ := b.do("GET", "/executions", nil)
	if code != http.StatusOK || !strings.Contains(page, "/jobs/"+jobA) || !strings.Contains(page, "/jobs/"+jobB) || strings.Contains(page, "r-globex") {
		t.Fatalf("all: %d %s", code, page)
	}
	if !strings.Contains(page, `href="/executions" aria-current="page"`) {
		t.Fatal("the nav does not mark the Executions page")
	}
	q := url.Values{"status": {"failed"}, "from": {slot.Format("2006-01-02 15:04")}}
	code, page, _ = b.do("GET", "/executions?"+q.Encode(), nil)
	if code != http.StatusOK || strings.Contains(page, "/jobs/"+jobA) || !strings.Contains(page, "/jobs/"+jobB) ||
		!strings.Contains(page, `value="failed" checked`) {
		t.Fatalf("failed only: %d %s", code, page)
	}
	for _, bad := range []struct{ query, want string }{
		{"from=yesterday", "from: want a UTC time"},
		{"status=bogus", "status: bogus is not an execution status"},
		{"from=2030-01-02&to=2030-01-01", "start_time: must be before end_time"},
	} {
		code, page, _ := b.do("GET", "/executions?"+bad.query, nil)
		if code != http.StatusBadRequest || !strings.Contains(page, bad.want) {
			t.Errorf("%s: %d, want 400 with %q in %s", bad.query, code, bad.want, page)
		}
	}
}
