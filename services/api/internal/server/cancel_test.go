package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// oneJob is a store holding one job of acme's, recording the audit
// entries appended to its trail.
type oneJob struct {
	untouchable
	id      string
	audited *[]string
}

func (o oneJob) AppendAudit(_ context.Context, tenant, jobID string, _ int64, a store.Audit) error {
	*o.audited = append(*o.audited, tenant+" "+jobID+" "+a.Actor+" "+a.Action+" "+a.Detail["execution_id"].(string))
	return nil
}

func (o oneJob) Get(_ context.Context, tenant, id string) (*sundialv1.Job, error) {
	if tenant != "acme" || id != o.id {
		return nil, store.ErrNotFound
	}
	return &sundialv1.Job{Id: id, Tenant: tenant}, nil
}

// cancels records cancel requests.
type cancels struct {
	state lease.CancelState
	asked []string
}

func (c *cancels) Cancel(_ context.Context, jobID, executionID, by string) (lease.CancelState, string, error) {
	c.asked = append(c.asked, jobID+" "+executionID+" "+by)
	return c.state, by, nil
}

func TestCancelExecution(t *testing.T) {
	const (
		jobA    = "01900000-0000-7000-8000-00000000000a"
		running = "01900000-0000-7000-8000-0000000000e1"
		done    = "01900000-0000-7000-8000-0000000000e2"
		other   = "01900000-0000-7000-8000-0000000000e3"
	)
	c := &cancels{}
	var audited []string
	s, err := NewJobService(Config{Store: oneJob{untouchable: untouchable{t: t}, id: jobA, audited: &audited}, Versions: noVersions{}, Cancels: c, Executions: ledgerFake{attempts: []*sundialv1.ExecutionAttempt{
		{ExecutionId: running, JobId: jobA, Tenant: "acme", Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED},
		{ExecutionId: running, JobId: jobA, Tenant: "acme", Attempt: 2, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING},
		{ExecutionId: done, JobId: jobA, Tenant: "acme", Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED},
		{ExecutionId: other, JobId: jobA, Tenant: "globex", Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := auth.WithActor(tenantCtx, "acme/alice")
	res, err := s.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: running})
	if err != nil || res.GetCancelledBy() != "acme/alice" || res.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		t.Fatalf("cancel running: %v %v", res, err)
	}
	if len(c.asked) != 1 || c.asked[0] != jobA+" "+running+" acme/alice" {
		t.Fatalf("asked %v", c.asked)
	}
	if len(audited) != 1 || audited[0] != "acme "+jobA+" acme/alice cancel "+running {
		t.Fatalf("the job's trail got %v, want the cancel by acme/alice", audited)
	}
	for name, tc := range map[string]struct {
		req   *sundialv1.CancelExecutionRequest
		code  codes.Code
		field string
	}{
		"no job id":      {&sundialv1.CancelExecutionRequest{ExecutionId: running}, codes.InvalidArgument, "job_id"},
		"bad execution":  {&sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: "x"}, codes.InvalidArgument, "execution_id"},
		"ended":          {&sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: done}, codes.FailedPrecondition, ""},
		"other tenant's": {&sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: other}, codes.NotFound, ""},
		"not in ledger":  {&sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: someID}, codes.NotFound, ""},
		"another's job":  {&sundialv1.CancelExecutionRequest{JobId: someID, ExecutionId: running}, codes.NotFound, ""},
		"asked again":    {&sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: running}, codes.OK, ""},
	} {
		_, err := s.CancelExecution(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", name, err, tc.code)
		}
		if tc.field != "" {
			if v := violations(t, err); v[tc.field] == "" {
				t.Errorf("%s: no violation on %s: %v", name, tc.field, v)
			}
		}
	}
	if len(c.asked) != 2 {
		t.Fatalf("cancels recorded for refused calls: %v", c.asked)
	}
	// Redis finds it ended meanwhile.
	c.state = lease.CancelFinished
	if _, err := s.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: running}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ended in Redis: %v", err)
	}
	// Without Redis that can cancel, Unavailable.
	s2, _ := NewJobService(Config{Store: oneJob{untouchable: untouchable{t: t}, id: jobA}, Versions: noVersions{}, Executions: ledgerFake{}})
	if _, err := s2.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: jobA, ExecutionId: running}); status.Code(err) != codes.Unavailable {
		t.Fatalf("without a canceller: %v", err)
	}
}
