//go:build integration

package stage

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/services/prefetcher/internal/slots"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

const testChunk = 30 * time.Second

func chunkOpts(epoch int64) Options {
	o := opts(epoch)
	o.Chunk = testChunk
	return o
}

// wholeSeconds counts the whole seconds s with from < s <= to.
func wholeSeconds(from, to time.Time) int {
	return int(to.Truncate(time.Second).Sub(from.Truncate(time.Second)) / time.Second)
}

// later returns o as a pass `by` later sees it. The database clock cannot
// be moved, but a pass at now()+by claims and stages exactly what a pass at
// now() with a window `by` longer does (both compare next_fire_at with, and
// stage up to, the same instants); only publish_at, which no assertion
// below reads after the first pass, differs.
func later(o Options, by time.Duration) Options {
	o.Window += by
	return o
}

// A per-second job is claimed (and its jobs row updated) once per chunk,
// not once per tick: over five simulated minutes of one-second ticks it is
// claimed about ten times instead of 300, and every slot is staged exactly
// once, with its jitter, contiguous; a slot beyond the window is published
// when the window reaches it, as it would have been without chunks.
func TestPerSecondJobIsClaimedOncePerChunk(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	job := cronJob("* * * * * *")
	job.MaxJitter = durationpb.New(time.Second)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('second', now()) + interval '1 second'`)

	first, err := st.StageBatch(ctx, chunkOpts(1))
	require.NoError(t, err)
	require.Equal(t, 1, first.Claimed)
	window := chunkOpts(1).Window
	// The pass stages up to the job's chunk boundary: between half a chunk
	// and a chunk and a half past the window, at phase 0 (no range).
	end := slots.ChunkEnd(first.Now.Add(window), testChunk, 0)
	rows := stagedRows(t, pool, id)
	inChunk := 0
	for _, r := range rows {
		if r.scheduled.After(first.Now) && !r.scheduled.After(end) {
			inChunk++
		}
	}
	require.Len(t, rows, inChunk, "nothing past the chunk's end")
	require.Equal(t, wholeSeconds(first.Now, end), inChunk, "every whole second of (now, end]")
	beyond := 0
	for _, r := range rows {
		// A window before the slot, rounded down to half past a second: in
		// the past (due at once, in slot order) for the slots inside the
		// window.
		want := r.scheduled.Add(-window - 500*time.Millisecond).Truncate(time.Second).Add(500 * time.Millisecond)
		if want.After(first.Now) {
			beyond++
		}
		require.True(t, want.Equal(r.publish), "slot %s fires %s: publish_at %s, want %s", r.scheduled, r.fire, r.publish, want)
		require.False(t, r.publish.Before(r.scheduled.Add(-window-time.Second)), "published when the window reaches the slot, as without chunks")
	}
	// The chunk's slots beyond the window, less the first of them when the
	// window reaches it within half a second (its publish_at, half past the
	// second before, is already past).
	require.InDelta(t, wholeSeconds(first.Now.Add(window), end), beyond, 1, "the chunk's slots beyond the window wait in the outbox")
	var waiting int
	// As of the batch's database clock: a query's own now() may already be
	// a second later, past the first of them.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE job_id = $1 AND publish_at > $2`, id, first.Now).Scan(&waiting))
	require.Equal(t, beyond, waiting, "the relay does not see them yet")

	claims := first.Claimed
	for tick := 1; tick <= 300; tick++ {
		res, err := st.StageBatch(ctx, later(chunkOpts(1), time.Duration(tick)*time.Second))
		require.NoError(t, err)
		require.Zero(t, res.Duplicates)
		if res.Claimed > 0 {
			require.InDelta(t, 30, res.Staged, 1, "a later claim stages one chunk, up to the job's next boundary")
		}
		claims += res.Claimed
	}
	// Claimed at 0 s, when the first chunk's end enters the window (15–45 s
	// later) and every 30 s after: 10 or 11 claims; a tick of real time
	// passing meanwhile may add one.
	require.GreaterOrEqual(t, claims, 10)
	require.LessOrEqual(t, claims, 12)

	rows = stagedRows(t, pool, id)
	next := *nextFireAt(t, pool, id)
	require.Equal(t, int(next.Sub(rows[0].scheduled)/time.Second), len(rows), "every slot up to next_fire_at, none twice")
	seen := map[uuid.UUID]bool{}
	for i, r := range rows {
		require.False(t, seen[r.exec], "execution %s staged twice", r.exec)
		seen[r.exec] = true
		require.Equal(t, firing.ExecutionID(id, r.scheduled), r.exec)
		j := r.fire.Sub(r.scheduled)
		require.True(t, j >= 0 && j < time.Second, "jitter %s", j)
		if i > 0 {
			require.Equal(t, time.Second, r.scheduled.Sub(rows[i-1].scheduled), "no gap, no repeat")
		}
	}
}

// A stale leader's chunk is fenced like any other write: after a newer
// epoch has written, the old leader's pass (when the job's next chunk is
// due) writes no row and does not move next_fire_at, and the new leader
// then stages that chunk once.
func TestStaleLeadersChunkIsFenced(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	id := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)

	_, err := st.StageBatch(ctx, chunkOpts(7))
	require.NoError(t, err)
	staged := len(stagedRows(t, pool, id))
	next := nextFireAt(t, pool, id)

	// A newer leader writes (nothing of this job is due yet).
	res, err := st.StageBatch(ctx, chunkOpts(8))
	require.NoError(t, err)
	require.Zero(t, res.Claimed)

	// 50 s later the next chunk is due (the first ended at most 45 s past
	// the window); the deposed leader tries first.
	_, err = st.StageBatch(ctx, later(chunkOpts(7), 50*time.Second))
	require.ErrorIs(t, err, ErrFenced)
	require.Len(t, stagedRows(t, pool, id), staged)
	require.Equal(t, next, nextFireAt(t, pool, id))

	res, err = st.StageBatch(ctx, later(chunkOpts(8), 50*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	require.Zero(t, res.Duplicates)
	require.GreaterOrEqual(t, res.Staged, 30)
	seen := map[uuid.UUID]bool{}
	for _, r := range stagedRows(t, pool, id) {
		require.False(t, seen[r.exec], "execution %s staged twice", r.exec)
		seen[r.exec] = true
	}
	require.Len(t, seen, staged+res.Staged)
}

// Restaging a chunk (a leader whose commit was lost, then its successor)
// writes the same rows: same execution ids, same jittered fire instants.
func TestRestagedChunkIsIdempotent(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	job := cronJob("* * * * * *")
	job.MaxJitter = durationpb.New(time.Second)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('second', now()) + interval '1 second'`)
	start := *nextFireAt(t, pool, id)
	_, err := st.StageBatch(ctx, chunkOpts(1))
	require.NoError(t, err)
	first := map[uuid.UUID]time.Time{}
	for _, r := range stagedRows(t, pool, id) {
		first[r.exec] = r.fire
	}

	// The successor finds next_fire_at where it was (as if the first
	// transaction's advance were lost) and restages the chunk over the
	// rows still in the outbox: all duplicates, nothing new.
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = $2 WHERE id = $1`, id, start)
	require.NoError(t, err)
	res, err := st.StageBatch(ctx, chunkOpts(2))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	require.LessOrEqual(t, res.Staged, 1, "at most the slot a clock tick since brought into the chunk")
	require.Equal(t, len(first), res.Duplicates)
	for _, r := range stagedRows(t, pool, id) {
		if f, ok := first[r.exec]; ok {
			require.True(t, f.Equal(r.fire), "slot %s", r.scheduled)
		}
	}
}

// Migration 00005 dropped jobs_due: no query used it (the claim goes
// through jobs_active_next_fire, see TestClaimUsesTheDueIndex), yet every
// advance of next_fire_at wrote an entry into it.
func TestJobsDueIndexIsGone(t *testing.T) {
	_, pool := newStore(t)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'jobs' AND indexname = 'jobs_due'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'jobs' AND indexname = 'jobs_active_next_fire'`).Scan(&n))
	require.Equal(t, 1, n)
}

// Jobs registered together have their whole windows staged in one pass;
// the relay claims due rows by publish_at, so their rows must be published
// in the order of their slots, not job by job: a worker that holds only
// part of a large first window then holds the earliest slots.
func TestAPassIsPublishedInSlotOrder(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	for range 3 {
		pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)
	}
	_, err := st.StageBatch(ctx, chunkOpts(1))
	require.NoError(t, err)
	r, err := pool.Query(ctx, `SELECT scheduled_at FROM outbox ORDER BY publish_at, id`)
	require.NoError(t, err)
	var prev time.Time
	n := 0
	for r.Next() {
		var at time.Time
		require.NoError(t, r.Scan(&at))
		require.False(t, at.Before(prev), "row %d: slot %s published after slot %s", n, at, prev)
		prev, n = at, n+1
	}
	require.NoError(t, r.Err())
	require.Greater(t, n, 3*120, "three jobs' windows")
}

// A window far behind — jobs registered together, each with two minutes
// to stage — is filled Step at a time across the jobs, earliest slots
// first: the first batch of a small Limit stages every claimed job's next
// ten seconds only and says so (Stepped), the next batch claims the jobs
// now earliest, and once the window is full nothing is left behind or
// staged twice.
func TestAWindowFarBehindIsFilledAStepAtATime(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for range 4 {
		ids = append(ids, pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`))
	}
	o := chunkOpts(1)
	o.Step, o.Limit = 10*time.Second, 2
	first, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.True(t, first.Stepped)
	require.Equal(t, 2, first.Claimed)
	require.InDelta(t, 2*11, first.Staged, 2, "two jobs, the ten seconds past their first slot")
	second, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.True(t, second.Stepped)
	staged := map[uuid.UUID]int{}
	for _, id := range ids {
		staged[id] = len(stagedRows(t, pool, id))
	}
	for _, id := range ids {
		require.InDelta(t, 11, staged[id], 1, "after two batches each of the four jobs has its first step, none more: %v", staged)
	}
	batches := 2
	for {
		res, err := st.StageBatch(ctx, o)
		require.NoError(t, err)
		require.Zero(t, res.Duplicates)
		batches++
		if !res.Stepped && res.Claimed < o.Limit {
			break
		}
		require.Less(t, batches, 200, "the fill ends")
	}
	for _, id := range ids {
		rows := stagedRows(t, pool, id)
		next := *nextFireAt(t, pool, id)
		require.Equal(t, int(next.Sub(rows[0].scheduled)/time.Second), len(rows), "every slot up to next_fire_at, none twice")
		require.True(t, next.After(first.Now.Add(o.Window)), "the whole window is staged")
	}
}
