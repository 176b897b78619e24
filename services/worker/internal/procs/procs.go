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
// core, and at Max as soon as it uses more than High of its one core over an
// Interval, or as soon as the fire holder releases a herd (Busy). It goes
// back to one P only after Calm without either. Changing GOMAXPROCS stops
// the world for tens of microseconds; with the hysteresis it happens a few
// times a minute at most.
package procs

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/lifecycle"
)

// Config is the governor's policy.
type Config struct {
	// Max is the ceiling: the GOMAXPROCS the runtime chose at start (the
	// machine's or the container's CPU limit).
	Max int
	// Interval is how often the process's CPU time is read.
	Interval time.Duration
	// High is the share of its one core (0–1) the process may use over an
	// Interval before the governor raises to Max.
	High float64
	// Low is the CPU (in cores) below which a busy period counts as calm.
	Low float64
	// Calm is how long the process must stay below Low, with no herd, before
	// the governor drops back to one P.
	Calm time.Duration
}

// DefaultConfig is the policy the worker runs with (Max filled in at start).
var DefaultConfig = Config{Interval: 100 * time.Millisecond, High: 0.5, Low: 0.25, Calm: 10 * time.Second}

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
	s := state{cfg: g.cfg, procs: g.cfg.Max, calmSince: g.clk.Now()}
	g.report(s.procs)
	defer func() {
		if s.procs != g.cfg.Max {
			g.set(g.cfg.Max)
			g.report(g.cfg.Max)
		}
	}()
	lastCPU, lastAt := g.cpu(), g.clk.Now()
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
			now, used := g.clk.Now(), g.cpu()
			cores := 0.0
			if d := now.Sub(lastAt); d > 0 {
				cores = float64(used-lastCPU) / float64(d)
			}
			lastCPU, lastAt = used, now
			apply(s.observe(now, cores), "load")
			t.Reset(g.cfg.Interval)
		}
	}
}

// state is the decision, apart from clocks and the runtime.
type state struct {
	cfg       Config
	procs     int
	calmSince time.Time
}

// herd: a herd is due now.
func (s *state) herd(now time.Time) int {
	s.calmSince = now
	return s.cfg.Max
}

// observe: the process used cores over the last interval, ending at now.
func (s *state) observe(now time.Time, cores float64) int {
	if s.procs == 1 {
		if cores >= s.cfg.High {
			s.calmSince = now
			return s.cfg.Max
		}
		return 1
	}
	if cores >= s.cfg.Low {
		s.calmSince = now
		return s.procs
	}
	if now.Sub(s.calmSince) >= s.cfg.Calm {
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
