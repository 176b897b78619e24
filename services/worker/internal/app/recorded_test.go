package app

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ledgerAnswer is a ledger read that answers every execution alike (the
// read has one method, so nothing is left to embed).
type ledgerAnswer struct {
	rows []*sundialv1.ExecutionAttempt
	err  error
}

func (l ledgerAnswer) GetExecution(context.Context, string) ([]*sundialv1.ExecutionAttempt, error) {
	return l.rows, l.err
}

func TestAttemptStatus(t *testing.T) {
	f := &sundialv1.Firing{ExecutionId: "e1", Attempt: 2}
	row := func(attempt int32, st sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
		return &sundialv1.ExecutionAttempt{ExecutionId: "e1", Attempt: attempt, Status: st}
	}
	down := errors.New("cassandra: no hosts available")
	for _, c := range []struct {
		name    string
		reader  ledgerAnswer
		want    sundialv1.ExecutionStatus
		wantErr error
	}{
		// The case of a worker killed before its grouped writer wrote
		// anything of the execution: the copy must write the record from
		// the marker, not look again forever.
		{"never heard of", ledgerAnswer{err: fmt.Errorf("%w: e1", ledger.ErrNotFound)}, 0, nil},
		{"ledger down", ledgerAnswer{err: down}, 0, down},
		{"only running", ledgerAnswer{rows: []*sundialv1.ExecutionAttempt{row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)}}, 0, nil},
		{"another attempt's final", ledgerAnswer{rows: []*sundialv1.ExecutionAttempt{row(1, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED)}}, 0, nil},
		{"this attempt's final", ledgerAnswer{rows: []*sundialv1.ExecutionAttempt{row(1, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED), row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)}}, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, nil},
		// A skip is final (a copy need not record it again) but not an
		// outcome a copy settles by.
		{"this attempt skipped", ledgerAnswer{rows: []*sundialv1.ExecutionAttempt{row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED)}}, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := attemptStatus(context.Background(), c.reader, f)
			if got != c.want || !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
				t.Fatalf("attemptStatus = %v, %v; want %v, %v", got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestAttemptOutcome(t *testing.T) {
	for st, want := range map[sundialv1.ExecutionStatus]bool{
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:       true,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED: true,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:            true,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED:          true,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED:         false,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING:         false,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED:     false,
	} {
		if got := attemptOutcome(st); got != want {
			t.Errorf("attemptOutcome(%v) = %v, want %v", st, got, want)
		}
	}
}
