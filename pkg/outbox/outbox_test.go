package outbox

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Each key the insert returned marks one row, the first that has it, so
// the marks count the rows written even when the input repeats a key.
func TestNewRowsMarksOneRowPerReturnedKey(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	rows := []Row{{ExecutionID: a, Attempt: 1}, {ExecutionID: b, Attempt: 1}, {ExecutionID: a, Attempt: 2}, {ExecutionID: a, Attempt: 1}}

	require.Equal(t, []bool{true, true, true, true}, newRows(rows, make([]key, 4)), "as many keys as rows: all new")
	require.Equal(t, []bool{false, false, false, false}, newRows(rows, nil))
	require.Equal(t, []bool{true, false, true, false}, newRows(rows, []key{{a, 2}, {a, 1}}))
	require.Equal(t, []bool{false, true, false, false}, newRows(rows, []key{{b, 1}}))
}

func TestFromFiringCopiesTheFiringsColumns(t *testing.T) {
	exec, job := uuid.New(), uuid.New()
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	f := &sundialv1.Firing{
		ExecutionId: exec.String(), JobId: job.String(), JobVersion: 4, Attempt: 3,
		Priority: sundialv1.Priority_PRIORITY_HIGH, ScheduledTime: timestamppb.New(slot),
		FireTime: timestamppb.New(slot.Add(90 * time.Second)), CatchUp: true,
	}
	r, err := FromFiring(f, []byte("env"))
	require.NoError(t, err)
	require.Equal(t, Row{
		ExecutionID: exec, Attempt: 3, JobID: job, JobVersion: 4, Priority: sundialv1.Priority_PRIORITY_HIGH,
		ScheduledAt: slot, FireAt: slot.Add(90 * time.Second), CatchUp: true, Envelope: []byte("env"),
	}, r)

	f.JobId = "not-a-uuid"
	_, err = FromFiring(f, nil)
	require.ErrorContains(t, err, `job id "not-a-uuid"`)
	f.ExecutionId = ""
	_, err = FromFiring(f, nil)
	require.ErrorContains(t, err, "execution id")
}

// A paced row is publishable a lead before it fires, and never before the
// transaction's now: a release already inside the lead is due at once.
func TestPublishAtIsLeadBeforeFireNotBeforeNow(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	require.Equal(t, now.Add(8*time.Minute), PublishAt(now.Add(10*time.Minute), 2*time.Minute, now))
	require.Equal(t, now, PublishAt(now.Add(time.Minute), 2*time.Minute, now))
	require.Equal(t, now, PublishAt(now.Add(-time.Hour), 2*time.Minute, now))
}
