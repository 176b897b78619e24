package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// runsColumn is the run count jobColumns reads (migration 00017): the
// slots the prefetcher has staged, which GetJob turns into remaining_runs.
const runsColumn = `runs_staged`

// setRemainingRuns fills the job's output-only remaining_runs from the run
// count: max_runs minus the slots staged, never below 0; unset without a
// limit.
func setRemainingRuns(job *sundialv1.Job, staged int64) {
	job.RemainingRuns = 0
	if m := job.GetMaxRuns(); m > 0 {
		job.RemainingRuns = max(m-staged, 0)
	}
}

// uncountSQL takes back the run count of the job's staged-ahead firings a
// change is about to drop (first attempts not yet due, which only the
// prefetcher stages, counted when staged): they will not fire as staged,
// and the prefetcher counts those it stages again. runs_counted_through
// moves to just before the first of them, so exactly those count again.
const uncountSQL = `
UPDATE jobs AS j
   SET runs_staged = GREATEST(j.runs_staged - d.n, 0),
       runs_counted_through = d.first - interval '1 microsecond'
  FROM (SELECT count(*) AS n, min(o.scheduled_at) AS first
          FROM outbox AS o, jobs AS jj
         WHERE o.job_id = $1 AND jj.id = $1 AND o.attempt = 1 AND o.scheduled_at > $2
           AND o.scheduled_at <= jj.runs_counted_through) AS d
 WHERE j.id = $1 AND d.n > 0`

const runsSQL = `SELECT ` + runsColumn + ` FROM jobs WHERE id = $1`

// uncountDropped runs uncountSQL in the change's transaction, before the
// drop, and returns the job's run count after it.
func uncountDropped(ctx context.Context, tx pgx.Tx, id string, now time.Time) (int64, error) {
	if _, err := tx.Exec(ctx, uncountSQL, id, now); err != nil {
		return 0, fmt.Errorf("store: uncount dropped runs: %w", err)
	}
	var staged int64
	if err := tx.QueryRow(ctx, runsSQL, id).Scan(&staged); err != nil {
		return 0, fmt.Errorf("store: read run count: %w", err)
	}
	return staged, nil
}
