//go:build integration

package stage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// Partitioned prefetch (--ranges): each range leader claims only its
// partitions and is fenced by its range's own leader_epochs row.

func rangeOpts(r int, epoch int64) Options {
	o := opts(epoch)
	o.Election = "/test/ranges/r" + string(rune('a'+r))
	o.Partitions = &Partitions{Lo: r * 16, Hi: r*16 + 15}
	o.KeepCursor = true
	return o
}

func partitionOf(id uuid.UUID) int { return firing.Partition(id) }

func TestRangeLeadersStageOnlyTheirPartitionsAndTogetherEverySlotOnce(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	var jobs []uuid.UUID
	for range 200 {
		jobs = append(jobs, pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`))
	}
	// Range 3 alone: only jobs of partitions 48-63 are staged.
	res, err := st.StageBatch(ctx, rangeOpts(3, 1))
	require.NoError(t, err)
	in := 0
	for _, id := range jobs {
		rows := stagedRows(t, pool, id)
		if p := partitionOf(id); p >= 48 && p <= 63 {
			in++
			require.NotEmpty(t, rows, "job of partition %d in range 3 not staged", p)
		} else {
			require.Empty(t, rows, "job of partition %d staged by range 3", p)
		}
	}
	require.Equal(t, in, res.Claimed)
	require.Positive(t, in)

	// Every range, twice over (a second pass restages nothing): every
	// slot of every job once, and a contiguous run of slots.
	for pass := 0; pass < 2; pass++ {
		for r := 0; r < 16; r++ {
			_, err := st.StageBatch(ctx, rangeOpts(r, 1))
			require.NoError(t, err)
		}
	}
	for _, id := range jobs {
		var n, distinct int
		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &lo, &hi))
		require.Equal(t, n, distinct, "job %s: slot doubled", id)
		require.Equal(t, int(hi.Sub(lo)/time.Second)+1, n, "job %s: slot lost", id)
	}
	var ranges int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM leader_epochs WHERE election LIKE '/test/ranges/%'`).Scan(&ranges))
	require.Equal(t, 16, ranges, "one epoch row per range")
}

// A stale leader of a range is refused by that range's epoch, and writes
// nothing; the epoch of another range does not fence it.
func TestStaleRangeLeaderIsRefusedByTheRangeEpoch(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	var inRange, other uuid.UUID
	for inRange == uuid.Nil || other == uuid.Nil {
		id := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)
		switch p := partitionOf(id); {
		case p < 16 && inRange == uuid.Nil:
			inRange = id
		case p >= 16 && p < 32 && other == uuid.Nil:
			other = id
		default:
			_, err := pool.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, id)
			require.NoError(t, err)
		}
	}
	// Range 0 moved from epoch 5 to epoch 9 (a new leader wrote).
	_, err := st.StageBatch(ctx, rangeOpts(0, 9))
	require.NoError(t, err)
	before := len(stagedRows(t, pool, inRange))
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = now() WHERE id = $1`, inRange)
	require.NoError(t, err)
	next := nextFireAt(t, pool, inRange)

	_, err = st.StageBatch(ctx, rangeOpts(0, 5))
	require.ErrorIs(t, err, ErrFenced)
	require.Len(t, stagedRows(t, pool, inRange), before)
	require.Equal(t, next, nextFireAt(t, pool, inRange))

	// Range 1's leader with a lower epoch than range 0's writes: epochs
	// are per range.
	res, err := st.StageBatch(ctx, rangeOpts(1, 2))
	require.NoError(t, err)
	require.Positive(t, res.Staged)
	require.NotEmpty(t, stagedRows(t, pool, other))
}

// The catch-up release cursor is kept in the range's row: a new leader of
// the range queues its catch-ups behind the old leader's schedule instead
// of starting a second schedule at now(). Another range keeps its own.
func TestRangeCatchUpCursorSurvivesTheLeader(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	missed := func(wantRange int) uuid.UUID {
		for {
			id := pgtest.InsertJob(t, pool, intervalJob(time.Minute, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), nil),
				`date_trunc('minute', now()) - interval '20 minutes'`)
			if partitionOf(id)/16 == wantRange {
				return id
			}
			_, err := pool.Exec(ctx, `DELETE FROM jobs WHERE id = $1`, id)
			require.NoError(t, err)
		}
	}
	for range 5 {
		missed(2)
	}
	o := rangeOpts(2, 1)
	o.CatchUpRate = 0.5 // one every 2 s
	res, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.Equal(t, 5, res.CatchUp)
	require.True(t, res.CatchUpCursor.Equal(res.Now.Add(10*time.Second)), "cursor %s, now %s", res.CatchUpCursor, res.Now)
	var stored time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT catch_up_cursor FROM leader_epochs WHERE election = $1`, o.Election).Scan(&stored))
	require.True(t, stored.Equal(res.CatchUpCursor))

	// The old leader dies; more catch-ups of range 2 come due. The new
	// leader (a new epoch, no cursor of its own) releases them after the
	// old schedule.
	late := missed(2)
	o2 := rangeOpts(2, 2)
	o2.CatchUpRate = 0.5
	res2, err := st.StageBatch(ctx, o2)
	require.NoError(t, err)
	require.Equal(t, 1, res2.CatchUp)
	rows := outboxCatchUps(t, pool, late)
	require.Len(t, rows, 1)
	require.False(t, rows[0].fire.Before(stored), "new leader released at %s, before the old schedule's end %s", rows[0].fire, stored)

	// Range 5 has no schedule: its first catch-up is released at now().
	other := missed(5)
	o5 := rangeOpts(5, 1)
	o5.CatchUpRate = 0.5
	res5, err := st.StageBatch(ctx, o5)
	require.NoError(t, err)
	rows = outboxCatchUps(t, pool, other)
	require.Len(t, rows, 1)
	require.True(t, rows[0].fire.Equal(res5.Now))
}

// The range claim walks the due index in order (no sort of the range's
// due jobs), filtering on partition.
func TestRangeClaimUsesTheDueIndex(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()
	now := time.Now()
	pgtest.CopyJobs(t, pool, 20000, func(i int) *sundialv1.Job {
		return &sundialv1.Job{Tenant: "t", NextFireTime: timestamppb.New(now.Add(time.Duration(i+1) * time.Second))}
	})
	_, err := pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	r, err := pool.Query(ctx, `EXPLAIN `+claimRangeSQL, time.Now().Add(2*time.Minute), 500, 32, 47)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	t.Logf("range claim plan:\n%s", plan)
	require.Contains(t, plan, "jobs_active_next_fire")
	require.NotContains(t, plan, "Sort")
}
