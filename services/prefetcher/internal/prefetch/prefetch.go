// Package prefetch is the prefetcher's loop: for each partition range
// this process leads (a rangeleader.Coordinator hands the terms out and
// runs Service.Work for each, several at once), it stages every slot of the
// range's partitions due within the window, tick after tick, until the
// term ends. A single leader is one range (--ranges 1): the same loop over
// all 256 partitions.
//
// A term's work runs under a context that ends with the term (the
// coordinator cancels it on any doubt about the ZooKeeper session), so an
// in-flight transaction is cancelled and rolled back when leadership is
// lost; the epoch check in Postgres, on the range's own leader_epochs row,
// catches anything that slips past (a process paused between its check and
// its write), and a fenced term does no more work until the coordinator
// ends it.
package prefetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// Stager runs one staging transaction; *stage.Store implements it.
type Stager interface {
	StageBatch(ctx context.Context, o stage.Options) (stage.Result, error)
}

// Config of the loop.
type Config struct {
	// Election is the range group's ZooKeeper path (--election-path).
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
// runs with range 0's term, for as long as the term lasts, and must return
// once ctx ends. Whoever leads range 0 runs it; the loop owns its goroutine
// and waits for it before the term is over.
type TermTask interface {
	RunTerm(ctx context.Context, term rangeleader.Term)
}

// ValidRanges reports whether the 256 partitions split into n equal
// ranges.
func ValidRanges(n int) bool {
	return n >= 1 && n <= firing.Partitions && firing.Partitions%n == 0
}

// Service is the prefetch loop; a lifecycle.Service. The coordinator runs
// Work for each range this process leads, in goroutines the coordinator
// owns; each stages only its range's partitions, fenced by the range's own
// leader_epochs row (keyed by the range's lock path), with the range's
// share of the catch-up rate and a release cursor kept in that row.
// Service itself owns one goroutine, which hands each job notification to
// every range's loop. Start it before the coordinator and stop it after.
type Service struct {
	cfg     Config
	ranges  int
	stager  Stager
	wake    <-chan struct{}
	log     *slog.Logger
	clk     clock.Clock
	metrics *Metrics
	tasks   []TermTask
	runner  lifecycle.Runner

	mu      sync.Mutex
	subs    map[int]chan struct{}
	working int // ranges staging now (led and not fenced): the leader gauge
}

// New returns the loop for ranges ranges (a divisor of 256; 1: a single
// leader for every partition). wake may be nil (ticks only). The term
// tasks (retention) run with range 0's term only: they work on the whole
// table and one runner is enough.
func New(cfg Config, ranges int, stager Stager, wake <-chan struct{}, log *slog.Logger, clk clock.Clock, m *Metrics, tasks ...TermTask) (*Service, error) {
	if !ValidRanges(ranges) {
		return nil, fmt.Errorf("ranges: must divide %d partitions, got %d", firing.Partitions, ranges)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m.CatchUpRate.Set(cfg.CatchUpRate)
	return &Service{cfg: cfg, ranges: ranges, stager: stager, wake: wake, log: log, clk: clk, metrics: m, tasks: tasks,
		subs: map[int]chan struct{}{}}, nil
}

// Start runs the notification fan-out.
func (s *Service) Start(context.Context) error { return s.runner.Run(s.fanOut) }

// Stop stops the fan-out. Range work is stopped by the coordinator.
func (s *Service) Stop() { s.runner.Stop() }

func (s *Service) fanOut(ctx context.Context) error {
	if s.wake == nil {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			s.mu.Lock()
			for _, ch := range s.subs {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
		}
	}
}

// Work is rangeleader.Config.Work: it stages range t.Range until ctx ends
// (or the range is fenced, then idles until ctx ends).
func (s *Service) Work(ctx context.Context, t rangeleader.Term) {
	if ctx.Err() != nil {
		return // ended before we got to it
	}
	wake := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[t.Range] = wake
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, t.Range)
		s.mu.Unlock()
	}()
	lo, hi := rangeleader.Bounds(t.Range, s.ranges, firing.Partitions)
	s.work(ctx, t, &stage.Partitions{Lo: lo, Hi: hi}, wake,
		s.log.With("range", t.Range, "partitions", fmt.Sprintf("%d-%d", lo, hi)))
}

// setWorking moves the leader gauge: 1 while any range of this process
// stages (led and not fenced).
func (s *Service) setWorking(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.working += delta
	if s.working > 0 {
		s.metrics.Leader.Set(1)
	} else {
		s.metrics.Leader.Set(0)
	}
}

// work stages range t's partitions until ctx ends.
func (s *Service) work(ctx context.Context, t rangeleader.Term, parts *stage.Partitions, wake <-chan struct{}, log *slog.Logger) {
	log = log.With("epoch", t.Epoch)
	log.Info("prefetching as range leader", "lock", t.Lock)
	s.metrics.Epoch.Set(float64(t.Epoch))
	s.setWorking(1)
	working := true
	defer func() {
		if working {
			s.setWorking(-1)
		}
	}()

	// Term tasks stop with the term, or as soon as it is fenced; the term
	// is not over before they have returned.
	taskCtx, stopTasks := context.WithCancel(ctx)
	var tasks sync.WaitGroup
	defer tasks.Wait()
	defer stopTasks()
	if t.Range == 0 {
		for _, task := range s.tasks {
			tasks.Go(func() { task.RunTerm(taskCtx, t) })
		}
	}

	// The catch-up release cursor lives in the range's leader_epochs row
	// (KeepCursor): a new term continues the release schedule its range's
	// last leader left, so a handover in mid-recovery does not release a
	// second schedule on top of the first. Within a term, every pass
	// continues the cursor of the passes before it.
	opts := stage.Options{
		Election: t.Lock, Epoch: t.Epoch, Leader: s.cfg.NodeID,
		Window: s.cfg.Window, Chunk: s.cfg.Chunk, Limit: s.cfg.BatchSize,
		MisfireThreshold: s.cfg.MisfireThreshold, MaxSlotsPerJob: s.cfg.MaxSlotsPerJob,
		MaxSkipRecords: s.cfg.MaxSkipRecords, CatchUpRate: s.cfg.CatchUpRate / float64(s.ranges), Step: s.cfg.FillStep,
		Partitions: parts, KeepCursor: true,
	}
	timer := s.clk.NewTimer(0) // a new leader stages at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("stopped prefetching", "cause", context.Cause(ctx))
			return
		case <-timer.C():
		case <-wake:
		}
		err := s.pass(ctx, &opts, log)
		switch {
		case errors.Is(err, stage.ErrFenced):
			// A newer leader of the range has written: ours is over
			// whatever ZooKeeper told us. Do nothing more until the
			// coordinator ends this term.
			s.metrics.Fenced.Inc()
			s.setWorking(-1)
			working = false
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
