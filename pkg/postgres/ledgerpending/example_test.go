package ledgerpending_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A decision and its ledger record commit together: here the api pausing a
// job drops a staged firing and records why in the same transaction. The
// prefetcher's drainer writes the row to the Cassandra ledger later.
func ExampleInsert() {
	ctx := context.Background()
	var pool *pgxpool.Pool // the caller's pool
	tx, err := pool.Begin(ctx)
	if err != nil {
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// … UPDATE jobs …, DELETE FROM outbox … RETURNING the dropped firing …
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	err = ledgerpending.Insert(ctx, tx, []ledgerpending.Row{{
		ExecutionID: "0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f",
		JobID:       "0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10",
		Tenant:      "acme",
		Status:      sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
		ScheduledAt: slot,
		FireAt:      slot.Add(1200 * time.Millisecond),
		JobVersion:  7,
		Reason:      "paused",
	}})
	if err != nil {
		return
	}
	_ = tx.Commit(ctx)
}
