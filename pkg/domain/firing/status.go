package firing

import (
	"strings"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The status vocabulary. The proto enums (sundial.v1.ExecutionStatus,
// sundial.v1.JobStatus) are the words; this is their one mapping to what
// each store keeps and to the lower-case word logs, metric labels and
// messages use:
//
//	execution status   Cassandra ledger.status   the enum's name (EXECUTION_STATUS_SUCCEEDED)
//	                   ledger_pending.status     the enum's number (smallint)
//	                   word                      succeeded, retry_scheduled, dead, …
//	job status         jobs.status               active, paused, deleted, completed
//	                   word                      the same, and unspecified
//
// Neither store's form may change: rows written by every earlier release
// are read back with it.

// ExecutionStatusCQL is the ledger's status column of s: the enum's name.
func ExecutionStatusCQL(s sundialv1.ExecutionStatus) string { return s.String() }

// ExecutionStatusFromCQL is the status of a ledger status column;
// unspecified for a name this release does not know.
func ExecutionStatusFromCQL(name string) sundialv1.ExecutionStatus {
	return sundialv1.ExecutionStatus(sundialv1.ExecutionStatus_value[name])
}

// ExecutionStatusSQL is ledger_pending's status column of s: the enum's
// number.
func ExecutionStatusSQL(s sundialv1.ExecutionStatus) int16 { return int16(s) }

// ExecutionStatusFromSQL is the status of a ledger_pending status column.
func ExecutionStatusFromSQL(n int16) sundialv1.ExecutionStatus { return sundialv1.ExecutionStatus(n) }

// executionWords are the words of the known statuses, computed once: a
// word is a metric label on the firing path.
var executionWords = func() map[sundialv1.ExecutionStatus]string {
	m := make(map[sundialv1.ExecutionStatus]string, len(sundialv1.ExecutionStatus_name))
	for n, name := range sundialv1.ExecutionStatus_name {
		m[sundialv1.ExecutionStatus(n)] = strings.ToLower(strings.TrimPrefix(name, "EXECUTION_STATUS_"))
	}
	return m
}()

// ExecutionStatusWord is the lower-case word of s without the enum's
// prefix ("succeeded", "retry_scheduled"), for logs and metric labels.
func ExecutionStatusWord(s sundialv1.ExecutionStatus) string {
	if w, ok := executionWords[s]; ok {
		return w
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "EXECUTION_STATUS_"))
}

// The jobs.status words, for the SQL that filters on them.
const (
	JobActiveSQL    = "active"
	JobPausedSQL    = "paused"
	JobDeletedSQL   = "deleted"
	JobCompletedSQL = "completed"
)

// JobStatusSQL is the jobs.status text of s; unspecified is stored as
// active (a job the api accepts is active unless it says otherwise).
func JobStatusSQL(s sundialv1.JobStatus) string {
	switch s {
	case sundialv1.JobStatus_JOB_STATUS_PAUSED:
		return JobPausedSQL
	case sundialv1.JobStatus_JOB_STATUS_DELETED:
		return JobDeletedSQL
	case sundialv1.JobStatus_JOB_STATUS_COMPLETED:
		return JobCompletedSQL
	default:
		return JobActiveSQL
	}
}

// JobStatusFromSQL is the status of a jobs.status text; unspecified for a
// text this release does not know.
func JobStatusFromSQL(s string) sundialv1.JobStatus {
	switch s {
	case JobActiveSQL:
		return sundialv1.JobStatus_JOB_STATUS_ACTIVE
	case JobPausedSQL:
		return sundialv1.JobStatus_JOB_STATUS_PAUSED
	case JobDeletedSQL:
		return sundialv1.JobStatus_JOB_STATUS_DELETED
	case JobCompletedSQL:
		return sundialv1.JobStatus_JOB_STATUS_COMPLETED
	}
	return sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED
}

// JobStatusWord is the lower-case word of s without the enum's prefix
// ("active", "unspecified"), for messages and logs.
func JobStatusWord(s sundialv1.JobStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATUS_"))
}
