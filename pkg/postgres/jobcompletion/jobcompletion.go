// Package jobcompletion ends jobs that have no slot left. It is the one
// place that moves a job to completed, called from wherever a job can end:
//
//   - the worker, when the firing of a job's last slot settles (the
//     prefetcher marked it last_slot and cleared next_fire_at when it
//     staged it): the settle stage queues the job (Queue, a row of
//     job_completions) and the worker's completer completes queued jobs a
//     batch at a time, at a bounded rate (CompleteQueued);
//   - the prefetcher, when a job's remaining slots were all skipped
//     (misfire), or its run-count limit (max_runs) is used up, so no
//     firing is left to complete it: in the transaction that claimed the
//     job and cleared its next_fire_at (Complete); a job whose limit ends
//     on a staged slot gets that slot marked last_slot, and the worker
//     completes it as above;
//   - the api, when a paused job is resumed and its schedule has no slot
//     left after now (CompleteOnResume).
//
// The queue is there for bursts of one-off jobs. A completion is a non-HOT
// update of jobs (status is in two of its indexes, and all ten get an
// entry, two of them GIN), an audit row and the forecast trigger's change
// row; 100,000 one-off jobs firing at once made completions the bulk of
// Postgres's work while they fired, and the queue's insert costs a small
// fraction of that. A
// queued job completes within a second when the queue is short, and a
// burst's completions follow it at the completer's pace.
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

// completeFrom is the CTEs that complete the jobs of the CTE input (id,
// version, detail, at), each guarded so it happens once (status active)
// and only to the version that staged the last slot, after next_fire_at was
// cleared, and append an audit row by actor (the parameter named) for each
// job the update changed: CTE audited (job_id, detail) holds those.
func completeFrom(actor string) string {
	return `
done AS (
  UPDATE jobs j SET status = '` + firing.JobCompletedSQL + `', updated_at = i.at
  FROM input i
  WHERE j.id = i.id AND j.status = '` + firing.JobActiveSQL + `' AND j.version = i.version AND j.next_fire_at IS NULL
  RETURNING j.id, j.tenant, j.version, i.detail),
audited AS (
  ` + audittrail.InsertFrom(audittrail.KindJob) + `  SELECT id, tenant, ` + actor + `, 'complete', version, detail FROM done
  RETURNING job_id, detail)
`
}

// completeSQL completes a group of jobs given as arrays, at now().
var completeSQL = `
WITH input AS (
  SELECT i.id, i.version, i.detail, now() AS at
  FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[]) AS i(id, version, detail)),` + completeFrom("$4") + `
SELECT job_id FROM audited`

// queueSQL queues a group of jobs given as arrays.
const queueSQL = `
INSERT INTO job_completions (job_id, version, detail)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[])`

// completeQueuedSQL takes (deletes) up to $1 of the oldest queued rows and
// completes their jobs, each at the instant it was queued, and answers how
// many rows it took, the outcome (the detail's) of each job completed and
// how long the oldest row taken had been queued, in seconds.
// SKIP LOCKED lets the completers of several workers take disjoint rows.
var completeQueuedSQL = `
WITH input AS (
  DELETE FROM job_completions
  WHERE id IN (SELECT id FROM job_completions ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
  RETURNING job_id AS id, version, detail, queued_at AS at),` + completeFrom("$2") + `
SELECT (SELECT count(*) FROM input)::int, coalesce(array_agg(coalesce(detail->>'outcome', '')), '{}'),
       (SELECT coalesce(extract(epoch FROM clock_timestamp() - min(at)), 0) FROM input)::float8
FROM audited`

// Complete completes the jobs in one statement as actor (the audit trail's
// name for the caller, such as "system:prefetcher") and reports, in input
// order, which it completed.
func Complete(ctx context.Context, q Querier, actor string, jobs []Job) ([]bool, error) {
	n := len(jobs)
	if n == 0 {
		return nil, nil
	}
	ids, versions, details, err := columns(jobs)
	if err != nil {
		return nil, err
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

// Queue queues the jobs for CompleteQueued in one statement: each is
// completed then as Complete would now, with the instant of this call as
// its updated_at. Queueing a job twice is harmless: the second completion
// finds it completed.
func Queue(ctx context.Context, q Querier, jobs []Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ids, versions, details, err := columns(jobs)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, queueSQL, ids, versions, details); err != nil {
		return fmt.Errorf("jobcompletion: queue %d jobs (first %s): %w", len(jobs), ids[0], err)
	}
	return nil
}

// Taken is what one CompleteQueued call did.
type Taken struct {
	// Rows is how many queued rows it took: fewer than the limit means the
	// queue was empty (of rows no other completer held).
	Rows int
	// Outcomes holds the detail's "outcome" of each job it completed (a
	// job changed since it was queued, or queued twice, is taken and not
	// completed).
	Outcomes []string
	// Waited is how long the oldest row taken had been queued (by the
	// database clock); 0 when none was taken.
	Waited time.Duration
}

// CompleteQueued takes up to limit of the oldest queued jobs and completes
// them as actor, in one statement. Run it in a transaction of its own or
// none: the rows leave the queue only with the completions.
func CompleteQueued(ctx context.Context, q Querier, actor string, limit int) (Taken, error) {
	var t Taken
	rows, err := q.Query(ctx, completeQueuedSQL, limit, actor)
	if err != nil {
		return t, fmt.Errorf("jobcompletion: complete queued jobs: %w", err)
	}
	t, err = pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (Taken, error) {
		var (
			t       Taken
			seconds float64
		)
		err := r.Scan(&t.Rows, &t.Outcomes, &seconds)
		t.Waited = time.Duration(seconds * float64(time.Second))
		return t, err
	})
	if err != nil {
		return t, fmt.Errorf("jobcompletion: complete queued jobs: %w", err)
	}
	return t, nil
}

// columns is jobs as the statements' arrays.
func columns(jobs []Job) (ids []uuid.UUID, versions []int64, details [][]byte, err error) {
	n := len(jobs)
	ids, versions, details = make([]uuid.UUID, n), make([]int64, n), make([][]byte, n)
	for i, j := range jobs {
		d, err := json.Marshal(j.Detail)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("jobcompletion: job %s: audit detail: %w", j.ID, err)
		}
		ids[i], versions[i], details[i] = j.ID, j.Version, d
	}
	return ids, versions, details, nil
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
