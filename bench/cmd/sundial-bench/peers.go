package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"

	"github.com/sundialhq/sundial/bench/internal/bench"
	"github.com/sundialhq/sundial/bench/internal/peers"
)

// peersFlags are the flags of `sundial-bench peers`.
type peersFlags struct {
	systems, shapes, rates string
	durable                string
	infraUp                bool
	binDir, workDir        string
	settle, window         time.Duration
	cfg                    peers.Config
}

func (f *peersFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.systems, "systems", strings.Join(peers.Systems, ","), "comma-separated systems to compare: "+strings.Join(peers.Systems, ", "))
	fs.StringVar(&f.shapes, "shapes", "herd,jittered", "comma-separated load shapes: herd (every firing of a second at the whole second), jittered (each job at its own offset in the second)")
	fs.StringVar(&f.rates, "rates", "1000,3000,5000", "comma-separated rates (firings per second = jobs firing every second)")
	fs.DurationVar(&f.cfg.Duration, "duration", time.Minute, "measured window of each run")
	fs.DurationVar(&f.cfg.Warmup, "warmup", 10*time.Second, "how long River, asynq and the floor run before the window opens")
	fs.DurationVar(&f.cfg.Deadline, "deadline", 30*time.Second, "how long after the window a firing may still arrive before it counts as lost")
	fs.DurationVar(&f.cfg.Grace, "grace", 5*time.Second, "a run held when nothing was lost, p99 ≤ --max-p99 and no firing was later than this")
	fs.DurationVar(&f.cfg.MaxP99, "max-p99", time.Second, "see --grace")
	fs.IntVar(&f.cfg.Workers, "workers", 128, "concurrent deliveries of every system: River's MaxWorkers, asynq's Concurrency, the floor's goroutines, Sundial's --executors")
	fs.DurationVar(&f.cfg.Poll, "poll", 10*time.Millisecond, "River's FetchCooldown and FetchPollInterval, asynq's TaskCheckInterval and DelayedTaskCheckInterval")
	fs.IntVar(&f.cfg.RedisDB, "asynq-redis-db", 13, "the Redis database number asynq runs in (must be empty; flushed at the end)")
	fs.StringVar(&f.durable, "durable", "on", "on: durable Postgres commits during the comparison (as make bench; restored after); off: leave the cluster as it is")
	fs.BoolVar(&f.infraUp, "infra-up", true, "run deploy/local/infra.sh up first (it reuses running components)")
	fs.StringVar(&f.binDir, "bin-dir", "", "Sundial: use the service binaries in this folder instead of building them")
	fs.StringVar(&f.workDir, "work-dir", "", "Sundial: folder for binaries and process logs (default .run/bench/<time>)")
	fs.DurationVar(&f.settle, "settle", 45*time.Second, "Sundial: wait between registering the jobs and the first measured slot")
	fs.DurationVar(&f.window, "window", 2*time.Minute, "Sundial: the prefetcher's --window")
}

func (f *peersFlags) finish() error {
	c := &f.cfg
	for _, s := range splitList(f.systems) {
		known := false
		for _, k := range peers.Systems {
			known = known || k == s
		}
		if !known {
			return fmt.Errorf("--systems: unknown system %q (known: %s)", s, strings.Join(peers.Systems, ", "))
		}
		c.Systems = append(c.Systems, s)
	}
	for _, s := range splitList(f.shapes) {
		sh, err := peers.ParseShape(s)
		if err != nil {
			return err
		}
		c.Shapes = append(c.Shapes, sh)
	}
	for _, s := range splitList(f.rates) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("--rates: %q is not a positive rate", s)
		}
		c.Rates = append(c.Rates, n)
	}
	switch {
	case len(c.Systems) == 0, len(c.Shapes) == 0, len(c.Rates) == 0:
		return errors.New("--systems, --shapes and --rates must each name at least one")
	case c.Duration < 2*time.Second:
		return errors.New("--duration: at least 2s")
	case c.Workers < 1:
		return errors.New("--workers: at least 1")
	case c.Poll < time.Millisecond:
		return errors.New("--poll: at least 1ms (River's minimum)")
	case c.RedisDB < 1:
		return errors.New("--asynq-redis-db: not 0, which Sundial and the tests use")
	case f.durable != "on" && f.durable != "off":
		return fmt.Errorf("--durable: want on or off, got %q", f.durable)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runPeers(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sundial-bench peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f peersFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := f.finish(); err != nil {
		fmt.Fprintf(stderr, "sundial-bench peers: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := executePeers(ctx, f, args, log, stdout); err != nil {
		fmt.Fprintf(stderr, "sundial-bench peers: %v\n", err)
		return 1
	}
	return 0
}

func executePeers(ctx context.Context, f peersFlags, args []string, log *slog.Logger, stdout io.Writer) (err error) {
	root, in, err := components(ctx, f.infraUp, log)
	if err != nil {
		return err
	}
	infraDir := os.Getenv("SUNDIAL_INFRA_DIR")
	if infraDir == "" {
		infraDir = filepath.Join(root, ".infra")
	}
	workDir := f.workDir
	if workDir == "" {
		workDir = filepath.Join(root, ".run", "bench", "peers-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	cfg := f.cfg
	cfg.Infra, cfg.InfraDir, cfg.Logger, cfg.Clock = in, infraDir, log, clock.Real{}
	binDir := f.binDir
	for _, s := range cfg.Systems {
		if s == "sundial" && binDir == "" {
			binDir = filepath.Join(workDir, "bin")
			log.Info("building the services", "into", binDir)
			if err := harness.Build(ctx, root, binDir); err != nil {
				return err
			}
		}
	}
	cfg.Sundial = func(ctx context.Context, shape peers.Shape, rate int, duration time.Duration) (*bench.Figures, []string, error) {
		deploy := bench.DefaultDeploy()
		deploy.Durable = durableLabel(f.durable)
		r, err := bench.NewRunner(bench.Options{
			Deploy:   deploy,
			InfraDir: infraDir, Infra: in, BinDir: binDir, WorkDir: workDir, Logger: log, Clock: clock.Real{},
			Window: f.window, Jitter: time.Second, Executors: cfg.Workers, Settle: f.settle,
		})
		if err != nil {
			return nil, nil, err
		}
		bc := bench.Config{Steady: bench.SteadyConfig{Rate: rate, Duration: duration}, Herd: bench.SteadyConfig{Rate: rate, Duration: duration}}
		bc.Scenarios = []string{"steady"}
		if shape == peers.Herd {
			bc.Scenarios = []string{"herd"}
		}
		results, err := r.Run(ctx, bc)
		if err != nil {
			return nil, nil, err
		}
		if len(results) != 1 || results[0].Figures == nil {
			return nil, nil, errors.New("the bench scenario returned no figures")
		}
		res := results[0]
		details := res.Details
		for _, p := range res.Problems {
			details = append(details, "PROBLEM: "+p)
		}
		return res.Figures, details, nil
	}
	if f.durable == "on" {
		log.Info("turning durable commits on in Postgres for the comparison (ALTER SYSTEM; restored at the end)")
		restore, err := bench.MakeDurable(ctx, in.PostgresDSN)
		if err != nil {
			return fmt.Errorf("durable settings: %w", err)
		}
		defer func() {
			if rerr := restore(context.WithoutCancel(ctx)); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restoring the Postgres settings: %w", rerr))
			}
		}()
	}
	env := bench.Describe(ctx, infraDir, in)
	started := time.Now()
	rows, runErr := peers.Run(ctx, cfg)
	var b strings.Builder
	fmt.Fprintf(&b, "### %s UTC — peers, side by side\n\n", started.UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "- Command: `sundial-bench peers %s`\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "- Machine: %s\n", env.Machine)
	fmt.Fprintf(&b, "- Load average (1/5/15 min) at the start: %s; at the end: %s\n", env.LoadStart, bench.LoadAvg())
	fmt.Fprintf(&b, "- Versions: %s; %s\n", env.Versions, peerVersions())
	fmt.Fprintf(&b, "- Durability: %s\n", env.Durability)
	fmt.Fprintf(&b, "- Each run: %s measured after a %s warm-up; %d concurrent deliveries per system; lost = not arrived %s after the window (for Sundial, beyond the firings its workers skipped by the jobs' misfire policy, shown apart); held = nothing lost or skipped, p99 ≤ %s, none later than %s\n\n",
		cfg.Duration, cfg.Warmup, cfg.Workers, cfg.Deadline, cfg.MaxP99, cfg.Grace)
	b.WriteString(peers.Markdown(rows))
	fmt.Fprint(stdout, b.String())
	if runErr != nil {
		return runErr
	}
	log.Info("done", "took", time.Since(started).Round(time.Second))
	return nil
}

// peerVersions are the peers' module versions this binary was built with
// (bench/go.mod).
func peerVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "River and asynq versions unknown"
	}
	var out []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5", "github.com/hibiken/asynq":
			out = append(out, d.Path+" "+d.Version)
		}
	}
	return strings.Join(out, ", ")
}
