package firing

import (
	"testing"

	"github.com/stretchr/testify/require"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The stored forms are pinned: rows every earlier release wrote are read
// back with them.
func TestExecutionStatusStoredForms(t *testing.T) {
	for s, want := range map[sundialv1.ExecutionStatus]struct {
		cql  string
		sql  int16
		word string
	}{
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SCHEDULED:       {"EXECUTION_STATUS_SCHEDULED", 1, "scheduled"},
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:       {"EXECUTION_STATUS_SUCCEEDED", 4, "succeeded"},
		sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED: {"EXECUTION_STATUS_RETRY_SCHEDULED", 6, "retry_scheduled"},
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED:         {"EXECUTION_STATUS_SKIPPED", 8, "skipped"},
		sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:            {"EXECUTION_STATUS_DEAD", 7, "dead"},
	} {
		require.Equal(t, want.cql, ExecutionStatusCQL(s))
		require.Equal(t, want.sql, ExecutionStatusSQL(s))
		require.Equal(t, want.word, ExecutionStatusWord(s))
	}
	for n := range sundialv1.ExecutionStatus_name {
		s := sundialv1.ExecutionStatus(n)
		require.Equal(t, s, ExecutionStatusFromCQL(ExecutionStatusCQL(s)))
		require.Equal(t, s, ExecutionStatusFromSQL(ExecutionStatusSQL(s)))
	}
	require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, ExecutionStatusFromCQL("EXECUTION_STATUS_FROM_THE_FUTURE"))
	require.Equal(t, "99", ExecutionStatusWord(99))
}

func TestJobStatusStoredForms(t *testing.T) {
	for s, want := range map[sundialv1.JobStatus]string{
		sundialv1.JobStatus_JOB_STATUS_ACTIVE:    "active",
		sundialv1.JobStatus_JOB_STATUS_PAUSED:    "paused",
		sundialv1.JobStatus_JOB_STATUS_DELETED:   "deleted",
		sundialv1.JobStatus_JOB_STATUS_COMPLETED: "completed",
	} {
		require.Equal(t, want, JobStatusSQL(s))
		require.Equal(t, s, JobStatusFromSQL(want))
		require.Equal(t, want, JobStatusWord(s))
	}
	require.Equal(t, "active", JobStatusSQL(sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED))
	require.Equal(t, "unspecified", JobStatusWord(sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED))
	require.Equal(t, sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED, JobStatusFromSQL("archived"))
}
