// Package jobcompletion ends jobs that have no slot left. It is the one
// place that moves a job to completed, called from wherever a job can end:
//
//   - the worker, when the firing of a job's last slot settles (the
//     prefetcher marked it last_slot and cleared next_fire_at when it
//     staged it);
//   - the prefetcher, when a job's remaining slots were all skipped
//     (misfire), or its run-count limit (max_runs) is used up, so no
//     firing is left to complete it: in the transaction that claimed the
//     job and cleared its next_fire_at (Complete); a job whose limit ends
//     on a staged slot gets that slot marked last_slot, and the worker
//     completes it as above;
//   - the api, when a paused job is resumed and its schedule has no slot
//     left after now (CompleteOnResume).
//
// Complete happens once, and only to the version whose last slot ended:
// an edit after the last slot was staged (a new version, a new
// next_fire_at) wins over a late completion, and a job already completed,
// paused or deleted stays as it is. The version is not bumped: completion
// is not a change to the job's definition, and firings of earlier slots
// still in flight must not turn stale. Each job completed gets an audit row
// in the same statement.
//
// CompleteOnResume is the other way a job ends: not by its last firing but
// by a change a caller asked for. It completes only a paused job, at the
// version the caller read, and as a change like any other the api makes:
// a new version (firings staged under the paused one are stale), written
// with the new version's stored definition, the api's audit row (a
// resume, not a completion) written by the api beside it.
package jobcompletion

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
)

// Job is a job to complete.
type Job struct {
	ID uuid.UUID
	// Version is the version that staged the last slot; a job changed
	// since is not completed.
	Version int64
	// Detail is the audit row's detail: why the job ended.
	Detail map[string]any
}

// Querier is what the completions need: a transaction, a connection or a
// pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// completeSQL completes a group of jobs in one statement, each guarded so
// it happens once (status active) and only to the version that staged the
// last slot, after next_fire_at was cleared; an audit row is written for
// each job the update changed.
var completeSQL = `
WITH input AS (
  SELECT i.id, i.version, i.detail
  FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[]) AS i(id, version, detail)),
done AS (
  UPDATE jobs j SET status = '` + firing.JobCompletedSQL + `', updated_at = now()
  FROM input i
  WHERE j.id = i.id AND j.status = '` + firing.JobActiveSQL + `' AND j.version = i.version AND j.next_fire_at IS NULL
  RETURNING j.id, j.tenant, j.version, i.detail)
` + audittrail.InsertFrom(audittrail.KindJob) + `SELECT id, tenant, $4, 'complete', version, detail
FROM done
RETURNING job_id`

// Complete completes the jobs in one statement as actor (the audit trail's
// name for the caller, such as "system:worker") and reports, in input
// order, which it completed.
func Complete(ctx context.Context, q Querier, actor string, jobs []Job) ([]bool, error) {
	n := len(jobs)
	if n == 0 {
		return nil, nil
	}
	ids, versions, details := make([]uuid.UUID, n), make([]int64, n), make([][]byte, n)
	for i, j := range jobs {
		d, err := json.Marshal(j.Detail)
		if err != nil {
			return nil, fmt.Errorf("jobcompletion: job %s: audit detail: %w", j.ID, err)
		}
		ids[i], versions[i], details[i] = j.ID, j.Version, d
	}
	rows, err := q.Query(ctx, completeSQL, ids, versions, details, actor)
	if err != nil {
		return nil, fmt.Errorf("jobcompletion: complete %d jobs (first %s): %w", n, ids[0], err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("jobcompletion: complete %d jobs (first %s): %w", n, ids[0], err)
	}
	completed := make(map[uuid.UUID]bool, len(done))
	for _, id := range done {
		completed[id] = true
	}
	out := make([]bool, n)
	for i, id := range ids {
		out[i] = completed[id]
	}
	return out, nil
}

// Resumed is a paused job that a resume completes.
type Resumed struct {
	ID uuid.UUID
	// Version is the paused version the caller read (under its lock); the
	// job becomes Version+1.
	Version int64
	// Spec is the job's stored definition at the new version (the api's
	// encoding of the job it answers with).
	Spec []byte
	// At is the change's instant, the job's updated_at (the caller's
	// clock for the transaction).
	At time.Time
}

// completeOnResumeSQL completes one job, guarded so that only the paused
// version the caller read is completed: a job resumed, edited or deleted
// in between is left alone.
const completeOnResumeSQL = `
UPDATE jobs SET status = '` + firing.JobCompletedSQL + `', version = $2 + 1, next_fire_at = NULL, spec = $3, updated_at = $4
WHERE id = $1 AND status = '` + firing.JobPausedSQL + `' AND version = $2`

// CompleteOnResume completes a paused job whose schedule has no slot left,
// in the caller's transaction, which writes the change's audit row; it
// reports whether the job was paused at r.Version (and is now completed).
func CompleteOnResume(ctx context.Context, q Querier, r Resumed) (bool, error) {
	tag, err := q.Exec(ctx, completeOnResumeSQL, r.ID, r.Version, r.Spec, r.At)
	if err != nil {
		return false, fmt.Errorf("jobcompletion: complete paused job %s on resume: %w", r.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}
