//go:build integration

package retention

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

func newSweeper(t *testing.T, batch int) (*Sweeper, *pgxpool.Pool, *Metrics) {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.Schema(t))
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(Config{Retention: 7 * 24 * time.Hour, Interval: 20 * time.Millisecond, BatchSize: batch},
		pool, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, m)
	require.NoError(t, err)
	return s, pool, m
}

// job stores a job with the given status, its updated_at and deleted_at
// set that long before the database clock.
func job(t *testing.T, pool *pgxpool.Pool, status string, updatedAgo, deletedAgo time.Duration) uuid.UUID {
	t.Helper()
	id := pgtest.InsertJob(t, pool, &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 * * * *"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
	}, `NULL`)
	var deleted any
	if deletedAgo > 0 {
		deleted = deletedAgo.Seconds()
	}
	_, err := pool.Exec(context.Background(), `UPDATE jobs SET status = $2, version = 5,
		updated_at = now() - $3::float8 * interval '1 second',
		deleted_at = now() - $4::float8 * interval '1 second' WHERE id = $1`, id, status, updatedAgo.Seconds(), deleted)
	require.NoError(t, err)
	return id
}

func exists(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n))
	return n == 1
}

const day = 24 * time.Hour

// Completed and deleted jobs go once the retention period has passed since
// they completed (updated_at) or were deleted (deleted_at); everything
// else stays. The audit trail and dead letters of a purged job stay, with
// a purge row appended.
func TestSweepPurgesOnlyJobsPastRetention(t *testing.T) {
	s, pool, m := newSweeper(t, 100)
	ctx := context.Background()
	oldCompleted := job(t, pool, "completed", 8*day, 0)
	newCompleted := job(t, pool, "completed", 6*day, 0)
	// Deleted 8 days ago; its updated_at is recent (a later touch) but
	// deleted_at decides.
	oldDeleted := job(t, pool, "deleted", time.Hour, 8*day)
	newDeleted := job(t, pool, "deleted", 9*day, day)
	oldActive := job(t, pool, "active", 30*day, 0)
	oldPaused := job(t, pool, "paused", 30*day, 0)

	_, err := pool.Exec(ctx, `INSERT INTO job_audit (job_id, tenant, actor, action, version) VALUES ($1, 'tenant-a', 'tenant-a:abc', 'create', 1)`, oldCompleted)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, attempts, last_attempt, envelope)
		VALUES (gen_random_uuid(), 'tenant-a', $1, 'http_5xx', '503', 3, 3, '\x00')`, oldDeleted)
	require.NoError(t, err)

	n, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.False(t, exists(t, pool, oldCompleted))
	require.False(t, exists(t, pool, oldDeleted))
	for _, id := range []uuid.UUID{newCompleted, newDeleted, oldActive, oldPaused} {
		require.True(t, exists(t, pool, id))
	}
	require.Equal(t, 1.0, testutil.ToFloat64(m.Purged.WithLabelValues("completed")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Purged.WithLabelValues("deleted")))

	type audit struct {
		actor, action, status, retention string
		version                          int64
	}
	read := func(id uuid.UUID) []audit {
		r, err := pool.Query(ctx, `SELECT actor, action, version, COALESCE(detail->>'status', ''), COALESCE(detail->>'retention', '')
			FROM job_audit WHERE job_id = $1 ORDER BY id`, id)
		require.NoError(t, err)
		defer r.Close()
		var out []audit
		for r.Next() {
			var a audit
			require.NoError(t, r.Scan(&a.actor, &a.action, &a.version, &a.status, &a.retention))
			out = append(out, a)
		}
		require.NoError(t, r.Err())
		return out
	}
	require.Equal(t, []audit{
		{actor: "tenant-a:abc", action: "create", version: 1},
		{actor: "system:prefetcher", action: "purge", status: "completed", retention: "168h0m0s", version: 5},
	}, read(oldCompleted))
	require.Equal(t, []audit{{actor: "system:prefetcher", action: "purge", status: "deleted", retention: "168h0m0s", version: 5}}, read(oldDeleted))
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE job_id = $1`, oldDeleted).Scan(&dead))
	require.Equal(t, 1, dead, "dead letters outlive the job")

	// Sweeping again purges nothing and audits nothing twice.
	n, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, read(oldCompleted), 2)
}

// A sweep works in small transactions until it finds no more, and skips a
// job someone holds locked (the api changing it) until the next sweep.
func TestSweepBatchesAndSkipsLockedJobs(t *testing.T) {
	s, pool, _ := newSweeper(t, 7)
	ctx := context.Background()
	var ids []uuid.UUID
	for range 30 {
		ids = append(ids, job(t, pool, "completed", 10*day, 0))
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, ids[3])
	require.NoError(t, err)

	n, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 29, n)
	require.True(t, exists(t, pool, ids[3]))
	require.NoError(t, tx.Rollback(ctx))

	n, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&left))
	require.Zero(t, left)
}

// As a term task the sweep runs at once and on every interval, and
// returns when the term ends.
func TestRunTermSweepsUntilTheTermEnds(t *testing.T) {
	s, pool, _ := newSweeper(t, 100)
	first := job(t, pool, "completed", 8*day, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunTerm(ctx, rangeleader.Term{Range: 0, Epoch: 1, Lock: "/test/ranges/r0000"})
	}()
	require.Eventually(t, func() bool { return !exists(t, pool, first) }, 30*time.Second, 10*time.Millisecond)
	// A job that passes its retention later is purged by a later sweep.
	second := job(t, pool, "deleted", 0, 8*day)
	require.Eventually(t, func() bool { return !exists(t, pool, second) }, 30*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RunTerm did not return after its term ended")
	}
}
