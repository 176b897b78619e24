package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// Canceller records an execution's cancel request where the workers look
// for it (*lease.Store: the request lives beside the execution's lease, and
// the worker holding the lease learns of it at its next renewal).
type Canceller interface {
	Cancel(ctx context.Context, jobID, executionID, by string) (lease.CancelState, string, error)
}

// CancelExecution asks that one of the job's executions be cancelled, on
// behalf of the caller. The execution must be in the ledger (it has started:
// running, or waiting for a retry) and not have ended; the worker holding
// its lease abandons the attempt and records it CANCELLED naming the
// caller, or, between attempts, the next attempt is recorded CANCELLED
// instead of firing.
func (s *JobService) CancelExecution(ctx context.Context, req *sundialv1.CancelExecutionRequest) (*sundialv1.CancelExecutionResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	jobIDv, err := jobID("job_id", req.GetJobId())
	if err != nil {
		return nil, err
	}
	execID, err := jobID("execution_id", req.GetExecutionId())
	if err != nil {
		return nil, err
	}
	c := s.cancels
	if c == nil || s.executions == nil {
		return nil, status.Error(codes.Unavailable, "cancelling executions is not available on this server (it needs Redis and the ledger)")
	}
	job, err := s.store.Get(ctx, tenant, jobIDv)
	if err != nil {
		return nil, s.statusOf(ctx, "CancelExecution", err)
	}
	attempts, err := s.executions.GetExecution(ctx, execID)
	if err != nil {
		return nil, s.ledgerStatus(ctx, "CancelExecution", err)
	}
	latest := latestAttempt(attempts, tenant, jobIDv)
	if latest == nil {
		// Another tenant's or another job's execution reads as missing.
		return nil, status.Error(codes.NotFound, "execution not found for this job (an execution can be cancelled once it has started)")
	}
	if ended(latest.GetStatus()) {
		return nil, status.Errorf(codes.FailedPrecondition, "execution already ended: attempt %d is %s", latest.GetAttempt(), firing.ExecutionStatusWord(latest.GetStatus()))
	}
	actor := actorOf(ctx, tenant)
	st, who, err := c.Cancel(ctx, jobIDv, execID, actor)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err()
		}
		s.logger.ErrorContext(ctx, "recording a cancel request failed", "job", jobIDv, "execution_id", execID, "err", err)
		return nil, status.Error(codes.Unavailable, "the cancel could not be recorded (Redis did not answer); retry later")
	}
	if st == lease.CancelFinished {
		return nil, status.Error(codes.FailedPrecondition, "execution already ended")
	}
	// The request is recorded (in Redis); its audit entry follows it. A
	// failed append leaves the cancel standing and is logged, not answered
	// as a failure the caller would retry.
	if err := s.store.AppendAudit(ctx, tenant, jobIDv, job.GetVersion(), store.Audit{Actor: actor, Action: store.ActionCancel,
		Detail: map[string]any{"execution_id": execID, "running": st == lease.CancelRunning}}); err != nil {
		s.logger.ErrorContext(ctx, "the cancel request's audit entry was not written", "job", jobIDv, "execution_id", execID, "err", err)
	}
	s.logger.InfoContext(ctx, "execution cancel requested", "tenant", tenant, "job", jobIDv, "execution_id", execID, "by", who,
		"running", st == lease.CancelRunning, "status", firing.ExecutionStatusWord(latest.GetStatus()))
	return &sundialv1.CancelExecutionResponse{ExecutionId: execID, Status: latest.GetStatus(), CancelledBy: who}, nil
}

// latestAttempt is the tenant's job's last attempt among attempts (the
// highest attempt number; of its records, the furthest along), nil when
// there is none.
func latestAttempt(attempts []*sundialv1.ExecutionAttempt, tenant, jobID string) *sundialv1.ExecutionAttempt {
	var latest *sundialv1.ExecutionAttempt
	for _, a := range attempts {
		if a.GetTenant() != tenant || a.GetJobId() != jobID {
			continue
		}
		if latest == nil || a.GetAttempt() > latest.GetAttempt() || (a.GetAttempt() == latest.GetAttempt() && ended(a.GetStatus())) {
			latest = a
		}
	}
	return latest
}

// ended: nothing of the execution follows an attempt in this status.
func ended(s sundialv1.ExecutionStatus) bool {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED:
		return true
	default:
		return false
	}
}
