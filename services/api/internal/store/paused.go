package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Skip is one slot a change records as skipped, with the ledger's reason.
type Skip struct {
	At     time.Time
	Reason string
}

// SkippedFunc lists the slots a change records as SKIPPED, given the last
// slot the prefetcher staged for the job (jobs.last_slot_at; its creation
// instant when none ever was), the database clock's now and the job as
// changed. Every slot after lastStaged was never staged, so it has no
// other record.
type SkippedFunc func(lastStaged, now time.Time, next *sundialv1.Job) ([]Skip, error)

// recordSkipped writes the slots fn lists as SKIPPED attempts (attempt 1,
// fence 0, the execution id of the slot, so the same row any other record
// of the slot would be) of the version they fell under (cur's) in
// ledger_pending, which the prefetcher's drainer moves into the ledger:
// the path the prefetcher's misfire skips take. It returns how many rows
// it wrote.
func recordSkipped(ctx context.Context, tx pgx.Tx, tenant, id string, now time.Time, cur, next *sundialv1.Job, fn SkippedFunc) (int, error) {
	jobID, err := uuid.Parse(id)
	if err != nil {
		return 0, fmt.Errorf("store: job id %q: %w", id, err)
	}
	var last *time.Time
	if err := tx.QueryRow(ctx, `SELECT last_slot_at FROM jobs WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&last); err != nil {
		return 0, fmt.Errorf("store: read last staged slot: %w", err)
	}
	from := cur.GetCreateTime().AsTime()
	if last != nil {
		from = *last
	}
	skips, err := fn(from, now, next)
	if err != nil {
		return 0, err
	}
	rows := make([]ledgerpending.Row, len(skips))
	for i, sk := range skips {
		rows[i] = ledgerpending.Row{
			ExecutionID: firing.ExecutionID(jobID, sk.At).String(), JobID: id, Tenant: tenant, Attempt: 1,
			Status:      sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
			ScheduledAt: sk.At, FireAt: sk.At, JobVersion: cur.GetVersion(), Reason: sk.Reason,
		}
	}
	if err := ledgerpending.Insert(ctx, tx, rows); err != nil {
		return 0, fmt.Errorf("store: record skipped slots: %w", err)
	}
	return len(rows), nil
}
