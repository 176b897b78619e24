// Package procs sizes the worker's GOMAXPROCS to its load.
//
// Why the worker has its own: at a light, spread load — firings one at a
// time, a millisecond or more apart, the shape of most cron fleets between
// their whole minutes — every firing passes between goroutines several times
// (fire holder → executor → the HTTP transport's writer and reader →
// settler). With more than one P, each of those hand-offs wakes a sleeping
// thread for an idle P (a futex call and a spinning thread), and the process
// idles between firings, so the next firing pays it again. In the jittered
// benchmark that was about a quarter of the worker's CPU per firing. With one
// P the hand-offs stay on one thread. A herd or a burst, on the other hand,
// needs every core at once.
//
// So the Governor runs the worker at one P while it uses less than Low of a
// core on average over Calm, and at Max as soon as it uses more than High of
// its one core on average over Rise, or as soon as the fire holder releases
// a herd (Busy). It goes back to one P only after Calm without a herd and
// under Low. Averages, not single intervals: a garbage collection of a
// large heap is a burst of CPU that says nothing about the load. Changing GOMAXPROCS stops
// the world for tens of microseconds; with the hysteresis it happens a few
// times a minute at most.
package procs

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Config is the governor's policy.
type Config struct {
	// Max is the ceiling: the GOMAXPROCS the runtime chose at start (the
	// machine's or the container's CPU limit).
	Max int
	// Interval is how often the process's CPU time is read.
	Interval time.Duration
	// High is the share of its one core (0–1) the process may use on
	// average over Rise before the governor raises to Max.
	High float64
	// Rise is the span High is averaged over: long enough that one garbage
	// collection of a large heap does not count as load.
	Rise time.Duration
	// Low is the CPU (in cores), averaged over Calm, below which the
	// governor drops back to one P (unless a herd came within Calm).
	Low float64
	// Calm is the span Low is averaged over.
	Calm time.Duration
}

// DefaultConfig is the policy the worker runs with (Max filled in at start).
//
// Low is well above half of High on purpose: the same load costs more CPU
// at Max than at one P (the cross-thread wake-ups this package avoids;
// 0.33 against 0.28 of a core at jittered 1,000/s), so a Low close to what
// one P uses at that load would keep the worker at Max for good once a
// registration or a herd raised it. Between Low and High the hysteresis
// holds for any such ratio up to High/Low (1.33).
var DefaultConfig = Config{Interval: 100 * time.Millisecond, High: 0.6, Rise: time.Second, Low: 0.45, Calm: 10 * time.Second}

// Governor is a lifecycle.Service.
type Governor struct {
	cfg    Config
	clk    clock.Clock
	cpu    func() time.Duration
	set    func(int)
	logger *slog.Logger
	report func(int)

	busy   chan struct{}
	runner lifecycle.Runner
}

// Option configures a Governor.
type Option func(*Governor)

// WithCPU replaces the process CPU time reader (tests).
func WithCPU(f func() time.Duration) Option { return func(g *Governor) { g.cpu = f } }

// WithSetter replaces runtime.GOMAXPROCS (tests).
func WithSetter(f func(int)) Option { return func(g *Governor) { g.set = f } }

// WithReport calls f with the P count at start and after every change (the
// worker's gauge).
func WithReport(f func(int)) Option { return func(g *Governor) { g.report = f } }

// New returns a governor. With cfg.Max ≤ 1 it does nothing.
func New(cfg Config, clk clock.Clock, logger *slog.Logger, opts ...Option) *Governor {
	g := &Governor{
		cfg: cfg, clk: clk, logger: logger, cpu: processCPU,
		set:    func(n int) { runtime.GOMAXPROCS(n) },
		report: func(int) {},
		busy:   make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Busy tells the governor a herd is about to be fired: it raises to Max at
// once instead of after the next Interval. It never blocks.
func (g *Governor) Busy() {
	select {
	case g.busy <- struct{}{}:
	default:
	}
}

// Start runs the loop.
func (g *Governor) Start(context.Context) error {
	if g.cfg.Max <= 1 {
		g.report(max(g.cfg.Max, 1))
		return g.runner.Run(func(ctx context.Context) error { <-ctx.Done(); return nil })
	}
	return g.runner.Run(g.loop)
}

// Stop ends the loop and leaves GOMAXPROCS at Max.
func (g *Governor) Stop() { g.runner.Stop() }

// Done is closed when the loop has ended.
func (g *Governor) Done() <-chan struct{} { return g.runner.Done() }

func (g *Governor) loop(ctx context.Context) error {
	s := newState(g.cfg, g.clk.Now(), g.cpu())
	g.report(s.procs)
	defer func() {
		if s.procs != g.cfg.Max {
			g.set(g.cfg.Max)
			g.report(g.cfg.Max)
		}
	}()
	t := g.clk.NewTimer(g.cfg.Interval)
	defer t.Stop()
	apply := func(n int, why string) {
		if n == s.procs {
			return
		}
		g.set(n)
		g.report(n)
		g.logger.Debug("GOMAXPROCS changed", "from", s.procs, "to", n, "why", why)
		s.procs = n
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.busy:
			apply(s.herd(g.clk.Now()), "herd")
		case <-t.C():
			apply(s.observe(g.clk.Now(), g.cpu()), "load")
			t.Reset(g.cfg.Interval)
		}
	}
}

// state is the decision, apart from clocks and the runtime.
type state struct {
	cfg      Config
	procs    int
	lastHerd time.Time
	raisedAt time.Time
	samples  []sample // ring, oldest first from next
	next     int
	filled   bool
}

// sample is the process's CPU time used so far, read at at.
type sample struct {
	at  time.Time
	cpu time.Duration
}

func newState(cfg Config, now time.Time, cpu time.Duration) *state {
	n := int(cfg.Calm/cfg.Interval) + 2
	s := &state{cfg: cfg, procs: cfg.Max, lastHerd: now, raisedAt: now, samples: make([]sample, n)}
	s.add(sample{now, cpu})
	return s
}

func (s *state) add(x sample) {
	s.samples[s.next] = x
	s.next = (s.next + 1) % len(s.samples)
	if s.next == 0 {
		s.filled = true
	}
}

// mean is the CPU used (cores) from the latest sample at least span before
// the newest to the newest, and whether the samples reach back that far.
func (s *state) mean(span time.Duration) (float64, bool) {
	newest := s.samples[(s.next-1+len(s.samples))%len(s.samples)]
	count := s.next
	if s.filled {
		count = len(s.samples)
	}
	for k := 2; k <= count; k++ {
		old := s.samples[(s.next-k+len(s.samples))%len(s.samples)]
		if d := newest.at.Sub(old.at); d >= span {
			return float64(newest.cpu-old.cpu) / float64(d), true
		}
	}
	return 0, false
}

// herd: a herd is due now.
func (s *state) herd(now time.Time) int {
	s.lastHerd = now
	if s.procs != s.cfg.Max {
		s.raisedAt = now
	}
	return s.cfg.Max
}

// observe: the process has used cpu so far, read at now.
func (s *state) observe(now time.Time, cpu time.Duration) int {
	s.add(sample{now, cpu})
	if s.procs == 1 {
		if m, ok := s.mean(s.cfg.Rise); ok && m >= s.cfg.High {
			s.raisedAt = now
			return s.cfg.Max
		}
		return 1
	}
	if now.Sub(s.lastHerd) < s.cfg.Calm || now.Sub(s.raisedAt) < s.cfg.Calm {
		return s.procs
	}
	if m, ok := s.mean(s.cfg.Calm); ok && m < s.cfg.Low {
		return 1
	}
	return s.procs
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
