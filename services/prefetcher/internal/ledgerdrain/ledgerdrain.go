// Package ledgerdrain copies ledger_pending rows into the Cassandra
// execution ledger and deletes them: the second half of recording a
// decision made inside a Postgres transaction (see pkg/postgres/ledgerpending).
//
// Every prefetcher process runs a drainer, leader or not. Claims take rows
// with FOR UPDATE SKIP LOCKED, so drainers split the work instead of
// competing for it, and draining goes on while an election is in flux or
// ZooKeeper is away: nothing about it needs leadership, because writing a
// ledger row twice is harmless.
//
// One batch is one Postgres transaction: claim (delete) up to BatchSize of
// the oldest rows, write each to the ledger (fence 0), commit. A failed
// write rolls the transaction back and the rows wait for the next round; a
// crash after the writes and before the commit writes them again, as the
// same ledger cells.
//
// The drainer writes at the pace of a ledger.Throttle, which follows
// Cassandra's latency and errors: the rows are there because the ledger
// was behind or down, and a backlog replayed at full speed into a node
// that just came back is what pushes it over again. Each batch claims
// only what the throttle lets through within half of BatchTimeout, so a
// slow ledger makes batches smaller rather than rolled back. The ledger is dialled lazily and redialled after a
// failure, so a Cassandra outage delays the ledger but never stops the
// prefetcher from staging.
package ledgerdrain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Ledger is where drained rows go; *ledger.Writer implements it.
type Ledger interface {
	Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error
}

// GroupLedger is a Ledger that also writes many records in one call
// (*ledger.Writer: one Cassandra batch per partition); the drainer uses it
// when the ledger has it.
type GroupLedger interface {
	Ledger
	RecordMany(ctx context.Context, recs []ledger.Rec) []error
}

// Dial opens the ledger. The drainer calls it when it first has rows to
// write and again after a failed dial; it calls closeFn once it stops.
type Dial func(ctx context.Context) (l Ledger, closeFn func(), err error)

// Config of a drainer.
type Config struct {
	// Interval between rounds when the table is drained; a round drains
	// batch after batch until one comes back short.
	Interval time.Duration
	// BatchSize is the number of rows per transaction.
	BatchSize int
	// Concurrency bounds ledger writes in flight within a batch.
	Concurrency int
	// BatchTimeout bounds one batch (claim, writes, commit), so a stuck
	// Cassandra cannot hold row locks for long.
	BatchTimeout time.Duration
	// Throttle paces the writes by how Cassandra answers them; nil:
	// unpaced (tests of the claim protocol).
	Throttle *ledger.Throttle
	// MaxRate caps the records written per second however healthy the
	// ledger (the throttle's ceiling; --ledger-drain-max-rate), MinRate is
	// the pace kept while Cassandra fails, as probes
	// (--ledger-drain-min-rate). The process builds Throttle from them
	// and checks them (the drainer itself reads only Throttle).
	MaxRate float64
	MinRate float64
}

// Validate reports every problem, named by the flag that sets it.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("ledger-drain-interval: must be positive, got %s", c.Interval))
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("ledger-drain-batch-size: must be in [1, 10000], got %d", c.BatchSize))
	}
	if c.Concurrency < 1 || c.Concurrency > 1000 {
		errs = append(errs, fmt.Errorf("ledger-drain-concurrency: must be in [1, 1000], got %d", c.Concurrency))
	}
	if c.BatchTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ledger-drain-timeout: must be positive, got %s", c.BatchTimeout))
	}
	return errors.Join(errs...)
}

// Metrics of the drainer.
type Metrics struct {
	// Pending and Lag describe the backlog by the database clock, sampled
	// at the start of every round.
	Pending prometheus.Gauge
	Lag     prometheus.Gauge
	Drained prometheus.Counter
	// Dropped rows the ledger refused as invalid (they can never be
	// written; keeping them would block the queue).
	Dropped prometheus.Counter
	Errors  prometheus.Counter
}

// NewMetrics registers the drainer's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_ledger_pending_rows", Help: "ledger_pending rows waiting to be written to the ledger.",
		}),
		Lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_prefetcher_ledger_drain_lag_seconds", Help: "Age of the oldest ledger_pending row (database clock); 0 when none.",
		}),
		Drained: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_ledger_drained_total", Help: "ledger_pending rows written to the ledger and deleted.",
		}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_ledger_dropped_total", Help: "ledger_pending rows the ledger refused as invalid, deleted unwritten.",
		}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_ledger_drain_errors_total", Help: "Drain rounds that failed (retried next round).",
		}),
	}
	reg.MustRegister(m.Pending, m.Lag, m.Drained, m.Dropped, m.Errors)
	return m
}

// Drainer is a lifecycle.Service.
type Drainer struct {
	cfg     Config
	pool    *pgxpool.Pool
	dial    Dial
	log     *slog.Logger
	clk     clock.Clock
	metrics *Metrics
	runner  lifecycle.Runner

	// Owned by the loop goroutine.
	ledger  Ledger
	closeFn func()
}

// New returns a drainer over pool (whose search_path picks the schema).
func New(cfg Config, pool *pgxpool.Pool, dial Dial, log *slog.Logger, clk clock.Clock, m *Metrics) (*Drainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Drainer{cfg: cfg, pool: pool, dial: dial, log: log.With("component", "ledgerdrain"), clk: clk, metrics: m}, nil
}

// Start runs the drainer in the background.
func (d *Drainer) Start(context.Context) error { return d.runner.Run(d.run) }

// Stop ends the drainer (rolling back an in-flight batch, whose rows stay
// pending) and closes the ledger.
func (d *Drainer) Stop() { d.runner.Stop() }

func (d *Drainer) run(ctx context.Context) error {
	defer func() {
		if d.closeFn != nil {
			d.closeFn()
		}
	}()
	timer := d.clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		}
		if err := d.round(ctx); err != nil && ctx.Err() == nil {
			d.metrics.Errors.Inc()
			d.log.Warn("ledger drain failed; retrying next round", "err", err)
		}
		timer.Reset(d.cfg.Interval)
	}
}

// round samples the backlog, then drains batches until one comes back
// short.
func (d *Drainer) round(ctx context.Context) error {
	n, age, err := ledgerpending.Backlog(ctx, d.pool)
	if err != nil {
		return err
	}
	d.metrics.Pending.Set(float64(n))
	d.metrics.Lag.Set(age.Seconds())
	if n == 0 {
		return nil
	}
	for ctx.Err() == nil {
		want := d.claimSize()
		got, err := d.batch(ctx, want)
		if err != nil {
			return err
		}
		if got < want {
			return nil
		}
	}
	return nil
}

// claimSize is how many rows the next batch claims: BatchSize, or what the
// throttle lets through in half of BatchTimeout when that is fewer, so the
// batch's writes end well within its transaction.
func (d *Drainer) claimSize() int {
	if d.cfg.Throttle == nil {
		return d.cfg.BatchSize
	}
	fit := int(d.cfg.Throttle.Rate() * d.cfg.BatchTimeout.Seconds() / 2)
	return max(1, min(d.cfg.BatchSize, fit))
}

// batch drains one transaction's worth and reports how many rows it
// claimed.
func (d *Drainer) batch(ctx context.Context, size int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.BatchTimeout)
	defer cancel()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledgerdrain: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := ledgerpending.Claim(ctx, tx, size)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, nil
	}
	l, err := d.open(ctx)
	if err != nil {
		return 0, err
	}
	dropped, err := d.write(ctx, l, rows)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("ledgerdrain: commit: %w", err)
	}
	d.metrics.Drained.Add(float64(len(rows) - dropped))
	d.metrics.Dropped.Add(float64(dropped))
	return len(rows), nil
}

func (d *Drainer) open(ctx context.Context) (Ledger, error) {
	if d.ledger != nil {
		return d.ledger, nil
	}
	l, closeFn, err := d.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("ledgerdrain: dial ledger: %w", err)
	}
	d.ledger, d.closeFn = l, closeFn
	return l, nil
}

// write records every row, at most Concurrency at once. It fails if any
// write fails for a reason worth retrying; rows the ledger refuses as
// invalid are logged and counted as dropped.
func (d *Drainer) write(ctx context.Context, l Ledger, rows []ledgerpending.Pending) (dropped int, err error) {
	if gl, ok := l.(GroupLedger); ok {
		return d.writeMany(ctx, gl, rows)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, d.cfg.Concurrency)
	)
	for _, p := range rows {
		if err := d.take(ctx, 1); err != nil {
			wg.Wait()
			return dropped, err
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := d.clk.Now()
			err := l.Record(ctx, p.ExecutionAttempt())
			d.done(1, d.clk.Now().Sub(t0), err)
			switch {
			case err == nil, errors.Is(err, ledger.ErrFenced):
				// ErrFenced: the row is stored; a worker recorded the same
				// attempt under a lease, and readers show ours as FENCED.
				return
			case errors.Is(err, ledger.ErrInvalidAttempt):
				d.log.Error("ledger refused a pending row; dropping it", "id", p.ID, "execution_id", p.ExecutionID, "err", err)
				mu.Lock()
				dropped++
				mu.Unlock()
			default:
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return dropped, first
}

// writeMany is write through RecordMany: the batch's rows share Cassandra
// batches by partition instead of costing a write and a fence read each
// (a job deleted with thousands of firings staged leaves thousands of
// rows). They are written as held, without the fence check: the check
// only tells the caller ErrFenced, which the drainer takes as written
// anyway, and readers decide FENCED from the fences stored.
func (d *Drainer) writeMany(ctx context.Context, l GroupLedger, rows []ledgerpending.Pending) (dropped int, err error) {
	recs := make([]ledger.Rec, len(rows))
	for i, p := range rows {
		recs[i] = ledger.Rec{Attempt: p.ExecutionAttempt(), Held: true}
	}
	// In turns of at most the throttle's burst, each granted before it
	// is written; a failed turn ends the batch (it is rolled back).
	for start := 0; start < len(recs); {
		n := len(recs) - start
		if d.cfg.Throttle != nil {
			got, terr := d.cfg.Throttle.Take(ctx, n, 0)
			if terr != nil {
				return dropped, fmt.Errorf("ledgerdrain: throttle: %w", terr)
			}
			n = got
		}
		t0 := d.clk.Now()
		errs := l.RecordMany(ctx, recs[start:start+n])
		var failed error
		for i, e := range errs {
			switch {
			case e == nil, errors.Is(e, ledger.ErrFenced):
			case errors.Is(e, ledger.ErrInvalidAttempt):
				row := rows[start+i]
				d.log.Error("ledger refused a pending row; dropping it", "id", row.ID, "execution_id", row.ExecutionID, "err", e)
				dropped++
			case failed == nil:
				failed = e
			}
		}
		d.done(n, d.clk.Now().Sub(t0), failed)
		if failed != nil {
			return dropped, failed
		}
		start += n
	}
	return dropped, nil
}

// take waits for the throttle's turn for n records (none without one).
func (d *Drainer) take(ctx context.Context, n int) error {
	if d.cfg.Throttle == nil {
		return nil
	}
	if _, err := d.cfg.Throttle.Take(ctx, n, 0); err != nil {
		return fmt.Errorf("ledgerdrain: throttle: %w", err)
	}
	return nil
}

// done tells the throttle how a write of n records went: refusals of the
// record (fenced, invalid) are not failures of the ledger.
func (d *Drainer) done(n int, took time.Duration, err error) {
	if d.cfg.Throttle == nil {
		return
	}
	if errors.Is(err, ledger.ErrFenced) || errors.Is(err, ledger.ErrInvalidAttempt) {
		err = nil
	}
	d.cfg.Throttle.Done(n, took, err)
}
