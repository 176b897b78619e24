// Package ledgerpending is the transactional way into the execution ledger
// for decisions made inside a Postgres transaction: a slot the prefetcher's
// misfire policy skipped, a staged firing the api dropped on pause, update or
// delete. Writing such a row straight to Cassandra from inside the
// transaction would record a decision that may still roll back, and writing
// it after the commit could be lost to a crash in between. So the row goes
// into the ledger_pending table in the same transaction as the decision
// (Insert), and the prefetcher's drainer copies it into the Cassandra ledger
// and deletes it afterwards (Claim, then ledger.Writer.Record).
//
// It is also where a worker spills the records Cassandra does not take
// (Spill): while the ledger is down its records would otherwise fill the
// worker's bounded queues and then hold up firing. A spilled row carries
// the whole record, and the same drainer writes it when Cassandra is back.
//
// The drain is at least once: a crash between the Cassandra write and the
// delete writes the same ledger row again, which the ledger absorbs (same
// key, same write timestamp, same values).
package ledgerpending

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Row is one ledger record waiting to be drained into Cassandra. The drainer
// records it as attempt Attempt of execution ExecutionID with fence 0 (no
// lease was involved).
type Row struct {
	// ExecutionID and JobID are UUIDs in their text form.
	ExecutionID, JobID, Tenant string
	// Attempt is the attempt the record is about; 0 means 1.
	Attempt int32
	// Status is usually SKIPPED.
	Status sundialv1.ExecutionStatus
	// ScheduledAt is the slot; FireAt the instant the firing had or would
	// have had (zero means ScheduledAt).
	ScheduledAt, FireAt time.Time
	CatchUp             bool
	JobVersion          int64
	// Reason says why, in words a job's owner can read ("misfire: older
	// than the grace of 1h", "paused").
	Reason string
}

// ErrInvalidRow is wrapped by Insert when a row lacks something the ledger
// keys on; the message names the row and the field.
var ErrInvalidRow = errors.New("ledgerpending: invalid row")

const insertSQL = `
INSERT INTO ledger_pending (execution_id, job_id, tenant, attempt, status,
                            scheduled_at, fire_at, catch_up, job_version, reason)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::integer[], $5::smallint[],
                     $6::timestamptz[], $7::timestamptz[], $8::boolean[], $9::bigint[], $10::text[])`

// Insert writes rows into ledger_pending inside tx, in one statement, so
// they commit or roll back with the decision they record. It writes nothing
// and returns an error wrapping ErrInvalidRow if any row lacks an execution
// id, a job id, a status or a slot.
func Insert(ctx context.Context, tx pgx.Tx, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	var (
		exec, job   = make([]uuid.UUID, n), make([]uuid.UUID, n)
		tenant      = make([]string, n)
		attempt     = make([]int32, n)
		status      = make([]int16, n)
		sched, fire = make([]time.Time, n), make([]time.Time, n)
		catchUp     = make([]bool, n)
		version     = make([]int64, n)
		reason      = make([]string, n)
	)
	for i, r := range rows {
		var err error
		if exec[i], err = uuid.Parse(r.ExecutionID); err != nil {
			return fmt.Errorf("%w: row %d: execution id %q: %v", ErrInvalidRow, i, r.ExecutionID, err)
		}
		if job[i], err = uuid.Parse(r.JobID); err != nil {
			return fmt.Errorf("%w: row %d: job id %q: %v", ErrInvalidRow, i, r.JobID, err)
		}
		if r.Status == sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
			return fmt.Errorf("%w: row %d: status is unspecified", ErrInvalidRow, i)
		}
		if r.ScheduledAt.IsZero() {
			return fmt.Errorf("%w: row %d: scheduled_at is zero", ErrInvalidRow, i)
		}
		if r.Attempt < 0 {
			return fmt.Errorf("%w: row %d: attempt must not be negative, got %d", ErrInvalidRow, i, r.Attempt)
		}
		tenant[i], catchUp[i], version[i], reason[i] = r.Tenant, r.CatchUp, r.JobVersion, r.Reason
		attempt[i] = max(r.Attempt, 1)
		status[i] = firing.ExecutionStatusSQL(r.Status)
		sched[i], fire[i] = r.ScheduledAt, r.FireAt
		if r.FireAt.IsZero() {
			fire[i] = r.ScheduledAt
		}
	}
	if _, err := tx.Exec(ctx, insertSQL, exec, job, tenant, attempt, status, sched, fire, catchUp, version, reason); err != nil {
		return fmt.Errorf("ledgerpending: insert %d rows: %w", n, err)
	}
	return nil
}

const spillSQL = `
INSERT INTO ledger_pending (execution_id, job_id, tenant, attempt, status,
                            scheduled_at, fire_at, catch_up, job_version, reason, record)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::integer[], $5::smallint[],
                     $6::timestamptz[], $7::timestamptz[], $8::boolean[], $9::bigint[], $10::text[], $11::bytea[])`

// Execer is what Spill needs: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Spill parks whole ledger records that the ledger could not take (a
// worker's, while Cassandra is down) in one statement; the drainer writes
// them to the ledger when it answers, exactly as they were. It writes
// nothing and returns an error wrapping ErrInvalidRow if any record lacks
// an execution id, a job id, a status or a slot.
func Spill(ctx context.Context, q Execer, as []*sundialv1.ExecutionAttempt) error {
	n := len(as)
	if n == 0 {
		return nil
	}
	exec, job, tenant, reason := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempt, status := make([]int32, n), make([]int16, n)
	sched, fire := make([]time.Time, n), make([]time.Time, n)
	catchUp, version, record := make([]bool, n), make([]int64, n), make([][]byte, n)
	for i, a := range as {
		if _, err := uuid.Parse(a.GetExecutionId()); err != nil {
			return fmt.Errorf("%w: record %d: execution_id %q is not a UUID", ErrInvalidRow, i, a.GetExecutionId())
		}
		if _, err := uuid.Parse(a.GetJobId()); err != nil {
			return fmt.Errorf("%w: record %d: job_id %q is not a UUID", ErrInvalidRow, i, a.GetJobId())
		}
		if a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
			return fmt.Errorf("%w: record %d: status is required", ErrInvalidRow, i)
		}
		if a.GetScheduledTime() == nil {
			return fmt.Errorf("%w: record %d: scheduled_time is required", ErrInvalidRow, i)
		}
		b, err := proto.Marshal(a)
		if err != nil {
			return fmt.Errorf("ledgerpending: spill record %d: %w", i, err)
		}
		exec[i], job[i], tenant[i], reason[i] = a.GetExecutionId(), a.GetJobId(), a.GetTenant(), a.GetReason()
		attempt[i], status[i] = max(a.GetAttempt(), 1), firing.ExecutionStatusSQL(a.GetStatus())
		sched[i], fire[i] = a.GetScheduledTime().AsTime(), a.GetScheduledTime().AsTime()
		if a.GetFireTime() != nil {
			fire[i] = a.GetFireTime().AsTime()
		}
		catchUp[i], version[i], record[i] = a.GetCatchUp(), a.GetJobVersion(), b
	}
	if _, err := q.Exec(ctx, spillSQL, exec, job, tenant, attempt, status, sched, fire, catchUp, version, reason, record); err != nil {
		return fmt.Errorf("ledgerpending: spill %d records: %w", n, err)
	}
	return nil
}

// Pending is a row as stored, with its table id and the database instant it
// was written at.
type Pending struct {
	ID int64
	Row
	CreatedAt time.Time
	// Record is the whole ledger record of a spilled row (Spill); nil for
	// rows written by Insert.
	Record []byte
}

// ExecutionAttempt is the ledger record of the row: a spilled row's record
// as it was spilled; otherwise fence 0, the row's status, slot, fire
// instant, catch-up flag, job version and reason.
func (p Pending) ExecutionAttempt() *sundialv1.ExecutionAttempt {
	if len(p.Record) > 0 {
		var a sundialv1.ExecutionAttempt
		if err := proto.Unmarshal(p.Record, &a); err == nil {
			return &a
		}
		// Not decodable (cannot happen for what Spill wrote): the
		// columns still say what the slot became.
	}
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   p.ExecutionID,
		JobId:         p.JobID,
		Tenant:        p.Tenant,
		Attempt:       max(p.Attempt, 1),
		Status:        p.Status,
		ScheduledTime: timestamppb.New(p.ScheduledAt),
		FireTime:      timestamppb.New(p.FireAt),
		CatchUp:       p.CatchUp,
		JobVersion:    p.JobVersion,
		Reason:        p.Reason,
	}
}

// claimSQL deletes up to $1 of the oldest rows and returns them. SKIP
// LOCKED lets several drainers work side by side on disjoint rows; the
// delete only takes effect if the caller commits, which it does after the
// rows are in the ledger.
const claimSQL = `
DELETE FROM ledger_pending
 WHERE id IN (SELECT id FROM ledger_pending ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, execution_id::text, job_id::text, tenant, attempt, status,
          scheduled_at, fire_at, catch_up, job_version, reason, created_at, record`

// Claim deletes up to limit of the oldest pending rows inside tx and returns
// them, oldest first. Commit tx only once every returned row is in the
// ledger: rolling back (or crashing) leaves the rows for the next claim.
func Claim(ctx context.Context, tx pgx.Tx, limit int) ([]Pending, error) {
	r, err := tx.Query(ctx, claimSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("ledgerpending: claim: %w", err)
	}
	rows, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (Pending, error) {
		var p Pending
		var status int16
		err := row.Scan(&p.ID, &p.ExecutionID, &p.JobID, &p.Tenant, &p.Attempt, &status,
			&p.ScheduledAt, &p.FireAt, &p.CatchUp, &p.JobVersion, &p.Reason, &p.CreatedAt, &p.Record)
		p.Status = firing.ExecutionStatusFromSQL(status)
		p.ScheduledAt, p.FireAt, p.CreatedAt = p.ScheduledAt.UTC(), p.FireAt.UTC(), p.CreatedAt.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledgerpending: claim: %w", err)
	}
	// DELETE ... RETURNING does not promise an order.
	slices.SortFunc(rows, func(a, b Pending) int { return cmp.Compare(a.ID, b.ID) })
	return rows, nil
}

// Querier is what Backlog needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Backlog reports how many rows wait to be drained and how long the oldest
// has waited by the database clock (zero when none).
func Backlog(ctx context.Context, q Querier) (n int64, age time.Duration, err error) {
	var secs float64
	err = q.QueryRow(ctx, `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM ledger_pending`).
		Scan(&n, &secs)
	if err != nil {
		return 0, 0, fmt.Errorf("ledgerpending: backlog: %w", err)
	}
	return n, time.Duration(secs * float64(time.Second)), nil
}
