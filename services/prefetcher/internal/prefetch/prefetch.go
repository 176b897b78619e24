// Package prefetch is the prefetcher's loop: while this process holds a
// leadership term, it stages every slot due within the window, tick after
// tick, until the term ends. Service works the terms of the single
// election; Ranges works the terms of partition ranges that a
// rangeleader.Coordinator hands out, several at once, each over its own
// partitions and under its own fence (ranges.go).
//
// Terms are handled one at a time. A term's work runs under a context that
// ends with the term (the elector cancels it on any doubt about the
// ZooKeeper session), so an in-flight transaction is cancelled and rolled
// back when leadership is lost; the epoch check in Postgres catches
// anything that slips past (a process paused between its check and its
// write), and a fenced term does no more work until the elector hands out
// a new one.
package prefetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// Terms is the part of the elector the loop uses.
type Terms interface {
	Terms() <-chan leader.Term
}

// Stager runs one staging transaction; *stage.Store implements it.
type Stager interface {
	StageBatch(ctx context.Context, o stage.Options) (stage.Result, error)
}

// Config of the loop.
type Config struct {
	// Election names the election (its ZooKeeper path), the key of its
	// leader_epochs row.
	Election string
	// NodeID identifies this process in leader_epochs and logs.
	NodeID string
	// Window: jobs with a slot due up to now()+Window are claimed.
	Window time.Duration
	// Chunk: a claimed job's slots are staged up to now()+Window+Chunk, so
	// a frequent job is claimed once per chunk, not on every tick.
	Chunk time.Duration
	// Tick between passes; wake-ups (new jobs, a new term) come sooner.
	Tick time.Duration
	// BatchSize is the number of jobs per transaction.
	BatchSize int
	// MisfireThreshold: slots older than now() minus this are misfires.
	MisfireThreshold time.Duration
	// MaxSlotsPerJob bounds one job's slots per transaction.
	MaxSlotsPerJob int
	// MaxSkipRecords is how many skipped slots of one job one pass records
	// in the ledger one by one; older ones share a summary row.
	MaxSkipRecords int
	// CatchUpRate is the platform-wide release rate of catch-up firings,
	// per second; zero releases them at once.
	CatchUpRate float64
	// FillStep fills a window far behind in the order its slots come due,
	// this far at a time (stage.Options.Step); zero: job by job.
	FillStep time.Duration
}

// Validate reports every problem, named by the flag that sets it.
func (c Config) Validate() error {
	var errs []error
	if c.Election == "" {
		errs = append(errs, errors.New("election-path: must not be empty"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("node-id: must not be empty"))
	}
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window: must be positive, got %s", c.Window))
	}
	if c.Chunk < 0 || c.Chunk > 24*time.Hour {
		errs = append(errs, fmt.Errorf("chunk: must be in [0, 24h], got %s", c.Chunk))
	}
	if c.Tick <= 0 || c.Tick >= c.Window {
		errs = append(errs, fmt.Errorf("tick: must be positive and shorter than the window (%s), got %s", c.Window, c.Tick))
	}
	if c.BatchSize < 1 || c.BatchSize > 100_000 {
		errs = append(errs, fmt.Errorf("batch-size: must be in [1, 100000], got %d", c.BatchSize))
	}
	if c.MisfireThreshold < 0 {
		errs = append(errs, fmt.Errorf("misfire-threshold: must not be negative, got %s", c.MisfireThreshold))
	}
	if c.MaxSlotsPerJob < 1 {
		errs = append(errs, fmt.Errorf("max-slots-per-job: must be positive, got %d", c.MaxSlotsPerJob))
	}
	if c.MaxSkipRecords < 0 || c.MaxSkipRecords > 100_000 {
		errs = append(errs, fmt.Errorf("skip-records-per-job: must be in [0, 100000], got %d", c.MaxSkipRecords))
	}
	if c.FillStep < 0 || c.FillStep > time.Hour {
		errs = append(errs, fmt.Errorf("fill-step: must be in [0, 1h], got %s", c.FillStep))
	}
	if math.IsNaN(c.CatchUpRate) || c.CatchUpRate < 0 || c.CatchUpRate > 1_000_000 {
		errs = append(errs, fmt.Errorf("catch-up-rate: must be in [0, 1000000] firings per second, got %v", c.CatchUpRate))
	}
	return errors.Join(errs...)
}

// TermTask is leader-only work beside staging (the retention sweep): it
// runs for as long as a term lasts and must return once ctx ends. The loop
// owns its goroutine and waits for it before the term is over.
type TermTask interface {
	RunTerm(ctx context.Context, term leader.Term)
}

// Service is the prefetch loop; a lifecycle.Service.
type Service struct {
	cfg     Config
	terms   Terms
	stager  Stager
	wake    <-chan struct{}
	log     *slog.Logger
	clk     clock.Clock
	metrics *Metrics
	tasks   []TermTask
	runner  lifecycle.Runner
}

// New returns the loop. wake may be nil (ticks only). tasks run beside
// staging for each term.
func New(cfg Config, terms Terms, stager Stager, wake <-chan struct{}, log *slog.Logger, clk clock.Clock, m *Metrics, tasks ...TermTask) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m.CatchUpRate.Set(cfg.CatchUpRate)
	return &Service{cfg: cfg, terms: terms, stager: stager, wake: wake, log: log, clk: clk, metrics: m, tasks: tasks}, nil
}

// Start runs the loop in the background.
func (s *Service) Start(context.Context) error { return s.runner.Run(s.run) }

// Stop ends the current term's work (rolling back an in-flight
// transaction) and waits for it.
func (s *Service) Stop() { s.runner.Stop() }

// Done is closed if the loop returns on its own.
func (s *Service) Done() <-chan struct{} { return s.runner.Done() }

// Err is why the loop returned on its own, if it did (lifecycle.Watched).
func (s *Service) Err() error { return s.runner.Err() }

var _ lifecycle.Watched = (*Service)(nil)

func (s *Service) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case term := <-s.terms.Terms():
			s.lead(ctx, term)
		}
	}
}

// lead works one term of the single election until it ends (or the
// service stops).
func (s *Service) lead(ctx context.Context, term leader.Term) {
	s.work(ctx, termWork{
		term: term, election: s.cfg.Election, rate: s.cfg.CatchUpRate,
		tasks: true, wake: s.wake, gauges: true, log: s.log,
	})
}

// termWork is what one term stages: the single leader's (every partition)
// or one range leader's.
type termWork struct {
	term     leader.Term
	election string // the leader_epochs row that fences it
	// partitions limits the claim (nil: all).
	partitions *stage.Partitions
	// keepCursor keeps the catch-up cursor in the election's row.
	keepCursor bool
	// rate is this term's share of the catch-up release rate.
	rate float64
	// tasks: run the term tasks (retention) beside staging.
	tasks bool
	wake  <-chan struct{}
	// gauges: set the single leader's leader and epoch gauges.
	gauges bool
	log    *slog.Logger
}

// work stages for one term until it ends (or the service stops).
func (s *Service) work(ctx context.Context, w termWork) {
	term := w.term
	if term.Ctx.Err() != nil {
		return // ended before we got to it
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(term.Ctx, func() { cancel(context.Cause(term.Ctx)) })
	defer stop()

	log := w.log.With("epoch", term.Epoch)
	log.Info("prefetching as leader", "node", term.Node)
	if w.gauges {
		s.metrics.Leader.Set(1)
		s.metrics.Epoch.Set(float64(term.Epoch))
		defer s.metrics.Leader.Set(0)
	}

	// Term tasks stop with the term, or as soon as it is fenced; the term
	// is not over before they have returned.
	taskCtx, stopTasks := context.WithCancel(ctx)
	var tasks sync.WaitGroup
	defer tasks.Wait()
	defer stopTasks()
	if w.tasks {
		for _, t := range s.tasks {
			tasks.Go(func() { t.RunTerm(taskCtx, term) })
		}
	}

	// The catch-up release cursor lives as long as the term: every pass
	// continues the release schedule of the passes before it. A new term
	// of the single leader starts it at now(), so a handover in
	// mid-recovery can briefly release up to twice the rate (the old
	// schedule's tail is already in the outbox); a range leader starts
	// from the cursor its range's row keeps.
	opts := stage.Options{
		Election: w.election, Epoch: term.Epoch, Leader: s.cfg.NodeID,
		Window: s.cfg.Window, Chunk: s.cfg.Chunk, Limit: s.cfg.BatchSize,
		MisfireThreshold: s.cfg.MisfireThreshold, MaxSlotsPerJob: s.cfg.MaxSlotsPerJob,
		MaxSkipRecords: s.cfg.MaxSkipRecords, CatchUpRate: w.rate, Step: s.cfg.FillStep,
		Partitions: w.partitions, KeepCursor: w.keepCursor,
	}
	timer := s.clk.NewTimer(0) // a new leader stages at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("stopped prefetching", "cause", context.Cause(ctx))
			return
		case <-timer.C():
		case <-w.wake:
		}
		err := s.pass(ctx, &opts, log)
		switch {
		case errors.Is(err, stage.ErrFenced):
			// A newer leader has written: ours is over whatever ZooKeeper
			// told us. Do nothing more until the elector ends this term.
			s.metrics.Fenced.Inc()
			if w.gauges {
				s.metrics.Leader.Set(0)
			}
			stopTasks()
			log.Warn("fenced by a newer leader epoch; standing by until the term ends")
			<-ctx.Done()
			log.Info("stopped prefetching", "cause", context.Cause(ctx))
			return
		case err != nil && ctx.Err() == nil:
			s.metrics.Errors.Inc()
			log.Error("prefetch pass failed; retrying next tick", "err", err)
		}
		timer.Reset(s.cfg.Tick)
	}
}

// pass stages batches until no due job is left (a batch that claimed
// fewer jobs than the batch size found the end). Each committed batch
// moves the catch-up release cursor in opts.
func (s *Service) pass(ctx context.Context, opts *stage.Options, log *slog.Logger) error {
	start := s.clk.Now()
	defer func() { s.metrics.TickDuration.Observe(s.clk.Now().Sub(start).Seconds()) }()
	for ctx.Err() == nil {
		res, err := s.stager.StageBatch(ctx, *opts)
		if err != nil {
			return err
		}
		opts.CatchUpCursor = res.CatchUpCursor
		s.metrics.observe(res)
		if res.Claimed > 0 {
			log.Debug("staged batch", "claimed", res.Claimed, "staged", res.Staged, "catch_up", res.CatchUp,
				"duplicates", res.Duplicates, "missed", res.Missed, "expired", res.Expired,
				"recorded", res.Recorded, "completed", res.Completed, "lag", res.Lag)
		}
		if res.CatchUp > 0 || res.Missed > 0 || res.Expired > 0 {
			log.Info("misfires handled", "catch_up", res.CatchUp, "skipped_policy", res.Missed,
				"skipped_expired", res.Expired, "recorded", res.Recorded, "release_until", res.CatchUpCursor)
		}
		if res.Completed > 0 {
			log.Info("completed jobs whose last slots were skipped", "jobs", res.Completed)
		}
		if res.Claimed < opts.Limit && !res.Stepped {
			return nil
		}
	}
	return nil
}
