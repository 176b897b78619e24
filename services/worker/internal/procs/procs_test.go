package procs

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

var t0 = time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)

func TestStateAveragesOverSpans(t *testing.T) {
	cfg := Config{Max: 4, Interval: 100 * time.Millisecond, High: 0.6, Rise: time.Second, Low: 0.3, Calm: 10 * time.Second}
	var cpu time.Duration
	now := t0
	s := newState(cfg, now, cpu)
	// run feeds the state cores of CPU for d, an interval at a time, and
	// returns the last decision.
	run := func(d time.Duration, cores float64) int {
		got := s.procs
		for end := now.Add(d); now.Before(end); {
			now = now.Add(cfg.Interval)
			cpu += time.Duration(cores * float64(cfg.Interval))
			got = s.observe(now, cpu)
			s.procs = got
		}
		return got
	}
	// Busy at Max, then calm: lowered only once the 10 s average is under Low.
	if got := run(5*time.Second, 1.2); got != 4 {
		t.Fatalf("busy at Max: %d procs, want 4", got)
	}
	if got := run(8*time.Second, 0.1); got != 4 {
		t.Fatalf("8 s of calm after 5 s of load: %d procs, want 4 (the 10 s average is still over 0.3)", got)
	}
	if got := run(3*time.Second, 0.1); got != 1 {
		t.Fatalf("11 s of calm: %d procs, want 1", got)
	}
	// At one P a burst shorter than Rise (a garbage collection) is not load.
	if got := run(300*time.Millisecond, 1.0); got != 1 {
		t.Fatalf("a 300 ms burst at one P: %d procs, want 1", got)
	}
	if got := run(2*time.Second, 0.2); got != 1 {
		t.Fatalf("0.2 of a core at one P: %d procs, want 1", got)
	}
	// A load over High for Rise raises.
	if got := run(1200*time.Millisecond, 0.9); got != 4 {
		t.Fatalf("0.9 of a core for 1.2 s at one P: %d procs, want 4", got)
	}
	// Raised: it stays at least Calm, even with no load at all.
	if got := run(9*time.Second, 0); got != 4 {
		t.Fatalf("9 s after raising: %d procs, want 4", got)
	}
	if got := run(2*time.Second, 0); got != 1 {
		t.Fatalf("11 s after raising, idle: %d procs, want 1", got)
	}
	// A herd raises at once and restarts the calm period.
	if got := s.herd(now); got != 4 {
		t.Fatalf("herd: %d procs, want 4", got)
	}
	s.procs = 4
	if got := run(9500*time.Millisecond, 0); got != 4 {
		t.Fatalf("9.5 s after a herd: %d procs, want 4", got)
	}
	if got := run(time.Second, 0); got != 1 {
		t.Fatalf("10.5 s after a herd: %d procs, want 1", got)
	}
}

// TestDefaultConfigSettlesAtOnePUnderASteadyLoad: the measured shape of a
// jittered 1,000/s on the 2-core machine — 0.28 of a core at one P, 0.33 at
// two — must settle at one P once a registration's burst raised it, and
// stay there; only a load over High raises it again.
func TestDefaultConfigSettlesAtOnePUnderASteadyLoad(t *testing.T) {
	cfg := DefaultConfig
	cfg.Max = 2
	var cpu time.Duration
	now := t0
	s := newState(cfg, now, cpu)
	run := func(d time.Duration) int {
		for end := now.Add(d); now.Before(end); {
			now = now.Add(cfg.Interval)
			cores := 0.28
			if s.procs > 1 {
				cores = 0.33
			}
			cpu += time.Duration(cores * float64(cfg.Interval))
			s.procs = s.observe(now, cpu)
		}
		return s.procs
	}
	if got := run(15 * time.Second); got != 1 {
		t.Fatalf("15 s of 0.33 of a core at two P: %d procs, want 1", got)
	}
	if got := run(60 * time.Second); got != 1 {
		t.Fatalf("a minute of 0.28 of a core at one P: %d procs, want 1 (no flapping)", got)
	}
}

// governorRun drives a Governor's loop on a fake clock with a fake CPU
// meter, recording every GOMAXPROCS it sets and reports.
type governorRun struct {
	t       *testing.T
	clk     *clock.Fake
	g       *Governor
	cpu     atomic.Int64 // nanoseconds used so far
	reports chan int
	mu      sync.Mutex
	sets    []int
}

func startGovernor(t *testing.T, cfg Config) *governorRun {
	t.Helper()
	r := &governorRun{t: t, clk: clock.NewFake(t0), reports: make(chan int, 64)}
	r.g = New(cfg, r.clk, slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithCPU(func() time.Duration { return time.Duration(r.cpu.Load()) }),
		WithSetter(func(n int) { r.mu.Lock(); r.sets = append(r.sets, n); r.mu.Unlock() }),
		WithReport(func(n int) { r.reports <- n }))
	if err := r.g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.g.Stop)
	return r
}

// until advances the clock an interval at a time, using cores of CPU per
// interval, until the governor reports want; it fails after limit of fake
// time.
func (r *governorRun) until(want int, cores float64, limit time.Duration) time.Duration {
	r.t.Helper()
	step := r.g.cfg.Interval
	var spent time.Duration
	for spent <= limit {
		select {
		case got := <-r.reports:
			if got != want {
				r.t.Fatalf("governor reported %d procs after %v, want %d", got, spent, want)
			}
			return spent
		case <-time.After(2 * time.Millisecond):
		}
		r.cpu.Add(int64(cores * float64(step)))
		r.clk.Advance(step)
		spent += step
	}
	r.t.Fatalf("governor did not report %d procs within %v of fake time", want, limit)
	return 0
}

func TestGovernorFollowsLoad(t *testing.T) {
	cfg := Config{Max: 2, Interval: 100 * time.Millisecond, High: 0.5, Rise: 300 * time.Millisecond, Low: 0.25, Calm: 2 * time.Second}
	r := startGovernor(t, cfg)
	if got := <-r.reports; got != 2 {
		t.Fatalf("at start: reported %d procs, want Max 2", got)
	}
	// A light load: one P once Calm has passed, not before.
	if took := r.until(1, 0.1, 10*time.Second); took < cfg.Calm {
		t.Fatalf("lowered after %v of calm, want at least %v", took, cfg.Calm)
	}
	// A load that fills most of the one P: back to Max within an interval or two.
	if took := r.until(2, 0.9, time.Second); took > 3*cfg.Interval {
		t.Fatalf("raised %v after the load rose, want within %v", took, 3*cfg.Interval)
	}
	r.until(1, 0.1, 10*time.Second)
	// A herd: raised without waiting for the CPU meter.
	r.g.Busy()
	select {
	case got := <-r.reports:
		if got != 2 {
			t.Fatalf("after Busy: reported %d, want 2", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Busy did not raise GOMAXPROCS")
	}
	// Stopping at one P leaves the process at Max.
	r.until(1, 0.1, 10*time.Second)
	r.g.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if last := r.sets[len(r.sets)-1]; last != 2 {
		t.Fatalf("after Stop the last GOMAXPROCS set was %d, want Max 2 (sets %v)", last, r.sets)
	}
}

func TestGovernorIdleAtOneProc(t *testing.T) {
	r := startGovernor(t, Config{Max: 1, Interval: 100 * time.Millisecond, High: 0.5, Rise: 300 * time.Millisecond, Low: 0.25, Calm: time.Second})
	if got := <-r.reports; got != 1 {
		t.Fatalf("reported %d, want 1", got)
	}
	r.g.Busy()
	r.clk.Advance(time.Minute)
	r.g.Stop()
	if len(r.sets) != 0 {
		t.Fatalf("with Max 1 the governor set GOMAXPROCS %v, want never", r.sets)
	}
}

func TestProcessCPUGrows(t *testing.T) {
	before := processCPU()
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if after := processCPU(); after <= before {
		t.Fatalf("process CPU did not grow over 200 ms of spinning (%v → %v, %d loops)", before, after, x)
	}
}
