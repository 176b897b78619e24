package ledgerpending

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestInsertRefusesRowsTheLedgerCannotKey(t *testing.T) {
	good := Row{
		ExecutionID: "0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f", JobID: "0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10",
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, ScheduledAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for name, tc := range map[string]struct {
		mut  func(*Row)
		want string
	}{
		"execution id": {func(r *Row) { r.ExecutionID = "nope" }, "execution id"},
		"job id":       {func(r *Row) { r.JobID = "" }, "job id"},
		"status":       {func(r *Row) { r.Status = 0 }, "status"},
		"slot":         {func(r *Row) { r.ScheduledAt = time.Time{} }, "scheduled_at"},
		"attempt":      {func(r *Row) { r.Attempt = -1 }, "attempt"},
	} {
		t.Run(name, func(t *testing.T) {
			r := good
			tc.mut(&r)
			// A nil transaction: validation must refuse before touching it.
			err := Insert(context.Background(), nil, []Row{good, r})
			require.ErrorIs(t, err, ErrInvalidRow)
			require.ErrorContains(t, err, "row 1")
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, Insert(context.Background(), nil, nil), "no rows, no statement")
}

func TestExecutionAttemptIsAFenceZeroRecord(t *testing.T) {
	slot := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	p := Pending{ID: 7, Row: Row{
		ExecutionID: "e", JobID: "j", Tenant: "t", Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
		ScheduledAt: slot, FireAt: slot.Add(time.Second), CatchUp: true, JobVersion: 3, Reason: "misfire",
	}}
	a := p.ExecutionAttempt()
	require.Equal(t, int32(1), a.GetAttempt(), "attempt 0 means 1")
	require.Zero(t, a.GetFenceToken())
	require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, a.GetStatus())
	require.True(t, a.GetScheduledTime().AsTime().Equal(slot))
	require.True(t, a.GetFireTime().AsTime().Equal(slot.Add(time.Second)))
	require.True(t, a.GetCatchUp())
	require.Equal(t, int64(3), a.GetJobVersion())
	require.Equal(t, "misfire", a.GetReason())
	require.Equal(t, "t", a.GetTenant())
}
