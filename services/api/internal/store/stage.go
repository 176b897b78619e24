package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
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
	if err := outbox.Notify(ctx, tx, payload); err != nil {
		return fmt.Errorf("store: notify relay: %w", err)
	}
	return nil
}

// outboxChunk bounds one INSERT's arrays: a backfill or re-drive may stage
// up to 100,000 rows, each carrying an envelope.
const outboxChunk = 500

// insertOutbox writes the firings in chunks and returns those that were new
// (an execution attempt already staged is left as it is), in input order.
// A firing is published at its PublishAt, never before now.
func insertOutbox(ctx context.Context, tx pgx.Tx, now time.Time, staged []Staged) ([]*sundialv1.Firing, error) {
	var out []*sundialv1.Firing
	for start := 0; start < len(staged); start += outboxChunk {
		chunk := staged[start:min(start+outboxChunk, len(staged))]
		rows := make([]outbox.Row, len(chunk))
		for i, st := range chunk {
			env, err := firing.Encode(st.Firing)
			if err != nil {
				return nil, fmt.Errorf("store: encode firing: %w", err)
			}
			if rows[i], err = outbox.FromFiring(st.Firing, env); err != nil {
				return nil, fmt.Errorf("store: %w", err)
			}
			rows[i].PublishAt = st.PublishAt
			if rows[i].PublishAt.IsZero() || rows[i].PublishAt.Before(now) {
				rows[i].PublishAt = now
			}
		}
		inserted, err := outbox.Insert(ctx, tx, rows)
		if err != nil {
			return nil, fmt.Errorf("store: insert outbox rows: %w", err)
		}
		for i, ok := range inserted {
			if ok {
				out = append(out, chunk[i].Firing)
			}
		}
	}
	return out, nil
}
