package settle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// OutboxChannel is the relay's wake-up channel.
const OutboxChannel = "sundial_outbox"

// Postgres is the Store over the platform's database.
type Postgres struct{ pool *pgxpool.Pool }

// NewPostgres returns a Store over pool.
func NewPostgres(pool *pgxpool.Pool) *Postgres { return &Postgres{pool: pool} }

// One statement each, so each is atomic on its own and one round trip.

// insertRetrySQL stages the row for publishing now (the database clock);
// the notification is sent only if a row was inserted, at commit.
const insertRetrySQL = `
WITH ins AS (
  INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at,
                      publish_at, catch_up, envelope)
  VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8, $9)
  ON CONFLICT (execution_id, attempt) DO NOTHING
  RETURNING job_id)
SELECT pg_notify('` + OutboxChannel + `', job_id::text) FROM ins`

// InsertRetry implements Store.
func (p *Postgres) InsertRetry(ctx context.Context, next *sundialv1.Firing, envelope []byte) error {
	rows, err := p.pool.Query(ctx, insertRetrySQL,
		next.GetExecutionId(), next.GetAttempt(), next.GetJobId(), next.GetJobVersion(), int16(next.GetPriority()),
		next.GetScheduledTime().AsTime(), next.GetFireTime().AsTime(), next.GetCatchUp(), envelope)
	if err != nil {
		return fmt.Errorf("settle: stage retry of %s: %w", next.GetExecutionId(), err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("settle: stage retry of %s: %w", next.GetExecutionId(), err)
	}
	return nil
}

// upsertDeadLetterSQL keeps redrive_count and redriven_at, and never lets an
// older attempt's death (a late redelivery) overwrite a newer one.
const upsertDeadLetterSQL = `
INSERT INTO dead_letters AS d (execution_id, tenant, job_id, error_class, last_error, http_status, attempts,
                               last_attempt, envelope, dead_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (execution_id) DO UPDATE SET
  tenant = EXCLUDED.tenant, job_id = EXCLUDED.job_id, error_class = EXCLUDED.error_class,
  last_error = EXCLUDED.last_error, http_status = EXCLUDED.http_status, attempts = EXCLUDED.attempts,
  last_attempt = EXCLUDED.last_attempt, envelope = EXCLUDED.envelope, dead_at = EXCLUDED.dead_at
WHERE d.last_attempt <= EXCLUDED.last_attempt
RETURNING redrive_count, redriven_at`

const redriveOfSQL = `SELECT redrive_count, redriven_at FROM dead_letters WHERE execution_id = $1`

// UpsertDeadLetter implements Store.
func (p *Postgres) UpsertDeadLetter(ctx context.Context, dl *sundialv1.DeadLetter, envelope []byte) (int32, time.Time, error) {
	f := dl.GetFiring()
	var (
		n  int32
		at *time.Time
	)
	err := p.pool.QueryRow(ctx, upsertDeadLetterSQL,
		f.GetExecutionId(), f.GetTenant(), f.GetJobId(), dl.GetErrorClass(), dl.GetLastError(), dl.GetHttpStatus(),
		dl.GetAttempts(), max(f.GetAttempt(), 1), envelope, dl.GetDeadTime().AsTime()).Scan(&n, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		// A newer attempt already died; report that row's counts.
		err = p.pool.QueryRow(ctx, redriveOfSQL, f.GetExecutionId()).Scan(&n, &at)
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("settle: dead letter %s: %w", f.GetExecutionId(), err)
	}
	if at == nil {
		return n, time.Time{}, nil
	}
	return n, *at, nil
}

// completeJobsSQL completes a group of jobs in one statement, each guarded
// so it happens once and only to the version that staged the last slot;
// an audit row is written for each job the update changed.
const completeJobsSQL = `
WITH input AS (
  SELECT i.id::uuid AS id, i.version, i.execution_id, i.outcome, i.last_slot
  FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[]) AS i(id, version, execution_id, outcome, last_slot)),
done AS (
  UPDATE jobs j SET status = 'completed', updated_at = now()
  FROM input i
  WHERE j.id = i.id AND j.status = 'active' AND j.version = i.version AND j.next_fire_at IS NULL
  RETURNING j.id, j.tenant, j.version, i.execution_id, i.outcome, i.last_slot)
INSERT INTO job_audit (job_id, tenant, actor, action, version, detail)
SELECT id, tenant, 'system:worker', 'complete', version,
       jsonb_build_object('execution_id', execution_id, 'outcome', outcome, 'last_slot', last_slot)
FROM done
RETURNING job_id::text`

// CompleteJobs implements Store.
func (p *Postgres) CompleteJobs(ctx context.Context, cs []Completion) ([]bool, error) {
	n := len(cs)
	ids, versions, execs, outcomes, slots := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	for i, c := range cs {
		f := c.Firing
		ids[i], versions[i], execs[i], outcomes[i] = f.GetJobId(), f.GetJobVersion(), f.GetExecutionId(), c.Outcome
		slots[i] = f.GetScheduledTime().AsTime().UTC().Format(time.RFC3339Nano)
	}
	rows, err := p.pool.Query(ctx, completeJobsSQL, ids, versions, execs, outcomes, slots)
	if err != nil {
		return nil, fmt.Errorf("settle: complete %d jobs (first %s): %w", n, ids[0], err)
	}
	completed := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("settle: complete %d jobs (first %s): %w", n, ids[0], err)
		}
		completed[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle: complete %d jobs (first %s): %w", n, ids[0], err)
	}
	out := make([]bool, n)
	for i, id := range ids {
		out[i] = completed[id]
	}
	return out, nil
}
