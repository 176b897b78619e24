//go:build integration

package jobcompletion_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// job inserts a job row as the api would have left it, with its updated_at
// an hour in the past.
func job(t *testing.T, pool *pgxpool.Pool, status string, version int64, next *time.Time) uuid.UUID {
	t.Helper()
	id := pgtest.InsertJob(t, pool, &sundialv1.Job{Tenant: "acme", Status: firing.JobStatusFromSQL(status), Version: version}, "$1", next)
	_, err := pool.Exec(context.Background(), `UPDATE jobs SET updated_at = now() - interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
	return id
}

type state struct {
	status  string
	version int64
	next    *time.Time
	fresh   bool // updated_at moved to now()
}

func stateOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) state {
	t.Helper()
	var s state
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT status, version, next_fire_at, updated_at > now() - interval '1 minute' FROM jobs WHERE id = $1`, id).
		Scan(&s.status, &s.version, &s.next, &s.fresh))
	return s
}

type audit struct {
	Actor, Action string
	Version       int64
	Detail        map[string]any
}

func audits(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []audit {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT actor, action, version, detail, tenant FROM job_audit WHERE job_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	defer rows.Close()
	var out []audit
	for rows.Next() {
		var (
			a      audit
			detail []byte
			tenant string
		)
		require.NoError(t, rows.Scan(&a.Actor, &a.Action, &a.Version, &detail, &tenant))
		require.Equal(t, "acme", tenant)
		require.NoError(t, json.Unmarshal(detail, &a.Detail))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// A job with no slot left is completed once, at the version that staged
// its last slot, with an audit row saying who and why; a job changed since
// (another version, a slot again), or no longer active, is left alone.
func TestCompleteEndsOnlyTheVersionWithNoSlotLeft(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	soon := time.Now().Add(time.Hour)
	ended := job(t, pool, "active", 2, nil)
	edited := job(t, pool, "active", 3, nil)        // edited after its last slot was staged
	rescheduled := job(t, pool, "active", 2, &soon) // has a slot again
	paused := job(t, pool, "paused", 2, nil)
	done := job(t, pool, "completed", 2, nil)

	detail := map[string]any{"execution_id": uuid.NewString(), "outcome": "succeeded", "last_slot": "2030-06-01T09:00:00Z"}
	jobs := []jobcompletion.Job{
		{ID: edited, Version: 2, Detail: detail},
		{ID: ended, Version: 2, Detail: detail},
		{ID: rescheduled, Version: 2, Detail: detail},
		{ID: paused, Version: 2, Detail: detail},
		{ID: done, Version: 2, Detail: detail},
	}
	got, err := jobcompletion.Complete(ctx, pool, "system:test", jobs)
	require.NoError(t, err)
	require.Equal(t, []bool{false, true, false, false, false}, got)

	require.Equal(t, state{status: "completed", version: 2, fresh: true}, stateOf(t, pool, ended), "completed without a version bump")
	require.Equal(t, []audit{{Actor: "system:test", Action: "complete", Version: 2, Detail: detail}}, audits(t, pool, ended))
	require.Equal(t, state{status: "active", version: 3}, stateOf(t, pool, edited))
	require.Equal(t, "active", stateOf(t, pool, rescheduled).status)
	require.Equal(t, "paused", stateOf(t, pool, paused).status)
	require.Equal(t, state{status: "completed", version: 2}, stateOf(t, pool, done))
	for _, id := range []uuid.UUID{edited, rescheduled, paused, done} {
		require.Empty(t, audits(t, pool, id))
	}

	// Once: a second completion (a redelivered last firing) changes nothing.
	got, err = jobcompletion.Complete(ctx, pool, "system:test", jobs[1:2])
	require.NoError(t, err)
	require.Equal(t, []bool{false}, got)
	require.Len(t, audits(t, pool, ended), 1)

	got, err = jobcompletion.Complete(ctx, pool, "system:test", nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// Inside a caller's transaction the completion and its audit row commit or
// roll back with it; a job named twice in one call is completed once.
func TestCompleteFollowsTheTransaction(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	id := job(t, pool, "active", 1, nil)
	jobs := []jobcompletion.Job{{ID: id, Version: 1, Detail: map[string]any{"reason": "no slot left"}}}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	got, err := jobcompletion.Complete(ctx, tx, "system:prefetcher", jobs)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, got)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "active", stateOf(t, pool, id).status)
	require.Empty(t, audits(t, pool, id))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err = jobcompletion.Complete(ctx, tx, "system:prefetcher", append(jobs, jobs[0]))
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, got)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "completed", stateOf(t, pool, id).status)
	require.Equal(t, []audit{{Actor: "system:prefetcher", Action: "complete", Version: 1, Detail: map[string]any{"reason": "no slot left"}}},
		audits(t, pool, id))
}

// A resume completes only the paused version it read, as a new version
// with the definition and instant it gives, and writes no audit row of its
// own (the api's resume row goes beside it); an active, completed or
// deleted job, or one changed since it was read, is left alone.
func TestCompleteOnResumeEndsOnlyThePausedVersionRead(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	paused := job(t, pool, "paused", 2, nil)
	edited := job(t, pool, "paused", 3, nil) // edited since the resume read it
	active := job(t, pool, "active", 2, nil)
	done := job(t, pool, "completed", 2, nil)
	deleted := job(t, pool, "deleted", 2, nil)

	at := time.Date(2031, 2, 3, 4, 5, 6, 789000, time.UTC)
	for _, id := range []uuid.UUID{edited, active, done, deleted} {
		ok, err := jobcompletion.CompleteOnResume(ctx, pool, jobcompletion.Resumed{ID: id, Version: 2, Spec: []byte("new"), At: at})
		require.NoError(t, err)
		require.False(t, ok, "job %s", id)
	}
	require.Equal(t, state{status: "paused", version: 3}, stateOf(t, pool, edited))
	require.Equal(t, state{status: "active", version: 2}, stateOf(t, pool, active))
	require.Equal(t, state{status: "completed", version: 2}, stateOf(t, pool, done))
	require.Equal(t, state{status: "deleted", version: 2}, stateOf(t, pool, deleted))

	// In the caller's transaction: rolled back, nothing happened.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ok, err := jobcompletion.CompleteOnResume(ctx, tx, jobcompletion.Resumed{ID: paused, Version: 2, Spec: []byte("new"), At: at})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, state{status: "paused", version: 2}, stateOf(t, pool, paused))

	ok, err = jobcompletion.CompleteOnResume(ctx, pool, jobcompletion.Resumed{ID: paused, Version: 2, Spec: []byte("new"), At: at})
	require.NoError(t, err)
	require.True(t, ok)
	var (
		status  string
		version int64
		next    *time.Time
		spec    []byte
		updated time.Time
	)
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, version, next_fire_at, spec, updated_at FROM jobs WHERE id = $1`, paused).
		Scan(&status, &version, &next, &spec, &updated))
	require.Equal(t, "completed", status)
	require.Equal(t, int64(3), version, "a resume is a change: a new version")
	require.Nil(t, next)
	require.Equal(t, []byte("new"), spec)
	require.True(t, updated.Equal(at), "updated_at %v", updated)
	for _, id := range []uuid.UUID{paused, edited, active, done, deleted} {
		require.Empty(t, audits(t, pool, id))
	}

	// Once: the completed job is no longer paused.
	ok, err = jobcompletion.CompleteOnResume(ctx, pool, jobcompletion.Resumed{ID: paused, Version: 2, Spec: []byte("again"), At: at})
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = jobcompletion.CompleteOnResume(ctx, pool, jobcompletion.Resumed{ID: paused, Version: 3, Spec: []byte("again"), At: at})
	require.NoError(t, err)
	require.False(t, ok)
}

// Queued jobs are completed as Complete completes them, a batch at a time
// in queue order, each with its updated_at at the instant it was queued:
// the ended job once (queued twice, as a redelivered last firing queues
// it), the edited, rescheduled, paused and completed ones not. A batch
// rolled back leaves its rows queued.
func TestCompleteQueuedCompletesAsCompleteInQueueOrder(t *testing.T) {
	pool := pgtest.Migrated(t)
	ctx := context.Background()
	soon := time.Now().Add(time.Hour)
	ended := job(t, pool, "active", 2, nil)
	edited := job(t, pool, "active", 3, nil)
	rescheduled := job(t, pool, "active", 2, &soon)
	paused := job(t, pool, "paused", 2, nil)
	done := job(t, pool, "completed", 2, nil)
	detail := map[string]any{"execution_id": uuid.NewString(), "outcome": "dead", "last_slot": "2030-06-01T09:00:00Z"}
	var jobs []jobcompletion.Job
	for _, id := range []uuid.UUID{ended, edited, rescheduled, paused, done, ended} {
		jobs = append(jobs, jobcompletion.Job{ID: id, Version: 2, Detail: detail})
	}
	require.NoError(t, jobcompletion.Queue(ctx, pool, jobs[:3]))
	require.NoError(t, jobcompletion.Queue(ctx, pool, jobs[3:]))
	require.NoError(t, jobcompletion.Queue(ctx, pool, nil))
	var queuedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT queued_at FROM job_completions WHERE job_id = $1 ORDER BY id LIMIT 1`, ended).Scan(&queuedAt))
	// The queue is not the job: nothing changed yet.
	require.Equal(t, "active", stateOf(t, pool, ended).status)
	time.Sleep(10 * time.Millisecond) // so a completion at now() would show

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	taken, err := jobcompletion.CompleteQueued(ctx, tx, "system:test", 2)
	require.NoError(t, err)
	require.Positive(t, taken.Waited)
	taken.Waited = 0
	require.Equal(t, jobcompletion.Taken{Rows: 2, Outcomes: []string{"dead"}}, taken)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "active", stateOf(t, pool, ended).status)

	taken, err = jobcompletion.CompleteQueued(ctx, pool, "system:test", 2)
	require.NoError(t, err)
	require.GreaterOrEqual(t, taken.Waited, 10*time.Millisecond, "the oldest row waited at least the sleep")
	require.Less(t, taken.Waited, time.Minute)
	taken.Waited = 0
	require.Equal(t, jobcompletion.Taken{Rows: 2, Outcomes: []string{"dead"}}, taken, "the oldest two: ended and edited")
	var updated time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT updated_at FROM jobs WHERE id = $1`, ended).Scan(&updated))
	require.True(t, updated.Equal(queuedAt), "updated_at %v, want the instant it was queued %v", updated, queuedAt)
	require.Equal(t, []audit{{Actor: "system:test", Action: "complete", Version: 2, Detail: detail}}, audits(t, pool, ended))

	taken, err = jobcompletion.CompleteQueued(ctx, pool, "system:test", 10)
	require.NoError(t, err)
	require.Positive(t, taken.Waited)
	taken.Waited = 0
	require.Equal(t, jobcompletion.Taken{Rows: 4, Outcomes: []string{}}, taken, "the rest, none completed")
	require.Len(t, audits(t, pool, ended), 1, "queued twice, completed once")
	require.Equal(t, state{status: "active", version: 3}, stateOf(t, pool, edited))
	require.Equal(t, "active", stateOf(t, pool, rescheduled).status)
	require.Equal(t, "paused", stateOf(t, pool, paused).status)
	require.Equal(t, state{status: "completed", version: 2}, stateOf(t, pool, done))
	for _, id := range []uuid.UUID{edited, rescheduled, paused, done} {
		require.Empty(t, audits(t, pool, id))
	}

	taken, err = jobcompletion.CompleteQueued(ctx, pool, "system:test", 10)
	require.NoError(t, err)
	require.Equal(t, jobcompletion.Taken{Outcomes: []string{}}, taken, "an empty queue")
}
