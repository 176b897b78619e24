// Package completer completes the jobs whose last slot settled. The settle
// stage does not complete a job itself: it queues it (a job_completions row,
// jobcompletion.Queue, before the attempt's markers, so no crash loses it)
// and wakes the completer, which takes queued rows a batch at a time
// (jobcompletion.CompleteQueued) and completes their jobs, at most Rate a
// second.
//
// Why a queue and a pace: completing a job is a non-HOT update of jobs
// (its status is in two of its indexes), touching all ten, with an audit
// row and the forecast's change row. When 100,000 one-off jobs fire at one instant, those
// completions were the bulk of Postgres's work while the platform fired
// them, and the firings waited for the cores. The queue's insert is a small
// fraction of that; the completions follow the burst at the completer's
// pace. A job whose last slot settled on a quiet platform is completed at
// once: the queueing wakes the completer, and a batch is paid for in the
// pace's tokens after it is taken, not before.
//
// Every worker runs one; the rows are shared (SKIP LOCKED), so a worker's
// queued jobs are completed by the others if it dies. Rate is per worker.
package completer

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Store takes queued rows; *PG implements it.
type Store interface {
	// CompleteQueued takes up to limit queued rows and completes their
	// jobs.
	CompleteQueued(ctx context.Context, limit int) (jobcompletion.Taken, error)
}

// Config tunes a completer.
type Config struct {
	// Rate is the most jobs completed per second (--completion-rate).
	Rate float64
	// Batch is the most rows one statement takes (and the pace's burst).
	Batch int
	// Interval is how often the queue is looked at without a wake: rows
	// queued by another worker, or left by a failed statement.
	Interval time.Duration
	// Timeout bounds one statement.
	Timeout time.Duration
}

// DefaultRate is Config.Rate's default: about a tenth of a core of
// Postgres on the 2-core development machine, so a burst's completions
// neither hold up its firings nor lag it by more than a couple of minutes.
const DefaultRate = 1000

func (c *Config) defaults() {
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
}

// Metrics observes a completer; nil fields are skipped.
type Metrics struct {
	// Completed counts a job completed, by the outcome its last slot
	// ended with.
	Completed func(outcome string)
	// Failed counts a statement that failed (its rows stay queued).
	Failed func()
	// Waited is told, after each statement, how long the oldest row it
	// took had been queued (0: the queue was empty): how far the
	// completions are behind the firings.
	Waited func(time.Duration)
}

// Completer is the loop; it is a lifecycle.Service.
type Completer struct {
	cfg     Config
	store   Store
	m       Metrics
	clk     clock.Clock
	logger  *slog.Logger
	limiter *rate.Limiter
	wake    chan struct{}
	runner  lifecycle.Runner
}

// New returns a completer; Start runs it. clk times its looks at the queue
// (the pace is the limiter's, on the wall clock).
func New(cfg Config, store Store, m Metrics, clk clock.Clock, logger *slog.Logger) *Completer {
	cfg.defaults()
	return &Completer{cfg: cfg, store: store, m: m, clk: clk, logger: logger,
		limiter: rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Batch), wake: make(chan struct{}, 1)}
}

// Wake tells the completer rows were queued. It never blocks.
func (c *Completer) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start runs the loop.
func (c *Completer) Start(context.Context) error { return c.runner.Run(c.loop) }

// Stop stops the loop; queued rows wait for the next completer.
func (c *Completer) Stop() { c.runner.Stop() }

// Done and Err make the completer lifecycle.Watched.
func (c *Completer) Done() <-chan struct{} { return c.runner.Done() }

// Err is the loop's error, once Done.
func (c *Completer) Err() error { return c.runner.Err() }

func (c *Completer) loop(ctx context.Context) error {
	t := c.clk.NewTimer(c.cfg.Interval)
	defer t.Stop()
	for {
		c.drain(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-t.C():
		}
		t.Reset(c.cfg.Interval)
	}
}

// drain takes batches until one comes back short, each paid for in the
// limiter's tokens before the next is taken, so the pace is Rate over any
// second and a lone job is completed at once. A failed statement ends the
// round (the rows stay queued for the next).
func (c *Completer) drain(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		taken, err := c.store.CompleteQueued(sctx, c.cfg.Batch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Warn("could not complete queued jobs; they stay queued", "err", err)
				if c.m.Failed != nil {
					c.m.Failed()
				}
			}
			return
		}
		if c.m.Waited != nil {
			c.m.Waited(taken.Waited)
		}
		if c.m.Completed != nil {
			for _, o := range taken.Outcomes {
				c.m.Completed(o)
			}
		}
		if taken.Rows > 0 {
			if err := c.limiter.WaitN(ctx, taken.Rows); err != nil {
				return
			}
		}
		if taken.Rows < c.cfg.Batch {
			return
		}
	}
}

// PG is the Store over the platform's database.
type PG struct {
	pool  jobcompletion.Querier
	actor string
}

// NewPG returns a Store completing as actor (the audit trail's name for
// the worker).
func NewPG(pool jobcompletion.Querier, actor string) *PG { return &PG{pool: pool, actor: actor} }

// CompleteQueued implements Store: one statement, atomic on its own.
func (p *PG) CompleteQueued(ctx context.Context, limit int) (jobcompletion.Taken, error) {
	return jobcompletion.CompleteQueued(ctx, p.pool, p.actor, limit)
}
