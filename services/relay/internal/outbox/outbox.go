// Package outbox is the relay's view of the Postgres outbox table: claim a
// batch of due rows under row locks, delete the ones Kafka acknowledged,
// watch the table's depth, and listen for the NOTIFY that says rows arrived.
// The table and the channel are named by pkg/postgres/outbox, the one writer of the
// rows.
//
// A claim is a transaction holding FOR UPDATE SKIP LOCKED locks on its rows,
// so several relays claim disjoint batches at once without coordinating; the
// locks die with the transaction, so a relay that crashes mid-batch leaves
// its rows to the next claimer.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	pgoutbox "github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Row is one claimed outbox row: what to publish and where.
type Row struct {
	ID          int64
	ExecutionID string
	Attempt     int32
	JobID       string
	Priority    sundialv1.Priority
	// Envelope is the encoded sundial.v1.Firing, published unchanged.
	Envelope []byte
	// Waited is how long the row had been publishable when it was claimed
	// (database clock): since publish_at, or since it was staged if later.
	Waited time.Duration
}

// Store claims and deletes outbox rows through a pool.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store over pool; the pool's search_path names the
// schema holding the outbox table.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// The claim takes due rows oldest first through the (publish_at, id) index
// and skips rows another relay holds. now() is the transaction's start,
// clock_timestamp() the moment of the scan: the row's wait is measured to
// the latter. The row's ctid lets Complete delete it without a descent of
// the primary key's index per row: the claim's lock keeps every other
// writer off the row until the transaction ends, so its ctid cannot change
// in between.
const claimSQL = `
SELECT ctid, id, execution_id::text, attempt, job_id::text, priority, envelope,
       extract(epoch FROM clock_timestamp() - greatest(publish_at, created_at))::float8
  FROM ` + pgoutbox.Table + `
 WHERE publish_at <= now()
 ORDER BY publish_at, id
 LIMIT $1
   FOR UPDATE SKIP LOCKED`

// nextDueSQL runs in the claim's transaction, so now() is the claim's own
// instant: a row is either claimed or counted here, never neither.
const nextDueSQL = `SELECT extract(epoch FROM min(publish_at) - now())::float8 FROM ` + pgoutbox.Table + ` WHERE publish_at > now()`

// Claim is an open transaction holding row locks on its rows. Finish it with
// Complete or Release; until then no other relay sees those rows.
type Claim struct {
	tx      pgx.Tx
	rows    []Row
	tids    map[int64]pgtype.TID // claimed row id → its ctid
	next    time.Duration
	hasNext bool
	done    bool
}

// Claim begins a transaction and locks up to limit due rows. An empty claim
// is returned (and must still be released) when nothing is due. When fewer
// than limit rows were due, the claim also learns when the next staged row
// comes due (NextDue), so the relay can sleep exactly that long.
func (s *Store) Claim(ctx context.Context, limit int) (*Claim, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: begin claim: %w", err)
	}
	rows, err := tx.Query(ctx, claimSQL, limit)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	var out []Row
	tids := make(map[int64]pgtype.TID, limit)
	for rows.Next() {
		var (
			r      Row
			tid    pgtype.TID
			prio   int16
			waited float64
		)
		if err := rows.Scan(&tid, &r.ID, &r.ExecutionID, &r.Attempt, &r.JobID, &prio, &r.Envelope, &waited); err != nil {
			rows.Close()
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("outbox: claim scan: %w", err)
		}
		r.Priority = sundialv1.Priority(prio)
		r.Waited = time.Duration(max(waited, 0) * float64(time.Second))
		out = append(out, r)
		tids[r.ID] = tid
	}
	if err := rows.Err(); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	c := &Claim{tx: tx, rows: out, tids: tids}
	if len(out) < limit {
		var secs *float64
		if err := tx.QueryRow(ctx, nextDueSQL).Scan(&secs); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("outbox: next due: %w", err)
		}
		if secs != nil {
			c.next, c.hasNext = time.Duration(max(*secs, 0)*float64(time.Second)), true
		}
	}
	return c, nil
}

// Rows are the claimed rows, oldest due first.
func (c *Claim) Rows() []Row { return c.rows }

// NextDue is how long after the claim the earliest row not yet due at the
// claim becomes due; ok is false when there is none (or the batch was full,
// when the relay claims again at once anyway).
func (c *Claim) NextDue() (wait time.Duration, ok bool) { return c.next, c.hasNext }

// Complete deletes the rows with the given ids — only ones Kafka
// acknowledged — and commits, releasing the locks on the rest, which stay
// for the next claim. The rows are found by the ctids the claim read (a
// TID scan); should an id not be one of the claim's, all are deleted by
// id instead.
func (c *Claim) Complete(ctx context.Context, ids []int64) error {
	if c.done {
		return errors.New("outbox: claim already finished")
	}
	c.done = true
	if len(ids) > 0 {
		sql, arg := `DELETE FROM `+pgoutbox.Table+` WHERE ctid = ANY($1::tid[])`, any(nil)
		tids := make([]pgtype.TID, 0, len(ids))
		for _, id := range ids {
			t, ok := c.tids[id]
			if !ok {
				break
			}
			tids = append(tids, t)
		}
		if len(tids) == len(ids) {
			arg = tids
		} else {
			sql, arg = `DELETE FROM `+pgoutbox.Table+` WHERE id = ANY($1)`, ids
		}
		if _, err := c.tx.Exec(ctx, sql, arg); err != nil {
			_ = c.tx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("outbox: delete %d published rows: %w", len(ids), err)
		}
	}
	if err := c.tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: commit claim: %w", err)
	}
	return nil
}

// Release rolls the claim back, leaving every row in place. It is a no-op
// after Complete, so it can be deferred.
func (c *Claim) Release(ctx context.Context) {
	if c.done {
		return
	}
	c.done = true
	_ = c.tx.Rollback(ctx)
}

// Due is the outbox's backlog: the rows a relay could publish now.
type Due struct {
	// Rows whose publish_at has passed: they are waiting for a relay.
	Rows int64
	// Oldest is how long the oldest due row has been due; 0 when none.
	Oldest time.Duration
}

const dueSQL = `
SELECT count(*), coalesce(extract(epoch FROM now() - min(publish_at)), 0)::float8
  FROM ` + pgoutbox.Table + `
 WHERE publish_at <= now()`

// Due counts the rows that are due and finds the oldest, through the
// publish index: it reads the due range only, which is a handful of rows
// while the relays keep up, whatever the prefetcher has staged beyond it.
func (s *Store) Due(ctx context.Context) (Due, error) {
	var (
		d      Due
		oldest float64
	)
	err := s.pool.QueryRow(ctx, dueSQL).Scan(&d.Rows, &oldest)
	if err != nil {
		return Due{}, fmt.Errorf("outbox: due rows: %w", err)
	}
	d.Oldest = time.Duration(oldest * float64(time.Second))
	return d, nil
}

// Total counts every row, due or not. It reads the whole heap, dead rows
// included (the prefetcher's chunk of 30 windows is 600,000 rows at
// 5,000 firings/s, 0.7–0.8 s of Postgres CPU), so the relay runs it
// rarely and in one backend: no parallel workers, which would take every
// core of a small machine at once for that moment.
func (s *Store) Total(ctx context.Context) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM `+pgoutbox.Table).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: total rows: %w", err)
	}
	return n, nil
}
