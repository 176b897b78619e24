package app

import (
	"context"
	"errors"
	"time"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// executionReader is the ledger read attemptStatus needs; *ledger.Reader
// is one.
type executionReader interface {
	GetSlotExecution(ctx context.Context, jobID string, scheduled time.Time, executionID string) ([]*sundialv1.ExecutionAttempt, error)
	GetExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error)
}

// attemptStatus returns the status of the final (not RUNNING) record the
// ledger holds of f's attempt, or EXECUTION_STATUS_UNSPECIFIED when it
// holds none. The worker asks it in two places, with one answer: the
// prepare stage (has a copy found done been recorded? if not, it records
// it from the marker) and the settle stage (which outcome did the attempt
// already have?). An execution the ledger has never heard of has no
// record: that is the case of a worker killed after writing a done marker
// and before its grouped writer wrote anything of the execution, so
// ledger.ErrNotFound is an answer, not a failure to retry.
//
// The firing names its job and slot, so the execution is read from its
// slot's partition (one slice); only when that has no row is it looked
// up by id (the index, a partition per day, and the legacy table). A
// worker taking over a dead one's partitions asks this of every copy
// found done, and the read by id was most of the ledger's cost then.
func attemptStatus(ctx context.Context, reader executionReader, f *sundialv1.Firing) (sundialv1.ExecutionStatus, error) {
	var (
		rows []*sundialv1.ExecutionAttempt
		err  error = ledger.ErrNotFound
	)
	if f.GetJobId() != "" && f.GetScheduledTime() != nil {
		rows, err = reader.GetSlotExecution(ctx, f.GetJobId(), f.GetScheduledTime().AsTime(), f.GetExecutionId())
	}
	if errors.Is(err, ledger.ErrNotFound) {
		rows, err = reader.GetExecution(ctx, f.GetExecutionId())
	}
	if errors.Is(err, ledger.ErrNotFound) {
		return sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, nil
	}
	if err != nil {
		return sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, err
	}
	for _, r := range rows {
		if r.GetAttempt() == max(f.GetAttempt(), 1) && r.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			return r.GetStatus(), nil
		}
	}
	return sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, nil
}

// attemptOutcome reports whether st is what an attempt that reached its
// target ended as (not a skip): the outcome a redelivered copy settles by.
func attemptOutcome(st sundialv1.ExecutionStatus) bool {
	switch st {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED:
		return true
	}
	return false
}
