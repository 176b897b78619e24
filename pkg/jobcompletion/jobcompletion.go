// Package jobcompletion ends jobs that have no slot left. It is the one
// place that moves a job to completed, called from wherever a job can end:
//
//   - the worker, when the firing of a job's last slot settles (the
//     prefetcher marked it last_slot and cleared next_fire_at when it
//     staged it);
//   - the prefetcher, when a job's remaining slots were all skipped
//     (misfire), so no firing is left to complete it: in the transaction
//     that claimed the job and cleared its next_fire_at.
//
// Completion happens once, and only to the version whose last slot ended:
// an edit after the last slot was staged (a new version, a new
// next_fire_at) wins over a late completion, and a job already completed,
// paused or deleted stays as it is. The version is not bumped: completion
// is not a change to the job's definition, and firings of earlier slots
// still in flight must not turn stale. Each job completed gets an audit row
// in the same statement.
package jobcompletion

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sundialhq/sundial/pkg/firing"
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

// Querier is what Complete needs: a transaction, a connection or a pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// completeSQL completes a group of jobs in one statement, each guarded so
// it happens once (status active) and only to the version that staged the
// last slot, after next_fire_at was cleared; an audit row is written for
// each job the update changed.
const completeSQL = `
WITH input AS (
  SELECT i.id, i.version, i.detail
  FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[]) AS i(id, version, detail)),
done AS (
  UPDATE jobs j SET status = '` + firing.JobCompletedSQL + `', updated_at = now()
  FROM input i
  WHERE j.id = i.id AND j.status = '` + firing.JobActiveSQL + `' AND j.version = i.version AND j.next_fire_at IS NULL
  RETURNING j.id, j.tenant, j.version, i.detail)
INSERT INTO job_audit (job_id, tenant, actor, action, version, detail)
SELECT id, tenant, $4, 'complete', version, detail
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
