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

// A release paced at rate fires one interval apart from its start, the
// interval a second over rate in whole microseconds (what Postgres keeps),
// so a long release at a rate that does not divide a second evenly is
// stepped, not accumulated in nanoseconds; a rate of zero is no pace.
func TestPacedFireAtStepsWholeMicroseconds(t *testing.T) {
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 100*time.Millisecond, PaceInterval(10))
	require.Equal(t, 2*time.Second, PaceInterval(0.5))
	require.Equal(t, 333333*time.Microsecond, PaceInterval(3), "1/3 s rounded to the microsecond")
	require.Equal(t, 142857*time.Microsecond, PaceInterval(7), "142857.14 us rounds down")
	require.Equal(t, 166667*time.Microsecond, PaceInterval(6), "166666.67 us rounds up")
	require.Equal(t, time.Microsecond, PaceInterval(5e6), "never below a microsecond")
	require.Zero(t, PaceInterval(0))
	require.Zero(t, PaceInterval(-1))

	require.Equal(t, start, PacedFireAt(start, 0, 10))
	require.Equal(t, start.Add(2500*time.Millisecond), PacedFireAt(start, 25, 10))
	require.Equal(t, start.Add(6*time.Second), PacedFireAt(start, 3, 0.5))
	require.Equal(t, start.Add(3*333333*time.Microsecond), PacedFireAt(start, 3, 3))
	require.Equal(t, start, PacedFireAt(start, 7, 0), "not paced")

	// Every instant is a whole microsecond from the start, and a release
	// continued from where another ended keeps the same pace.
	for _, rate := range []float64{3, 7, 9950.2, 0.3} {
		for i := range 1000 {
			at := PacedFireAt(start, i, rate)
			require.Zero(t, at.Sub(start)%time.Microsecond, "rate %g firing %d", rate, i)
			require.Equal(t, at, PacedFireAt(PacedFireAt(start, i/2, rate), i-i/2, rate), "rate %g firing %d", rate, i)
		}
	}
}
