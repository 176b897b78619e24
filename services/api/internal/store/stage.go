package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Staged is one firing to write to the outbox.
type Staged struct {
	Firing *sundialv1.Firing
	// PublishAt is when the relay may publish it; zero means now (the
	// transaction's database clock).
	PublishAt time.Time
}

// StagePlan is what a StageFunc decided: the firings to stage, and the
// audit row that records the staging (nil for none). The store adds
// "staged" (how many rows were new) to the audit detail.
type StagePlan struct {
	Firings []Staged
	Audit   *Audit
}

// StageFunc plans the firings to stage for the tenant's job, given the
// database clock and the job as stored.
type StageFunc func(now time.Time, job *sundialv1.Job) (StagePlan, error)

// StageResult is what Stage did.
type StageResult struct {
	// Job is the job as stored when the plan was made.
	Job *sundialv1.Job
	// Now is the database clock of the transaction.
	Now time.Time
	// Plan is what fn returned.
	Plan StagePlan
	// Inserted are the planned firings that were written, in plan order;
	// an execution attempt already in the outbox is not written again.
	Inserted []*sundialv1.Firing
}

// Stage writes the firings fn plans to the outbox, appends the plan's audit
// row and wakes the relay, in one transaction; with dryRun it returns the
// plan and writes nothing. The job row is share-locked so a concurrent
// change either sees the staged rows (and drops them) or waits for them.
func (s *Store) Stage(ctx context.Context, tenant, id string, dryRun bool, fn StageFunc) (StageResult, error) {
	var res StageResult
	err := s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		cur, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = $2 FOR SHARE`, tenant, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("store: read job: %w", err)
		}
		plan, err := fn(now, cur)
		if err != nil {
			return err
		}
		res = StageResult{Job: cur, Now: now, Plan: plan}
		if dryRun || len(plan.Firings) == 0 {
			return nil
		}
		inserted, err := insertOutbox(ctx, tx, now, plan.Firings)
		if err != nil {
			return err
		}
		res.Inserted = inserted
		if plan.Audit != nil {
			a := *plan.Audit
			a.Detail = cloneDetail(a.Detail)
			a.Detail["staged"] = len(inserted)
			if err := insertAudit(ctx, tx, tenant, id, cur.GetVersion(), now, a); err != nil {
				return err
			}
		}
		return notifyRelay(ctx, tx, id)
	})
	return res, err
}

// notifyRelay wakes the relay at commit; the relay also polls, so a lost
// notification only costs latency.
func notifyRelay(ctx context.Context, tx pgx.Tx, payload string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, OutboxChannel, payload); err != nil {
		return fmt.Errorf("store: notify relay: %w", err)
	}
	return nil
}

// outboxChunk bounds one INSERT's arrays: a backfill or re-drive may stage
// up to 100,000 rows, each carrying an envelope.
const outboxChunk = 500

const insertOutboxSQL = `
INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority,
                    scheduled_at, fire_at, publish_at, catch_up, envelope)
SELECT * FROM unnest($1::uuid[], $2::integer[], $3::uuid[], $4::bigint[], $5::smallint[],
                     $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::boolean[], $10::bytea[])
ON CONFLICT (execution_id, attempt) DO NOTHING
RETURNING execution_id::text, attempt`

// insertOutbox writes the firings in chunks and returns those that were new
// (an execution attempt already staged is left as it is), in input order.
func insertOutbox(ctx context.Context, tx pgx.Tx, now time.Time, staged []Staged) ([]*sundialv1.Firing, error) {
	type key struct {
		exec    string
		attempt int32
	}
	var out []*sundialv1.Firing
	for start := 0; start < len(staged); start += outboxChunk {
		chunk := staged[start:min(start+outboxChunk, len(staged))]
		n := len(chunk)
		var (
			exec, job        = make([]uuid.UUID, n), make([]uuid.UUID, n)
			attempt          = make([]int32, n)
			version          = make([]int64, n)
			prio             = make([]int16, n)
			sched, fire, pub = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
			catchUp          = make([]bool, n)
			env              = make([][]byte, n)
		)
		for i, st := range chunk {
			f := st.Firing
			var err error
			if exec[i], err = uuid.Parse(f.GetExecutionId()); err != nil {
				return nil, fmt.Errorf("store: firing execution id: %w", err)
			}
			if job[i], err = uuid.Parse(f.GetJobId()); err != nil {
				return nil, fmt.Errorf("store: firing job id: %w", err)
			}
			if env[i], err = firing.Encode(f); err != nil {
				return nil, fmt.Errorf("store: encode firing: %w", err)
			}
			attempt[i], version[i], prio[i] = f.GetAttempt(), f.GetJobVersion(), int16(f.GetPriority())
			sched[i], fire[i], catchUp[i] = f.GetScheduledTime().AsTime(), f.GetFireTime().AsTime(), f.GetCatchUp()
			pub[i] = st.PublishAt
			if pub[i].IsZero() || pub[i].Before(now) {
				pub[i] = now
			}
		}
		rows, err := tx.Query(ctx, insertOutboxSQL, exec, attempt, job, version, prio, sched, fire, pub, catchUp, env)
		if err != nil {
			return nil, fmt.Errorf("store: insert outbox rows: %w", err)
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
			var k key
			return k, r.Scan(&k.exec, &k.attempt)
		})
		if err != nil {
			return nil, fmt.Errorf("store: insert outbox rows: %w", err)
		}
		fresh := make(map[key]bool, len(keys))
		for _, k := range keys {
			fresh[k] = true
		}
		for i, st := range chunk {
			if fresh[key{exec[i].String(), attempt[i]}] {
				out = append(out, st.Firing)
			}
		}
	}
	return out, nil
}
