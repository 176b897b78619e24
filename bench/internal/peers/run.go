package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"

	"github.com/sundialhq/sundial/bench/internal/bench"
)

// Systems names the systems compared, in the order each rate runs them.
var Systems = []string{"floor", "river", "asynq", "sundial"}

// SundialFunc runs Sundial's own benchmark scenario for one rate and shape
// (bench's herd or steady scenario on a deployment of its own) and returns
// its figures.
type SundialFunc func(ctx context.Context, shape Shape, rate int, duration time.Duration) (*bench.Figures, []string, error)

// Config selects and sizes a comparison.
type Config struct {
	Systems  []string
	Shapes   []Shape
	Rates    []int
	Duration time.Duration // measured window of each run
	// Warmup runs each in-process peer before its window opens (River
	// elects its leader, connections open).
	Warmup time.Duration
	// Deadline is how long after the window a firing may still arrive
	// before it counts as lost.
	Deadline time.Duration
	// Grace and MaxP99 decide whether a run held: nothing lost, p99 at most
	// MaxP99 and no firing later than Grace.
	Grace, MaxP99 time.Duration
	Workers       int           // concurrent deliveries of every peer (Sundial's --executors)
	Poll          time.Duration // the peers' poll intervals
	RedisDB       int           // asynq's Redis database number
	Infra         harness.Infra
	InfraDir      string
	Logger        *slog.Logger
	Clock         clock.Clock
	Sundial       SundialFunc
}

// Row is one system at one rate and shape.
type Row struct {
	System   string
	Shape    Shape
	Rate     int
	Duration time.Duration
	Expected int
	Lost     int
	// Skipped are firings Sundial's workers skipped by their jobs' misfire
	// policy (recorded, not lost); the peers have no such policy.
	Skipped int
	// Duplicates: firings that arrived more than once (for Sundial, slots
	// that arrived as two executions plus second deliveries of one).
	Duplicates int
	Unexpected int
	Early      int // firings that arrived before their due instant
	Lateness   harness.Summary
	Held       bool
	Cores      map[string]float64
	Setting    string
	Details    []string
}

// CPU is the row's CPU per firing, machine then per process (and, for
// Sundial, whose services are processes of their own, the platform's).
func (r Row) CPU() string {
	if r.System == "sundial" {
		return bench.CPUPerFiringOf(r.Cores, float64(r.Rate))
	}
	return bench.CPUPerFiringInProcess(r.Cores, float64(r.Rate))
}

// Held decides whether a run kept up: nothing lost, p99 at most maxP99 and
// no firing later than grace.
func Held(lost int, s harness.Summary, grace, maxP99 time.Duration) bool {
	return lost == 0 && s.N > 0 && s.P99 <= maxP99 && s.Max <= grace
}

// Run runs every system at every rate and shape, one after the other, and
// returns a row for each. A system that fails to run ends the comparison
// with an error and the rows so far.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	var rows []Row
	for _, rate := range cfg.Rates {
		for _, shape := range cfg.Shapes {
			for _, sys := range cfg.Systems {
				cfg.Logger.Info("peers: run starting", "system", sys, "shape", shape, "rate", rate, "duration", cfg.Duration)
				started := cfg.Clock.Now()
				row, err := runOne(ctx, cfg, sys, shape, rate)
				if err != nil {
					return rows, fmt.Errorf("peers: %s %s %d/s: %w", sys, shape, rate, err)
				}
				cfg.Logger.Info("peers: run done", "system", sys, "shape", shape, "rate", rate,
					"p99", row.Lateness.P99, "lost", row.Lost, "held", row.Held, "cpu", row.CPU(), "took", cfg.Clock.Now().Sub(started).Round(time.Second))
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

func runOne(ctx context.Context, cfg Config, sys string, shape Shape, rate int) (Row, error) {
	row := Row{System: sys, Shape: shape, Rate: rate, Duration: cfg.Duration}
	var p peer
	switch sys {
	case "sundial":
		if cfg.Sundial == nil {
			return row, errors.New("no way to run Sundial given")
		}
		f, details, err := cfg.Sundial(ctx, shape, rate, cfg.Duration)
		if err != nil {
			return row, err
		}
		row.Expected, row.Lost, row.Skipped, row.Duplicates, row.Early = f.Expected, f.Lost, f.Skipped, f.DuplicateEffects+f.RawDuplicates, f.Early
		row.Lateness, row.Cores, row.Details = f.Lateness, f.Cores, details
		// A run that shed firings by misfire policy fell more than the
		// threshold behind: it did not hold, though nothing was lost.
		row.Held = Held(f.Lost+f.Skipped, f.Lateness, cfg.Grace, cfg.MaxP99)
		row.Setting = "the bench harness's " + map[Shape]string{Herd: "herd", Jittered: "steady"}[shape] + " scenario"
		return row, nil
	case "floor":
		p = &floor{clock: cfg.Clock}
	case "river":
		p = &riverPeer{adminDSN: cfg.Infra.PostgresDSN}
	case "asynq":
		p = &asynqPeer{addr: cfg.Infra.RedisAddr, db: cfg.RedisDB, clock: cfg.Clock}
	default:
		return row, fmt.Errorf("unknown system %q (known: %s)", sys, strings.Join(Systems, ", "))
	}
	sink, err := NewSink(cfg.Clock)
	if err != nil {
		return row, err
	}
	defer func() {
		if err := sink.Close(); err != nil {
			cfg.Logger.Warn("peers: sink", "err", err)
		}
	}()
	post := newPoster(sink.URL(), cfg.Workers)
	defer post.close()
	pc := peerConfig{jobs: rate, shape: shape, post: post, workers: cfg.Workers, poll: cfg.Poll, log: cfg.Logger}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return p.stop(context.WithoutCancel(ctx))
	}
	defer func() {
		if err := stop(); err != nil {
			cfg.Logger.Warn("peers: not cleaned up", "system", sys, "err", err)
		}
	}()
	if err := p.start(ctx, pc); err != nil {
		return row, err
	}
	row.Setting = p.setting()
	start := cfg.Clock.Now().Add(cfg.Warmup).Truncate(time.Second).Add(time.Second)
	end := start.Add(cfg.Duration - time.Second)
	windowEnd := end.Add(time.Second) // the last firing is due before it
	if err := sleepUntil(ctx, cfg.Clock, start); err != nil {
		return row, err
	}
	u0 := snapUsage(cfg)
	if err := sleepUntil(ctx, cfg.Clock, windowEnd); err != nil {
		return row, err
	}
	u1 := snapUsage(cfg)
	want := Expected(shape, rate, start, end)
	// Wait for the stragglers: until every firing due in the window has
	// arrived, or the deadline.
	deadline := windowEnd.Add(cfg.Deadline)
	for {
		a := Analyze(want, p.resolve(sink.Arrivals()), start, end)
		if a.Lost == 0 || !cfg.Clock.Now().Before(deadline) {
			break
		}
		if err := sleepUntil(ctx, cfg.Clock, cfg.Clock.Now().Add(200*time.Millisecond)); err != nil {
			return row, err
		}
	}
	// A little longer for second deliveries, then stop.
	if err := sleepUntil(ctx, cfg.Clock, cfg.Clock.Now().Add(time.Second)); err != nil {
		return row, err
	}
	if err := stop(); err != nil {
		return row, err
	}
	a := Analyze(want, p.resolve(sink.Arrivals()), start, end)
	row.Expected, row.Lost, row.Duplicates, row.Unexpected, row.Early = a.Expected, a.Lost, a.Duplicates, a.Unexpected, a.Early
	row.Lateness = harness.Summarize(a.Lateness)
	row.Held = Held(a.Lost, row.Lateness, cfg.Grace, cfg.MaxP99)
	row.Cores = bench.Cores(u0, u1)
	row.Details = append(row.Details, fmt.Sprintf("lateness %s; %d unexpected arrivals", row.Lateness, a.Unexpected))
	return row, nil
}

// snapUsage reads the benchmark process (the peer and the sink), the five
// components (Postgres with its backends) and the whole machine.
func snapUsage(cfg Config) bench.UsageSnap {
	now := cfg.Clock.Now()
	s := bench.UsageSnap{}
	for _, c := range []string{"postgres", "redis", "kafka", "cassandra", "zookeeper"} {
		if pid := harness.ComponentPid(cfg.InfraDir, c); pid != 0 {
			if u, err := harness.ReadUsage(pid, c == "postgres", now); err == nil {
				s[c] = u
			}
		}
	}
	if u, err := harness.ReadUsage(os.Getpid(), false, now); err == nil {
		s["bench"] = u
	}
	if u, err := bench.ReadMachineUsage(now); err == nil {
		s[bench.MachineKey] = u
	}
	return s
}

// sleepUntil waits until t on c, or until ctx ends.
func sleepUntil(ctx context.Context, c clock.Clock, t time.Time) error {
	return bench.Sleep(ctx, c, t.Sub(c.Now()))
}

// Markdown renders the rows as one table, with each system's settings and
// details below it.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| system | shape | rate/s | CPU per firing: machine (per process, ms) | firings | p50 | p99 | p99.9 | max | lost | skipped by misfire policy | dups | early | held |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %s | %s | %s | %d | %d | %d | %d | %s |\n",
			r.System, r.Shape, r.Rate, r.CPU(), r.Expected, bench.FormatLatency(r.Lateness.P50), bench.FormatLatency(r.Lateness.P99), bench.FormatLatency(r.Lateness.P999), bench.FormatLatency(r.Lateness.Max),
			r.Lost, r.Skipped, r.Duplicates, r.Early, map[bool]string{true: "yes", false: "NO"}[r.Held])
	}
	b.WriteString("\n")
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.System] && r.Setting != "" {
			seen[r.System] = true
			fmt.Fprintf(&b, "- %s: %s\n", r.System, r.Setting)
		}
	}
	for _, r := range rows {
		for _, d := range r.Details {
			fmt.Fprintf(&b, "- %s %s %d/s: %s\n", r.System, r.Shape, r.Rate, d)
		}
	}
	return b.String()
}
