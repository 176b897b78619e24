// Package retention purges jobs that are finished with: completed jobs and
// soft-deleted jobs, once they have been so for the retention period
// (measured from updated_at for completed jobs, deleted_at for deleted
// ones, by the database clock). Their history stays in the Cassandra
// ledger (it expires on its own TTL), their audit rows stay in job_audit,
// and each purge appends one more audit row (actor system:prefetcher,
// action purge) saying when and why the job went. Dead letters are kept:
// the api lists and re-drives them independently of the job row.
//
// The sweep is leader work: whoever leads partition range 0 runs it, for
// each term of that range (RunTerm), and stops it with the term. It deletes in small transactions
// so it never holds many row locks or a long transaction on the hot jobs
// table, and skips rows someone else has locked (the api changing a job)
// until the next sweep. Purging is idempotent, so a deposed leader's
// last sweep overlapping a new one's first cannot purge or audit a job
// twice (the second DELETE finds the row gone).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
)

// Actor is the audit trail's name for the prefetcher.
const Actor = "system:prefetcher"

// Config of the sweep.
type Config struct {
	// Retention is how long a completed or deleted job is kept.
	Retention time.Duration
	// Interval between sweeps; a sweep purges batch after batch until one
	// comes back short.
	Interval time.Duration
	// BatchSize is the number of jobs purged per transaction.
	BatchSize int
}

// Validate reports every problem, named by the flag that sets it.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < time.Minute {
		errs = append(errs, fmt.Errorf("retention: must be at least 1m, got %s", c.Retention))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("retention-interval: must be positive, got %s", c.Interval))
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		errs = append(errs, fmt.Errorf("retention-batch-size: must be in [1, 10000], got %d", c.BatchSize))
	}
	return errors.Join(errs...)
}

// Metrics of the sweep.
type Metrics struct {
	Purged *prometheus.CounterVec
	Errors prometheus.Counter
}

// NewMetrics registers the sweep's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_prefetcher_jobs_purged_total", Help: "Jobs purged after the retention period, by the status they had (completed, deleted).",
		}, []string{"status"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_prefetcher_retention_errors_total", Help: "Retention sweeps that failed (retried next interval).",
		}),
	}
	reg.MustRegister(m.Purged, m.Errors)
	for _, s := range []string{firing.JobCompletedSQL, firing.JobDeletedSQL} {
		m.Purged.WithLabelValues(s)
	}
	return m
}

// Sweeper purges expired jobs; it is a prefetch.TermTask.
type Sweeper struct {
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	clk     clock.Clock
	metrics *Metrics
}

// New returns a sweeper over pool (whose search_path picks the schema).
func New(cfg Config, pool *pgxpool.Pool, log *slog.Logger, clk clock.Clock, m *Metrics) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg, pool: pool, log: log.With("component", "retention"), clk: clk, metrics: m}, nil
}

// RunTerm sweeps at once and then every Interval until ctx ends.
func (s *Sweeper) RunTerm(ctx context.Context, term rangeleader.Term) {
	log := s.log.With("epoch", term.Epoch)
	timer := s.clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		n, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.Errors.Inc()
			log.Warn("retention sweep failed; retrying next interval", "err", err)
		case n > 0:
			log.Info("purged jobs past their retention", "jobs", n, "retention", s.cfg.Retention)
		}
		timer.Reset(s.cfg.Interval)
	}
}

// purgeSQL deletes up to $2 jobs finished for longer than $1 seconds and
// appends their purge audit rows, in one statement. Without an index on
// (status, updated_at) the inner SELECT is a scan of jobs that stops at
// $2 matches; it runs once per interval, not per tick.
var purgeSQL = `
WITH gone AS (
  DELETE FROM jobs
   WHERE id IN (
     SELECT id FROM jobs
      WHERE (status = '` + firing.JobCompletedSQL + `' AND updated_at < now() - $1::float8 * interval '1 second')
         OR (status = '` + firing.JobDeletedSQL + `' AND COALESCE(deleted_at, updated_at) < now() - $1::float8 * interval '1 second')
      LIMIT $2
      FOR UPDATE SKIP LOCKED)
  RETURNING id, tenant, version, status, COALESCE(deleted_at, updated_at) AS since)
` + audittrail.InsertFrom(audittrail.KindJob) + `SELECT id, tenant, $3, 'purge', version,
       jsonb_build_object('status', status, 'since', since, 'retention', $4::text)
  FROM gone
RETURNING detail->>'status'`

// Sweep purges batch after batch until one comes back short, and returns
// how many jobs it purged.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		r, err := s.pool.Query(ctx, purgeSQL, s.cfg.Retention.Seconds(), s.cfg.BatchSize, Actor, s.cfg.Retention.String())
		if err != nil {
			return total, fmt.Errorf("retention: purge: %w", err)
		}
		statuses, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			return total, fmt.Errorf("retention: purge: %w", err)
		}
		for _, st := range statuses {
			s.metrics.Purged.WithLabelValues(st).Inc()
		}
		total += len(statuses)
		if len(statuses) < s.cfg.BatchSize {
			break
		}
	}
	return total, nil
}
