// Package rollup counts the worker's firings per (tenant, minute,
// priority) in memory and adds them to Postgres's firing_minutes table in
// groups, so the console shows the platform's own numbers (firings per
// minute by outcome, lateness p50/p99, executions running now, the group's
// consumer lag per priority topic) without Prometheus. It is the one
// writer of firing_minutes, worker_running and group_lag: the flush, and
// the deletion of what is past retention, are here.
//
// The cost per firing is two map updates under a mutex (an outcome, and
// the lateness bucket with a running count when the attempt starts): no
// allocation once a tenant's minute exists, no I/O. Every Interval (10 s)
// the loop swaps the maps out and writes them with one statement: an
// INSERT ... ON CONFLICT DO UPDATE that adds this worker's counts to what
// other workers wrote for the same row, and upserts this worker's running
// counts per tenant. Rows are sent sorted by key, so two workers' flushes
// lock shared rows in one order and do not deadlock.
//
// A flush that fails puts its counts back to be added next time (up to
// MaxPending rows, past which the oldest minutes are dropped and logged):
// Postgres down for a while costs the rollup minutes, not the firings.
// A worker that crashes loses at most its last Interval of counts; the
// rollup is for operators' charts, not for billing.
package rollup

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Config configures the rollup.
type Config struct {
	// WorkerID names this worker's worker_running rows.
	WorkerID string
	// Interval is how often the counts are written; 10 s by default.
	Interval time.Duration
	// Retention is how long firing_minutes rows are kept; 8 days by
	// default (the console reads a day; a week back compares weekdays).
	Retention time.Duration
	// ExpireEvery is how often this worker deletes rows past retention
	// (every worker does; a delete finding nothing is cheap); 1 h.
	ExpireEvery time.Duration
	// MaxPending bounds the rows held while Postgres refuses the flush;
	// 50,000 by default.
	MaxPending int
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 8 * 24 * time.Hour
	}
	if c.ExpireEvery <= 0 {
		c.ExpireEvery = time.Hour
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 50000
	}
}

// Key is one row of firing_minutes.
type Key struct {
	Tenant   string
	Minute   int64 // Unix seconds, a whole minute
	Priority int16
}

// Counts are a row's counts.
type Counts struct {
	Outcomes [firingstats.NumOutcomes]int64
	Lateness []int64 // firingstats.Buckets long
}

func (c *Counts) add(o *Counts) {
	for i, n := range o.Outcomes {
		c.Outcomes[i] += n
	}
	for i, n := range o.Lateness {
		c.Lateness[i] += n
	}
}

// Rollup counts firings and writes them. A nil *Rollup counts nothing, so
// a worker without Postgres calls it all the same.
type Rollup struct {
	cfg    Config
	store  Store
	clk    clock.Clock
	logger *slog.Logger
	runner lifecycle.Runner

	mu      sync.Mutex
	rows    map[Key]*Counts
	running map[string]int64
	// lag is the group's lag per topic from the lag exporter's last read,
	// nil once written (a read that failed is not written again).
	lag map[string]int64
}

// New builds a rollup writing to store.
func New(cfg Config, store Store, clk clock.Clock, logger *slog.Logger) *Rollup {
	cfg.defaults()
	return &Rollup{cfg: cfg, store: store, clk: clk, logger: logger, rows: map[Key]*Counts{}, running: map[string]int64{}}
}

// row is the counts of tenant's current minute at priority; r.mu held.
func (r *Rollup) row(tenant string, p sundialv1.Priority) *Counts {
	k := Key{Tenant: tenant, Minute: r.clk.Now().Unix() / 60 * 60, Priority: int16(firing.Normalize(p))}
	c := r.rows[k]
	if c == nil {
		c = &Counts{Lateness: make([]int64, firingstats.Buckets)}
		r.rows[k] = c
	}
	return c
}

// Outcome counts one outcome of a firing (an outcome word of
// sundial_worker_firings_total) in its tenant's current minute.
func (r *Rollup) Outcome(tenant string, p sundialv1.Priority, outcome string) {
	if r == nil {
		return
	}
	col := firingstats.Column(outcome)
	r.mu.Lock()
	r.row(tenant, p).Outcomes[col]++
	r.mu.Unlock()
}

// Started counts an attempt starting, lateSeconds after its fire instant:
// its lateness, and one more running for its tenant until Finished.
func (r *Rollup) Started(tenant string, p sundialv1.Priority, lateSeconds float64) {
	if r == nil {
		return
	}
	b := firingstats.Bucket(lateSeconds)
	r.mu.Lock()
	r.row(tenant, p).Lateness[b]++
	r.running[tenant]++
	r.mu.Unlock()
}

// Finished counts an attempt Started before as no longer running.
func (r *Rollup) Finished(tenant string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.running[tenant]--
	r.mu.Unlock()
}

// SetLag keeps the consumer group's lag per topic (records not yet
// committed) from a successful read, for the next flush to write to
// group_lag.
func (r *Rollup) SetLag(lag map[string]int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.lag = lag
	r.mu.Unlock()
}

// Start runs the flush loop; Stop flushes once more and returns.
func (r *Rollup) Start(context.Context) error { return r.runner.Run(r.loop) }

// Stop stops the loop after a last flush.
func (r *Rollup) Stop() { r.runner.Stop() }

// Done and Err make the rollup lifecycle.Watched.
func (r *Rollup) Done() <-chan struct{} { return r.runner.Done() }

// Err is why the loop returned on its own (it does not).
func (r *Rollup) Err() error { return r.runner.Err() }

var _ lifecycle.Watched = (*Rollup)(nil)

func (r *Rollup) loop(ctx context.Context) error {
	lastExpire := time.Time{}
	for {
		t := r.clk.NewTimer(r.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			// The last counts, with a context of their own: the
			// loop's is cancelled.
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.Flush(fctx)
			cancel()
			if err != nil {
				r.logger.Warn("last rollup flush failed; its counts are lost", "err", err)
			}
			return nil
		case <-t.C():
		}
		if err := r.Flush(ctx); err != nil {
			r.logger.Warn("rollup flush failed; counts kept for the next", "err", err)
		}
		if now := r.clk.Now(); now.Sub(lastExpire) >= r.cfg.ExpireEvery {
			if err := r.store.Expire(ctx, now.Add(-r.cfg.Retention)); err != nil {
				r.logger.Warn("rollup retention delete failed", "err", err)
			} else {
				lastExpire = now
			}
		}
	}
}

// Row is a key and its counts, as a flush writes them.
type Row struct {
	Key
	Counts
}

// Flush writes the counts since the last flush, and the running counts
// now. On failure the counts are kept for the next flush.
func (r *Rollup) Flush(ctx context.Context) error {
	r.mu.Lock()
	taken := r.rows
	r.rows = make(map[Key]*Counts, len(taken))
	running := make(map[string]int64, len(r.running))
	for t, n := range r.running {
		running[t] = n
	}
	lag := r.lag
	r.lag = nil
	r.mu.Unlock()
	rows := make([]Row, 0, len(taken))
	for k, c := range taken {
		rows = append(rows, Row{Key: k, Counts: *c})
	}
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Minute, b.Minute), cmp.Compare(a.Priority, b.Priority))
	})
	if len(rows) == 0 && len(running) == 0 && len(lag) == 0 {
		return nil
	}
	if err := r.store.Write(ctx, r.cfg.WorkerID, rows, running, lag); err != nil {
		r.putBack(taken)
		r.mu.Lock()
		if r.lag == nil {
			r.lag = lag // unless a newer read came meanwhile
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

// putBack adds counts a failed flush took to what was counted since,
// dropping the oldest minutes past MaxPending.
func (r *Rollup) putBack(taken map[Key]*Counts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range taken {
		if have := r.rows[k]; have != nil {
			have.add(c)
		} else {
			r.rows[k] = c
		}
	}
	if over := len(r.rows) - r.cfg.MaxPending; over > 0 {
		keys := make([]Key, 0, len(r.rows))
		for k := range r.rows {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b Key) int { return cmp.Compare(a.Minute, b.Minute) })
		for _, k := range keys[:over] {
			delete(r.rows, k)
		}
		r.logger.Warn("rollup rows dropped: postgres refused them too long", "rows", over)
	}
}

// Store is where the rollup writes: Postgres's firing_minutes and
// worker_running (PG), or a test's fake.
type Store interface {
	// Write adds rows to firing_minutes, sets worker's running counts and
	// the group's lag per topic (when not empty), in one statement.
	Write(ctx context.Context, worker string, rows []Row, running map[string]int64, lag map[string]int64) error
	// Expire deletes firing_minutes rows before before, and worker_running
	// rows an hour stale.
	Expire(ctx context.Context, before time.Time) error
}

// PG is the Store in Postgres.
type PG struct{ pool *pgxpool.Pool }

// NewPG is the store on pool.
func NewPG(pool *pgxpool.Pool) *PG { return &PG{pool: pool} }

// The rows arrive as one array per column, lateness flattened into one
// array sliced back per row by ordinality; an existing row gets the counts
// added, its lateness bucket by bucket. The running counts are upserted in
// the same statement (a data-modifying CTE), with the database's clock.
const writeSQL = `
WITH running AS (
  INSERT INTO worker_running (worker_id, tenant, running, updated_at)
  SELECT $1, t, n, now() FROM unnest($12::text[], $13::int[]) AS u(t, n)
  ON CONFLICT (worker_id, tenant) DO UPDATE SET running = excluded.running, updated_at = excluded.updated_at
), lag AS (
  INSERT INTO group_lag (topic, records, updated_at, worker_id)
  SELECT t, n, now(), $1 FROM unnest($16::text[], $17::bigint[]) AS l(t, n)
  ON CONFLICT (topic) DO UPDATE SET records = excluded.records, updated_at = excluded.updated_at, worker_id = excluded.worker_id
)
INSERT INTO firing_minutes AS f (tenant, minute, priority, succeeded, failed, retried, dead, skipped, cancelled, other, lateness)
SELECT u.tenant, to_timestamp(u.minute), u.priority, u.s, u.f, u.r, u.d, u.k, u.c, u.o, ($11::bigint[])[(u.i-1)*$14::int+1 : u.i*$14::int]
FROM unnest($2::text[], $3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $15::bigint[])
  WITH ORDINALITY AS u(tenant, minute, priority, s, f, r, d, k, c, o, i)
ORDER BY u.i
ON CONFLICT (tenant, minute, priority) DO UPDATE SET
  succeeded = f.succeeded + excluded.succeeded, failed = f.failed + excluded.failed, retried = f.retried + excluded.retried,
  dead = f.dead + excluded.dead, skipped = f.skipped + excluded.skipped, cancelled = f.cancelled + excluded.cancelled,
  other = f.other + excluded.other,
  lateness = (SELECT array_agg(coalesce(a, 0) + coalesce(b, 0) ORDER BY n)
              FROM unnest(f.lateness, excluded.lateness) WITH ORDINALITY AS l(a, b, n))`

// Write implements Store.
func (s *PG) Write(ctx context.Context, worker string, rows []Row, running map[string]int64, lag map[string]int64) error {
	n := len(rows)
	tenants, minutes, prios := make([]string, n), make([]int64, n), make([]int16, n)
	var cols [firingstats.NumOutcomes][]int64
	for i := range cols {
		cols[i] = make([]int64, n)
	}
	lateness := make([]int64, 0, n*firingstats.Buckets)
	for i, r := range rows {
		tenants[i], minutes[i], prios[i] = r.Tenant, r.Minute, r.Priority
		for c := range cols {
			cols[c][i] = r.Outcomes[c]
		}
		lateness = append(lateness, r.Lateness...)
	}
	rt := make([]string, 0, len(running))
	rn := make([]int32, 0, len(running))
	for t, v := range running {
		rt = append(rt, t)
		rn = append(rn, int32(max(v, 0)))
	}
	lt := make([]string, 0, len(lag))
	ln := make([]int64, 0, len(lag))
	for t, v := range lag {
		lt = append(lt, t)
		ln = append(ln, v)
	}
	_, err := s.pool.Exec(ctx, writeSQL, worker, tenants, minutes, prios,
		cols[firingstats.Succeeded], cols[firingstats.Failed], cols[firingstats.Retried], cols[firingstats.Dead],
		cols[firingstats.Skipped], cols[firingstats.Cancelled], lateness, rt, rn, firingstats.Buckets, cols[firingstats.Other], lt, ln)
	return err
}

// Expire implements Store. Each delete is bounded: the minute index finds
// an hour's rows (the loop runs hourly), and worker_running holds a row
// per worker and tenant.
func (s *PG) Expire(ctx context.Context, before time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM firing_minutes WHERE minute < $1`, before); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM worker_running WHERE updated_at < now() - interval '1 hour'`)
	return err
}
