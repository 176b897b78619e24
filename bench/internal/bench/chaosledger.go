package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// ledgerGaps reads, through the api's history as a user would, the
// final records of the executions in want that reached a target, and
// returns those without one. It looks again
// until deadline, since records linger in the workers' grouped writers
// for a moment and those spilled to Postgres while Cassandra was down
// reach it when the prefetcher drains them.
func (d *deployment) ledgerGaps(ctx context.Context, want harness.Expected, got []harness.Delivery, deadline time.Time) (delivered int, gaps []uuid.UUID, err error) {
	pending := map[uuid.UUID]uuid.UUID{} // execution → job
	for _, dl := range got {
		if s, ok := want[dl.ExecutionID]; ok && dl.Err == nil {
			pending[dl.ExecutionID] = s.JobID
		}
	}
	delivered = len(pending)
	var oldest time.Time
	for _, s := range want {
		if oldest.IsZero() || s.Scheduled.Before(oldest) {
			oldest = s.Scheduled
		}
	}
	for {
		jobs := map[uuid.UUID]bool{}
		for _, job := range pending {
			jobs[job] = true
		}
		for job := range jobs {
			if err := d.readFinals(ctx, job, oldest, pending); err != nil {
				return delivered, nil, err
			}
		}
		if len(pending) == 0 || d.r.clock.Now().After(deadline) {
			break
		}
		if err := Sleep(ctx, d.r.clock, 5*time.Second); err != nil {
			return delivered, nil, err
		}
	}
	for exec := range pending {
		gaps = append(gaps, exec)
	}
	return delivered, gaps, nil
}

// readFinals walks job's history, newest first, back to oldest, and
// takes every execution with a final record out of pending.
func (d *deployment) readFinals(ctx context.Context, job uuid.UUID, oldest time.Time, pending map[uuid.UUID]uuid.UUID) error {
	token := ""
	for {
		resp, err := d.client.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: job.String(), PageSize: 1000, PageToken: token})
		if err != nil {
			return fmt.Errorf("chaos: history of job %s: %w", job, err)
		}
		done := false
		for _, a := range resp.GetAttempts() {
			if a.GetScheduledTime().AsTime().Before(oldest) {
				done = true
				break
			}
			if finalStatus(a.GetStatus()) {
				if id, err := uuid.Parse(a.GetExecutionId()); err == nil {
					delete(pending, id)
				}
			}
		}
		token = resp.GetNextPageToken()
		if done || token == "" {
			return nil
		}
	}
}

// finalStatus reports whether an attempt in status s has ended.
func finalStatus(s sundialv1.ExecutionStatus) bool {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED:
		return true
	}
	return false
}
