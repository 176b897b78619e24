package app

import (
	"context"
	"errors"

	"github.com/sundialhq/sundial/pkg/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// executionReader is the ledger read finalRecorded needs; *ledger.Reader
// is one.
type executionReader interface {
	GetExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error)
}

// finalRecorded reports whether the ledger holds a final (not RUNNING)
// record of f's attempt. An execution the ledger has never heard of has
// none: that is the case of a worker killed after writing a done marker
// and before its grouped writer wrote anything of the execution, the very
// case the prepare stage asks about, so ledger.ErrNotFound is an answer
// (false), not a failure to retry.
func finalRecorded(ctx context.Context, reader executionReader, f *sundialv1.Firing) (bool, error) {
	rows, err := reader.GetExecution(ctx, f.GetExecutionId())
	if errors.Is(err, ledger.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.GetAttempt() == max(f.GetAttempt(), 1) && r.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
			return true, nil
		}
	}
	return false, nil
}
