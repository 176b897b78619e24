package settle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Postgres is the Store over the platform's database.
type Postgres struct {
	pool   *pgxpool.Pool
	queued func()
}

// NewPostgres returns a Store over pool; queued (nil: none) is called after
// jobs were queued for completion (the completer's wake).
func NewPostgres(pool *pgxpool.Pool, queued func()) *Postgres {
	return &Postgres{pool: pool, queued: queued}
}

// One statement each, so each is atomic on its own and one round trip.

// InsertRetry implements Store: the row is due for publishing now (the
// database clock, PublishAt left zero), and the relay is woken only if it
// was new.
func (p *Postgres) InsertRetry(ctx context.Context, next *sundialv1.Firing, envelope []byte) error {
	row, err := outbox.FromFiring(next, envelope)
	if err == nil {
		_, err = outbox.InsertNotify(ctx, p.pool, row)
	}
	if err != nil {
		return fmt.Errorf("settle: stage retry of %s: %w", next.GetExecutionId(), err)
	}
	return nil
}

// upsertDeadLetterSQL keeps redrive_count and redriven_at, and never lets an
// older attempt's death (a late redelivery) overwrite a newer one. The
// target's host is stored beside the envelope that holds it, so the
// console counts dead letters by host in the database (migration 00029).
const upsertDeadLetterSQL = `
INSERT INTO dead_letters AS d (execution_id, tenant, job_id, error_class, last_error, http_status, attempts,
                               last_attempt, envelope, dead_at, target_host)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (execution_id) DO UPDATE SET
  tenant = EXCLUDED.tenant, job_id = EXCLUDED.job_id, error_class = EXCLUDED.error_class,
  last_error = EXCLUDED.last_error, http_status = EXCLUDED.http_status, attempts = EXCLUDED.attempts,
  last_attempt = EXCLUDED.last_attempt, envelope = EXCLUDED.envelope, dead_at = EXCLUDED.dead_at,
  target_host = EXCLUDED.target_host
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
		dl.GetAttempts(), max(f.GetAttempt(), 1), envelope, dl.GetDeadTime().AsTime(),
		firing.TargetHost(f.GetTarget())).Scan(&n, &at)
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

// Actor is the audit trail's name for the worker.
const Actor = "system:worker"

// QueueCompletions implements Store.
func (p *Postgres) QueueCompletions(ctx context.Context, cs []Completion) error {
	jobs := make([]jobcompletion.Job, len(cs))
	for i, c := range cs {
		f := c.Firing
		id, err := uuid.Parse(f.GetJobId())
		if err != nil {
			return fmt.Errorf("settle: complete job %q: %w", f.GetJobId(), err)
		}
		jobs[i] = jobcompletion.Job{ID: id, Version: f.GetJobVersion(), Detail: map[string]any{
			"execution_id": f.GetExecutionId(), "outcome": c.Outcome,
			"last_slot": f.GetScheduledTime().AsTime().UTC().Format(time.RFC3339Nano),
		}}
	}
	if err := jobcompletion.Queue(ctx, p.pool, jobs); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if p.queued != nil {
		p.queued()
	}
	return nil
}
