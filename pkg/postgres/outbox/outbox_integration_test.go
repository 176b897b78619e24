//go:build integration

package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// migrated is a pool on a fresh migrated schema and the schema's DSN,
// for a LISTEN connection of its own.
func migrated(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := pgtest.Schema(t)
	return pgtest.Pool(t, dsn), dsn
}

// row is attempt 1 of a slot of job, due at the slot less a minute.
func row(job uuid.UUID, slot time.Time) outbox.Row {
	return outbox.Row{
		ExecutionID: uuid.New(), Attempt: 1, JobID: job, JobVersion: 3, Priority: sundialv1.Priority_PRIORITY_HIGH,
		ScheduledAt: slot, FireAt: slot.Add(1500 * time.Millisecond), PublishAt: slot.Add(-time.Minute),
		Envelope: []byte("envelope of " + slot.Format(time.TimeOnly)),
	}
}

type stored struct {
	outbox.Row
	CreatedAt time.Time
}

func read(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []stored {
	t.Helper()
	r, err := pool.Query(context.Background(), `
SELECT execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at, publish_at, catch_up, envelope, created_at
  FROM outbox WHERE job_id = $1 ORDER BY scheduled_at, attempt`, job)
	require.NoError(t, err)
	rows, err := pgx.CollectRows(r, func(r pgx.CollectableRow) (stored, error) {
		var (
			s    stored
			prio int16
		)
		err := r.Scan(&s.ExecutionID, &s.Attempt, &s.JobID, &s.JobVersion, &prio, &s.ScheduledAt, &s.FireAt,
			&s.PublishAt, &s.CatchUp, &s.Envelope, &s.CreatedAt)
		s.Priority = sundialv1.Priority(prio)
		s.ScheduledAt, s.FireAt, s.PublishAt, s.CreatedAt = s.ScheduledAt.UTC(), s.FireAt.UTC(), s.PublishAt.UTC(), s.CreatedAt.UTC()
		return s, err
	})
	require.NoError(t, err)
	return rows
}

// listener collects the payloads notified on outbox.Channel. NOTIFY is
// database-wide, and other packages' tests share the database, so a test
// only looks at payloads of its own.
type listener struct {
	t    *testing.T
	conn *pgx.Conn
}

func listen(t *testing.T, dsn string) *listener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel}.Sanitize())
	require.NoError(t, err)
	return &listener{t: t, conn: conn}
}

// until notifies a unique marker and returns the payloads that arrived
// before it, so what was committed earlier has certainly arrived.
func (l *listener) until(pool *pgxpool.Pool) map[string]int {
	l.t.Helper()
	marker := "marker " + uuid.NewString()
	require.NoError(l.t, outbox.Notify(context.Background(), pool, marker))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]int{}
	for {
		n, err := l.conn.WaitForNotification(ctx)
		require.NoError(l.t, err, "no marker notification")
		require.Equal(l.t, outbox.Channel, n.Channel)
		if n.Payload == marker {
			return got
		}
		got[n.Payload]++
	}
}

// Insert writes every column as given (a zero PublishAt becomes the
// transaction's now()), reports which rows were new, leaves an attempt
// already staged as it was, and commits or rolls back with its caller.
func TestInsertWritesNewAttemptsOnly(t *testing.T) {
	pool, _ := migrated(t)
	ctx := context.Background()
	job := uuid.New()
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	first, second, paced := row(job, slot), row(job, slot.Add(time.Minute)), row(job, slot.Add(2*time.Minute))
	paced.CatchUp, paced.PublishAt = true, time.Time{}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Insert(ctx, tx, []outbox.Row{first})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, read(t, pool, job), "a rolled-back insert writes nothing")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&now))
	inserted, err := outbox.Insert(ctx, tx, []outbox.Row{first, second, paced})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, inserted)
	require.NoError(t, tx.Commit(ctx))

	got := read(t, pool, job)
	require.Len(t, got, 3)
	require.Equal(t, first, got[0].Row)
	require.Equal(t, second, got[1].Row)
	want := paced
	want.PublishAt = now.UTC()
	require.Equal(t, want, got[2].Row, "zero PublishAt is the transaction's now()")

	// Restaging: the known attempts are not new and keep their columns;
	// a later attempt of the same execution is new, and a key repeated in
	// the input is written (and reported) once.
	changed := second
	changed.Envelope, changed.FireAt = []byte("changed"), slot.Add(time.Hour)
	retry := first
	retry.Attempt, retry.PublishAt = 2, slot
	inserted, err = outbox.Insert(ctx, pool, []outbox.Row{changed, retry, first, retry})
	require.NoError(t, err)
	require.Equal(t, []bool{false, true, false, false}, inserted)
	got = read(t, pool, job)
	require.Len(t, got, 4)
	require.Equal(t, second, got[2].Row, "a duplicate leaves the staged row as it was")
	require.Equal(t, retry, got[1].Row)

	inserted, err = outbox.Insert(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, inserted)
}

// InsertNotify writes one row in one statement and wakes the relay with the
// job id only when the row was new.
func TestInsertNotifyWakesTheRelayOnlyForANewRow(t *testing.T) {
	pool, dsn := migrated(t)
	ctx := context.Background()
	l := listen(t, dsn)
	job := uuid.New()
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	r := row(job, slot)
	r.PublishAt = time.Time{}

	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&before))
	ok, err := outbox.InsertNotify(ctx, pool, r)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, l.until(pool)[job.String()])
	got := read(t, pool, job)
	require.Len(t, got, 1)
	require.False(t, got[0].PublishAt.Before(before.UTC()), "zero PublishAt is now()")
	require.Equal(t, got[0].CreatedAt, got[0].PublishAt)
	want := r
	want.PublishAt = got[0].PublishAt
	require.Equal(t, want, got[0].Row)

	again := r
	again.Envelope = []byte("again")
	ok, err = outbox.InsertNotify(ctx, pool, again)
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, l.until(pool)[job.String()], "a duplicate wakes nobody")
	require.Equal(t, r.Envelope, read(t, pool, job)[0].Envelope)

	// Inside a transaction the row and its notification wait for the commit.
	later := row(job, slot.Add(time.Minute))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ok, err = outbox.InsertNotify(ctx, tx, later)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, l.until(pool)[job.String()], "a rolled-back insert wakes nobody")
	require.Len(t, read(t, pool, job), 1)
}

// Notify is delivered at commit, with its payload, and not at all on
// rollback.
func TestNotifyIsDeliveredAtCommit(t *testing.T) {
	pool, dsn := migrated(t)
	ctx := context.Background()
	l := listen(t, dsn)
	committed, rolledBack := "committed "+uuid.NewString(), "rolled back "+uuid.NewString()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.Notify(ctx, tx, rolledBack))
	require.NoError(t, tx.Rollback(ctx))
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.Notify(ctx, tx, committed))
	require.NoError(t, tx.Commit(ctx))

	got := l.until(pool)
	require.Equal(t, 1, got[committed])
	require.Zero(t, got[rolledBack])
}

// DeleteJob removes every row of the job, whatever its attempt or due
// time, returns what they were, and leaves other jobs' rows.
func TestDeleteJobReturnsTheDroppedRows(t *testing.T) {
	pool, _ := migrated(t)
	ctx := context.Background()
	job, other := uuid.New(), uuid.New()
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	a, b, c := row(job, slot), row(job, slot.Add(time.Hour)), row(other, slot)
	b.Attempt, b.CatchUp, b.JobVersion = 2, true, 5
	_, err := outbox.Insert(ctx, pool, []outbox.Row{a, b, c})
	require.NoError(t, err)

	dropped, err := outbox.DeleteJob(ctx, pool, job.String())
	require.NoError(t, err)
	require.ElementsMatch(t, []outbox.Dropped{
		{ExecutionID: a.ExecutionID.String(), Attempt: 1, JobVersion: 3, ScheduledAt: a.ScheduledAt, FireAt: a.FireAt},
		{ExecutionID: b.ExecutionID.String(), Attempt: 2, JobVersion: 5, ScheduledAt: b.ScheduledAt, FireAt: b.FireAt, CatchUp: true},
	}, utc(dropped))
	require.Empty(t, read(t, pool, job))
	require.Len(t, read(t, pool, other), 1)

	dropped, err = outbox.DeleteJob(ctx, pool, job.String())
	require.NoError(t, err)
	require.Empty(t, dropped)
}

func utc(ds []outbox.Dropped) []outbox.Dropped {
	for i := range ds {
		ds[i].ScheduledAt, ds[i].FireAt = ds[i].ScheduledAt.UTC(), ds[i].FireAt.UTC()
	}
	return ds
}
