//go:build integration

package ledgerpending_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

func skipped(slot time.Time, reason string) ledgerpending.Row {
	return ledgerpending.Row{
		ExecutionID: uuid.NewString(), JobID: uuid.NewString(), Tenant: "tenant-a",
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, ScheduledAt: slot, JobVersion: 2, Reason: reason,
	}
}

// Rows inserted in a transaction exist only if it commits, and claiming
// them deletes them only if the claimer commits.
func TestInsertAndClaimFollowTheirTransactions(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	slot := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ledgerpending.Insert(ctx, tx, []ledgerpending.Row{skipped(slot, "rolled back")}))
	require.NoError(t, tx.Rollback(ctx))
	n, _, err := ledgerpending.Backlog(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n)

	rows := []ledgerpending.Row{skipped(slot, "first"), skipped(slot.Add(time.Minute), "second"), skipped(slot.Add(2*time.Minute), "third")}
	rows[1].FireAt, rows[1].CatchUp, rows[1].Attempt = slot.Add(61*time.Second), true, 3
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ledgerpending.Insert(ctx, tx, rows))
	require.NoError(t, tx.Commit(ctx))
	n, age, err := ledgerpending.Backlog(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	require.GreaterOrEqual(t, age, time.Duration(0))

	// A claim that rolls back leaves every row.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err := ledgerpending.Claim(ctx, tx, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.NoError(t, tx.Rollback(ctx))
	n, _, err = ledgerpending.Backlog(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	// Claims are oldest first, and committed claims delete.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err = ledgerpending.Claim(ctx, tx, 10)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, got, 3)
	for i, p := range got {
		want := rows[i]
		if want.Attempt == 0 {
			want.Attempt = 1
		}
		if want.FireAt.IsZero() {
			want.FireAt = want.ScheduledAt
		}
		require.Equal(t, want, p.Row)
		require.False(t, p.CreatedAt.IsZero())
	}
	n, age, err = ledgerpending.Backlog(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, age)
}

// Two drainers claiming at once get disjoint rows.
func TestConcurrentClaimsAreDisjoint(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	slot := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	var rows []ledgerpending.Row
	for i := range 10 {
		rows = append(rows, skipped(slot.Add(time.Duration(i)*time.Second), "x"))
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ledgerpending.Insert(ctx, tx, rows))
	require.NoError(t, tx.Commit(ctx))

	a, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = a.Rollback(ctx) }()
	b, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = b.Rollback(ctx) }()
	ga, err := ledgerpending.Claim(ctx, a, 6)
	require.NoError(t, err)
	gb, err := ledgerpending.Claim(ctx, b, 6)
	require.NoError(t, err)
	require.Len(t, ga, 6)
	require.Len(t, gb, 4, "the second claim skips the rows the first holds")
	seen := map[int64]bool{}
	for _, p := range append(ga, gb...) {
		require.False(t, seen[p.ID])
		seen[p.ID] = true
	}
}

// A spilled record comes back from Claim whole — fence, HTTP status,
// timings, worker — beside the rows Insert wrote, which stay as they were;
// a record without a slot is refused and nothing is written.
func TestSpilledRecordsComeBackWhole(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	slot := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	fired := &sundialv1.ExecutionAttempt{
		ExecutionId: uuid.NewString(), JobId: uuid.NewString(), Tenant: "acme", Attempt: 2, FenceToken: 1774000000123456,
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(slot),
		FireTime: timestamppb.New(slot.Add(300 * time.Millisecond)), StartedTime: timestamppb.New(slot.Add(301 * time.Millisecond)),
		FinishedTime: timestamppb.New(slot.Add(340 * time.Millisecond)), HttpStatus: 204, Worker: "w1", ResponseExcerpt: "ok", JobVersion: 3,
	}
	bad := proto.Clone(fired).(*sundialv1.ExecutionAttempt)
	bad.ScheduledTime = nil
	err := ledgerpending.Spill(ctx, pool, []*sundialv1.ExecutionAttempt{fired, bad})
	require.ErrorIs(t, err, ledgerpending.ErrInvalidRow)
	require.Contains(t, err.Error(), "scheduled_time")
	n, _, err := ledgerpending.Backlog(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, n, "a refused spill writes nothing")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ledgerpending.Insert(ctx, tx, []ledgerpending.Row{skipped(slot, "paused")}))
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, ledgerpending.Spill(ctx, pool, []*sundialv1.ExecutionAttempt{fired}))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err := ledgerpending.Claim(ctx, tx, 10)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, got, 2)
	require.Nil(t, got[0].Record)
	require.Equal(t, "paused", got[0].ExecutionAttempt().GetReason())
	require.Zero(t, got[0].ExecutionAttempt().GetFenceToken())
	require.True(t, proto.Equal(fired, got[1].ExecutionAttempt()), "spilled %v, claimed %v", fired, got[1].ExecutionAttempt())
	require.Equal(t, fired.GetExecutionId(), got[1].ExecutionID)
	require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, got[1].Status)
}
