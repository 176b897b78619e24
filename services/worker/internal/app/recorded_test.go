package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ledgerAnswer is a ledger read that answers every execution alike, by
// slot and by id apart, and counts the reads by id (the read has two
// methods, both answered, so nothing is left to embed).
type ledgerAnswer struct {
	slot, byID answer
	byIDReads  *int
}

type answer struct {
	rows []*sundialv1.ExecutionAttempt
	err  error
}

func (l ledgerAnswer) GetSlotExecution(context.Context, string, time.Time, string) ([]*sundialv1.ExecutionAttempt, error) {
	return l.slot.rows, l.slot.err
}

func (l ledgerAnswer) GetExecution(context.Context, string) ([]*sundialv1.ExecutionAttempt, error) {
	*l.byIDReads++
	return l.byID.rows, l.byID.err
}

func TestAttemptStatus(t *testing.T) {
	slot := timestamppb.New(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	f := &sundialv1.Firing{ExecutionId: "e1", JobId: "j1", ScheduledTime: slot, Attempt: 2}
	row := func(attempt int32, st sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
		return &sundialv1.ExecutionAttempt{ExecutionId: "e1", Attempt: attempt, Status: st}
	}
	rows := func(rs ...*sundialv1.ExecutionAttempt) answer { return answer{rows: rs} }
	down := errors.New("cassandra: no hosts available")
	notFound := answer{err: fmt.Errorf("%w: e1", ledger.ErrNotFound)}
	succeeded := row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)
	for _, c := range []struct {
		name      string
		firing    *sundialv1.Firing
		slot      answer
		byID      answer
		want      sundialv1.ExecutionStatus
		wantErr   error
		wantByIDs int
	}{
		// The case of a worker killed before its grouped writer wrote
		// anything of the execution: the copy must write the record from
		// the marker, not look again forever.
		{"never heard of", f, notFound, notFound, 0, nil, 1},
		{"ledger down", f, answer{err: down}, answer{err: down}, 0, down, 0},
		{"only running", f, rows(row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)), notFound, 0, nil, 0},
		{"another attempt's final", f, rows(row(1, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED)), notFound, 0, nil, 0},
		// Found in its slot's partition: the id's index is not read.
		{"this attempt's final", f, rows(row(1, sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED), succeeded), notFound, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, nil, 0},
		// A skip is final (a copy need not record it again) but not an
		// outcome a copy settles by.
		{"this attempt skipped", f, rows(row(2, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED)), notFound, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, nil, 0},
		// Not under its slot (the legacy table, say): by id.
		{"only by id", f, notFound, rows(succeeded), sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, nil, 1},
		// A firing that does not name its slot is looked up by id.
		{"no slot", &sundialv1.Firing{ExecutionId: "e1", JobId: "j1", Attempt: 2}, rows(), rows(succeeded), sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var byID int
			got, err := attemptStatus(context.Background(), ledgerAnswer{slot: c.slot, byID: c.byID, byIDReads: &byID}, c.firing)
			if got != c.want || !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
				t.Fatalf("attemptStatus = %v, %v; want %v, %v", got, err, c.want, c.wantErr)
			}
			if byID != c.wantByIDs {
				t.Fatalf("reads by id = %d, want %d", byID, c.wantByIDs)
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
