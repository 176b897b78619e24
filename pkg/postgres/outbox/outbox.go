// Package outbox is the one writer of the Postgres outbox table and the one
// name of the channel that wakes the relay. Every firing attempt on its way
// to Kafka passes through here as a Row: the prefetcher stages a window of
// slots, the api stages manual triggers, backfills and re-drives, the
// worker stages retries, and the api drops a job's unpublished rows when the
// job changes. The relay claims and deletes the rows (services/relay, with
// the names declared here).
//
// A row is unique on (execution id, attempt): staging the same attempt twice
// is a no-op, which is what makes a repeated prefetch of a slot, or a retry
// decided twice after a redelivery, harmless. Each write says which rows
// were new so callers can count and audit what they really staged.
//
// Writes never notify on their own: the callers notify (Notify) once per
// transaction, when they have staged something, because NOTIFY is delivered
// at commit and one per transaction wakes the relay as well as a thousand.
// InsertNotify is the exception, for a caller with no transaction of its
// own (a worker's retry): one statement that writes the row and notifies if
// it was new. A lost notification only costs latency: the relay also polls.
//
// What a row holds (the envelope, when it may be published, its priority)
// is the caller's decision, with one exception: a paced release, the
// prefetcher's catch-ups and the api's backfills and re-drives, follows
// one rule here, for when each row fires (PacedFireAt) and when it may be
// published (PublishAt), so the pace a release keeps and the rows workers
// hold do not depend on which service staged it.
package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Table is the outbox table's name, for the SQL of the relay's claim.
const Table = "outbox"

// Channel is the LISTEN/NOTIFY channel the relay wakes on.
const Channel = "sundial_outbox"

// Row is one firing attempt to publish.
type Row struct {
	ExecutionID uuid.UUID
	// Attempt is 1 for a slot's first firing.
	Attempt    int32
	JobID      uuid.UUID
	JobVersion int64
	Priority   sundialv1.Priority
	// ScheduledAt is the slot; FireAt the instant the worker fires it
	// (jitter, pacing or a retry's backoff included).
	ScheduledAt, FireAt time.Time
	// PublishAt is when the relay may publish the row; zero means now(),
	// the database clock of the statement's transaction.
	PublishAt time.Time
	CatchUp   bool
	// Envelope is the encoded sundial.v1.Firing the relay publishes
	// unchanged.
	Envelope []byte
}

// FromFiring is the row of firing f with its encoded envelope: identity,
// version, priority, instants and catch-up flag as f has them, PublishAt
// left zero.
func FromFiring(f *sundialv1.Firing, envelope []byte) (Row, error) {
	exec, err := uuid.Parse(f.GetExecutionId())
	if err != nil {
		return Row{}, fmt.Errorf("outbox: firing execution id %q: %w", f.GetExecutionId(), err)
	}
	job, err := uuid.Parse(f.GetJobId())
	if err != nil {
		return Row{}, fmt.Errorf("outbox: firing %s: job id %q: %w", f.GetExecutionId(), f.GetJobId(), err)
	}
	return Row{
		ExecutionID: exec, Attempt: f.GetAttempt(), JobID: job, JobVersion: f.GetJobVersion(),
		Priority: f.GetPriority(), ScheduledAt: f.GetScheduledTime().AsTime(), FireAt: f.GetFireTime().AsTime(),
		CatchUp: f.GetCatchUp(), Envelope: envelope,
	}, nil
}

// PaceInterval is the spacing of a release paced at rate firings per
// second: a second over rate, rounded to whole microseconds, the precision
// Postgres keeps, so the fire instant in the row's fire_at and the one in
// its envelope agree; at least a microsecond. Zero when rate is not
// positive: the release is not paced.
func PaceInterval(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return max(time.Duration(float64(time.Second)/rate).Round(time.Microsecond), time.Microsecond)
}

// PacedFireAt is the fire instant of the i-th firing (from 0) of a release
// paced at rate from start: start + i×PaceInterval(rate). A release carried
// over several transactions (the prefetcher's catch-ups, batch after
// batch) starts each at PacedFireAt(start, n, rate) of the one before,
// after its n firings, so the pace holds across them; the api's backfills
// and re-drives start at the database clock's now. The targets see a
// steady stream rather than a herd.
func PacedFireAt(start time.Time, i int, rate float64) time.Time {
	return start.Add(time.Duration(i) * PaceInterval(rate))
}

// PublishAt is when a row that fires at fire may be published when it is
// released lead ahead of its instant: lead before fire, never before now
// (the database clock of the staging transaction). Paced releases use it
// (the prefetcher's catch-up, the api's backfills and re-drives): the
// relay publishes each row as it comes due, so workers hold at most a
// lead's worth of them, and rows not yet published are what a later
// pause, update or delete of the job drops.
func PublishAt(fire time.Time, lead time.Duration, now time.Time) time.Time {
	if p := fire.Add(-lead); p.After(now) {
		return p
	}
	return now
}

// Querier is what the writes need: a transaction, a connection or a pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// insertSQL writes a whole batch in one statement from parallel arrays.
const insertSQL = `
INSERT INTO ` + Table + ` (execution_id, attempt, job_id, job_version, priority,
                    scheduled_at, fire_at, publish_at, catch_up, envelope)
SELECT e, a, j, v, p, s, f, coalesce(pub, now()), c, env
  FROM unnest($1::uuid[], $2::integer[], $3::uuid[], $4::bigint[], $5::smallint[],
              $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::boolean[], $10::bytea[])
       AS t(e, a, j, v, p, s, f, pub, c, env)
ON CONFLICT (execution_id, attempt) DO NOTHING
RETURNING execution_id, attempt`

// Insert writes rows in one statement and reports, in row order, which were
// new; an attempt already in the outbox is left as it was. Callers that
// stage very many rows with large envelopes bound the statement by calling
// it per chunk.
func Insert(ctx context.Context, q Querier, rows []Row) ([]bool, error) {
	n := len(rows)
	if n == 0 {
		return nil, nil
	}
	var (
		exec, job   = make([]uuid.UUID, n), make([]uuid.UUID, n)
		attempt     = make([]int32, n)
		version     = make([]int64, n)
		prio        = make([]int16, n)
		sched, fire = make([]time.Time, n), make([]time.Time, n)
		pub         = make([]pgtype.Timestamptz, n)
		catchUp     = make([]bool, n)
		env         = make([][]byte, n)
	)
	for i, r := range rows {
		exec[i], attempt[i], job[i], version[i], prio[i] = r.ExecutionID, r.Attempt, r.JobID, r.JobVersion, int16(r.Priority)
		sched[i], fire[i], pub[i], catchUp[i], env[i] = r.ScheduledAt, r.FireAt, timestamptz(r.PublishAt), r.CatchUp, r.Envelope
	}
	res, err := q.Query(ctx, insertSQL, exec, attempt, job, version, prio, sched, fire, pub, catchUp, env)
	if err != nil {
		return nil, fmt.Errorf("outbox: insert %d rows: %w", n, err)
	}
	keys, err := pgx.CollectRows(res, func(r pgx.CollectableRow) (key, error) {
		var k key
		return k, r.Scan(&k.exec, &k.attempt)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: insert %d rows: %w", n, err)
	}
	return newRows(rows, keys), nil
}

// key is an outbox row's unique key.
type key struct {
	exec    uuid.UUID
	attempt int32
}

// newRows marks the rows the insert returned. Usually every row is new;
// otherwise each returned key marks the first row that has it, so the
// count of marks is the count of rows written.
func newRows(rows []Row, keys []key) []bool {
	out := make([]bool, len(rows))
	if len(keys) == len(rows) {
		for i := range out {
			out[i] = true
		}
		return out
	}
	left := make(map[key]int, len(keys))
	for _, k := range keys {
		left[k]++
	}
	for i, r := range rows {
		k := key{r.ExecutionID, r.Attempt}
		if left[k] > 0 {
			left[k]--
			out[i] = true
		}
	}
	return out
}

// insertNotifySQL is one statement, so it is atomic on its own and one
// round trip; the notification is sent only if the row was inserted, at
// commit.
const insertNotifySQL = `
WITH ins AS (
  INSERT INTO ` + Table + ` (execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at,
                      publish_at, catch_up, envelope)
  VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()), $9, $10)
  ON CONFLICT (execution_id, attempt) DO NOTHING
  RETURNING job_id)
SELECT pg_notify('` + Channel + `', job_id::text) FROM ins`

// InsertNotify writes one row and, if it was new, notifies Channel with the
// job id, in one statement; it reports whether the row was new.
func InsertNotify(ctx context.Context, q Querier, r Row) (bool, error) {
	rows, err := q.Query(ctx, insertNotifySQL, r.ExecutionID, r.Attempt, r.JobID, r.JobVersion, int16(r.Priority),
		r.ScheduledAt, r.FireAt, timestamptz(r.PublishAt), r.CatchUp, r.Envelope)
	if err != nil {
		return false, fmt.Errorf("outbox: insert %s attempt %d: %w", r.ExecutionID, r.Attempt, err)
	}
	inserted := false
	for rows.Next() {
		inserted = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("outbox: insert %s attempt %d: %w", r.ExecutionID, r.Attempt, err)
	}
	return inserted, nil
}

// Notify wakes the relay at commit with payload (which the relay does not
// read; it helps whoever watches the channel).
func Notify(ctx context.Context, q Querier, payload string) error {
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, payload); err != nil {
		return fmt.Errorf("outbox: notify: %w", err)
	}
	return nil
}

// Dropped is a row DeleteJob removed.
type Dropped struct {
	ExecutionID         string
	Attempt             int32
	JobVersion          int64
	ScheduledAt, FireAt time.Time
	CatchUp             bool
}

// DeleteJob deletes every outbox row of the job and returns what they were.
// The relay deletes rows once Kafka acknowledged them, so whatever is left
// is unpublished; a row a relay is publishing right now is locked, and the
// delete waits for it.
func DeleteJob(ctx context.Context, q Querier, jobID string) ([]Dropped, error) {
	rows, err := q.Query(ctx, deleteJobSQL, jobID)
	if err != nil {
		return nil, fmt.Errorf("outbox: delete rows of job %s: %w", jobID, err)
	}
	out, err := collectDropped(rows)
	if err != nil {
		return nil, fmt.Errorf("outbox: delete rows of job %s: %w", jobID, err)
	}
	return out, nil
}

// QueueDeleteJob queues DeleteJob in b: once the batch ran, *into holds
// what the rows were. A bulk change sends one batch for many jobs rather
// than a round trip each.
func QueueDeleteJob(b *pgx.Batch, jobID string, into *[]Dropped) {
	b.Queue(deleteJobSQL, jobID).Query(func(rows pgx.Rows) error {
		out, err := collectDropped(rows)
		if err != nil {
			return fmt.Errorf("outbox: delete rows of job %s: %w", jobID, err)
		}
		*into = out
		return nil
	})
}

const deleteJobSQL = `
		DELETE FROM ` + Table + ` WHERE job_id = $1
		RETURNING execution_id::text, attempt, job_version, scheduled_at, fire_at, catch_up`

func collectDropped(rows pgx.Rows) ([]Dropped, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Dropped, error) {
		var d Dropped
		err := r.Scan(&d.ExecutionID, &d.Attempt, &d.JobVersion, &d.ScheduledAt, &d.FireAt, &d.CatchUp)
		return d, err
	})
}

func timestamptz(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}
