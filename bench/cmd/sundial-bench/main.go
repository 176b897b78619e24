// Command sundial-bench measures a Sundial deployment on the real
// components: it starts (or reuses) the infrastructure, builds and starts
// the four services as processes, registers jobs through the api, and
// measures the lateness of every firing at an HTTP sink. `make bench` runs
// it with the defaults; docs/benchmarks.md explains the scenarios, their
// flags and the figures so far.
//
//	sundial-bench [flags]
//	sundial-bench peers [flags]   # River, asynq, Sundial and the floor side by side
//	sundial-bench chaos [flags]   # the fault matrix under load (docs/reliability.md)
//
// Every scenario prints one Markdown table row; --append-docs also appends
// the run to docs/benchmarks.md. The exit status is 1 when a firing was
// lost or reached the sink as two executions, or a scenario could not run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"

	"github.com/sundialhq/sundial/bench/internal/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type flags struct {
	scenarios      string
	quick          bool
	durable        string
	profileDir     string
	keepProblems   bool
	appendDocs     bool
	docs           string
	note           string
	infraUp        bool
	cluster        string
	binDir         string
	workDir        string
	window         time.Duration
	jitter         time.Duration
	settle         time.Duration
	executors      int
	workerArgs     string
	prefetcherArgs string
	concurrency    int
	cfg            bench.Config
	deploy         bench.Deploy
	maxRates       string

	stagingPrefetchers string
}

func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.scenarios, "scenarios", strings.Join(bench.Scenarios, ","), "comma-separated scenarios to run, in this order: "+strings.Join(bench.Scenarios, ", "))
	fs.BoolVar(&f.quick, "quick", false, "CI smoke run (under 3 minutes): every scenario at a small size on one shared deployment; asserts nothing about speed, only that nothing was lost")
	fs.StringVar(&f.durable, "durable", "auto", "on: turn Postgres durable commits on for the run (ALTER SYSTEM fsync, synchronous_commit, full_page_writes; restored after); off: leave the cluster as it is; auto: on, except with --quick")
	fs.StringVar(&f.profileDir, "profile-dir", "", "capture a CPU profile of every service during each measured window into this folder (services get --pprof)")
	fs.BoolVar(&f.keepProblems, "keep-problem-namespaces", false, "leave the namespace (Postgres schema, Cassandra keyspace, Kafka topics and group, Redis keys, ZooKeeper path) of a scenario that lost or duplicated firings behind to inspect, named in the log; drop it by hand")
	fs.BoolVar(&f.appendDocs, "append-docs", false, "append the run's tables to --docs")
	fs.StringVar(&f.docs, "docs", "", "the Markdown file --append-docs appends to (default docs/benchmarks.md of the repository)")
	fs.StringVar(&f.note, "note", "", "a remark for the run's heading in the docs (e.g. 'preliminary, shared machine')")
	fs.BoolVar(&f.infraUp, "infra-up", true, "run deploy/local/infra.sh up first (it reuses running components)")
	fs.StringVar(&f.binDir, "bin-dir", "", "use the service binaries in this folder instead of building them")
	fs.StringVar(&f.workDir, "work-dir", "", "folder for binaries and process logs (default .run/bench/<time> in the repository)")
	fs.DurationVar(&f.window, "window", 2*time.Minute, "the prefetcher's staging window (--window)")
	fs.DurationVar(&f.jitter, "jitter", time.Second, "max_jitter of the rate scenarios' per-second jobs: firings spread uniformly within each second; 0 fires all of a second's jobs at the same instant")
	fs.DurationVar(&f.settle, "settle", 45*time.Second, "wait between registering a scenario's jobs and its first measured slot, for the window's worth of slots staged at registration to reach the workers")
	fs.IntVar(&f.executors, "executors", 128, "each worker's --executors")
	fs.StringVar(&f.workerArgs, "worker-args", "", "more flags for every worker, space-separated (e.g. '--ledger-running-delay=0'); printed with the run's load shape")
	fs.StringVar(&f.prefetcherArgs, "prefetcher-args", "", "more flags for every prefetcher of the rate scenarios, space-separated (e.g. '--tick=5s'); printed with the deployment")
	fs.IntVar(&f.concurrency, "register-concurrency", 16, "CreateJob calls in flight while registering")

	c := &f.cfg
	fs.IntVar(&c.Steady.Rate, "rate", 1000, "steady: firings per second (one job firing every second per unit)")
	fs.DurationVar(&c.Steady.Duration, "duration", 2*time.Minute, "steady: measured duration")
	fs.IntVar(&c.Herd.Rate, "herd-rate", 1000, "herd: firings per second, all due at the whole second (steady's load with --jitter 0)")
	fs.DurationVar(&c.Herd.Duration, "herd-duration", 2*time.Minute, "herd: measured duration")
	fs.StringVar(&f.maxRates, "max-rates", "1000,1500,2000,3000,4000,6000,8000,10000,12000", "max: the ladder of rates (firings/s), each held for --max-step")
	fs.DurationVar(&c.Max.Step, "max-step", time.Minute, "max: how long each rate is held")
	fs.DurationVar(&c.Max.MaxP99, "max-p99", time.Second, "max: the lateness p99 a rate may reach and still count as held")
	fs.IntVar(&c.Burst.Jobs, "burst-jobs", 100_000, "burst: jobs due at the same instant")
	fs.IntVar(&c.Burst.Critical, "burst-critical", 10, "burst: CRITICAL jobs due within that second")
	fs.IntVar(&c.Cancel.Rate, "cancel-rate", 1000, "cancel: per-second jobs firing, then deleted while their next two minutes are staged")
	fs.DurationVar(&c.Cancel.Window, "cancel-window", 30*time.Second, "cancel: how long firing and then discarding are each measured")
	fs.IntVar(&c.Registered.Jobs, "registered-jobs", 10_000_000, "registered: idle jobs loaded between the two measured phases")
	fs.IntVar(&c.Registered.Rate, "registered-rate", 1000, "registered: steady firings per second during both phases")
	fs.DurationVar(&c.Registered.Phase, "registered-phase", time.Minute, "registered: length of each measured phase")
	fs.IntVar(&c.Registered.Chunk, "registered-chunk", 100_000, "registered: rows per COPY transaction")
	fs.IntVar(&c.Failover.Rate, "failover-rate", 1000, "failover: firings per second during the kills")
	fs.DurationVar(&c.Failover.Duration, "failover-duration", 2*time.Minute, "failover: measured duration (kills at 20, 40 and 60 %)")
	fs.IntVar(&c.Failover.Prefetchers, "failover-prefetchers", 4, "failover: prefetchers in its deployment (at least 2; --quick shares one deployment of 2)")
	fs.IntVar(&c.Failover.Ranges, "failover-ranges", 16, "failover (and --quick's shared deployment): the prefetchers' --ranges; 1: one leader and standbys")
	fs.IntVar(&c.Priority.LowJobs, "priority-low-jobs", 500, "priority: LOW one-off jobs due at one instant, whose target answers slowly (enough to keep LOW's executors busy through the window)")
	fs.DurationVar(&c.Priority.Slow, "priority-slow", 10*time.Second, "priority: how long the LOW jobs' target takes to answer each request")
	fs.IntVar(&c.Priority.Critical, "priority-critical", 20, "priority: CRITICAL jobs firing every second while the LOW herd waits")
	fs.IntVar(&c.Priority.High, "priority-high", 20, "priority: HIGH jobs firing every second while the LOW herd waits")
	fs.DurationVar(&c.Priority.Duration, "priority-duration", time.Minute, "priority: measured duration of the CRITICAL and HIGH firings")
	fs.IntVar(&c.Topology.Prefetchers, "prefetchers", 1, "prefetchers in each scenario's deployment (failover and staging size their own)")
	fs.IntVar(&c.Topology.Relays, "relays", 1, "relays in each scenario's deployment (failover sizes its own)")
	fs.IntVar(&c.Topology.Workers, "workers", 1, "workers in each scenario's deployment (failover sizes its own)")
	fs.IntVar(&f.deploy.Ranges, "ranges", bench.DefaultRanges, "the prefetchers' --ranges in each scenario's deployment and the chaos matrix's (make run's 16; 1: one leader)")
	fs.BoolVar(&f.deploy.Plaintext, "plaintext-api", false, "serve the api without TLS (make run serves TLS with a development CA, and so does the bench unless this is set)")
	fs.StringVar(&f.deploy.RedisCluster, "redis-cluster", "", "comma-separated nodes of a Redis Cluster (CLUSTER=redis make infra-up; e.g. 127.0.0.1:7101,…,127.0.0.1:7106) the api and workers use instead of the single Redis; its nodes are measured as redis")
	fs.StringVar(&f.cluster, "cluster", "", "comma-separated components the deployment reaches in the cluster profile's clustered mode ("+strings.Join(bench.ClusterComponents, ", ")+"; 1 or all: every one), started by CLUSTER=<same> make infra-up; their addresses are read from deploy/local/cluster/<component>.sh, and each one's nodes are measured together as that component")
	fs.BoolVar(&f.deploy.APILimits, "api-limits", false, "keep make run's api rate limit (200 calls/s per token) and tenant quotas while registering; by default the bench lifts them, since every scenario registers thousands of jobs a minute and no firing passes through the api")
	fs.IntVar(&c.Overload.Held, "overload-held", 3000, "overload (only when named in --scenarios): the held rate; a herd at 2× it for --overload-surge, at 0.5× before and after")
	fs.DurationVar(&c.Overload.Surge, "overload-surge", time.Minute, "overload: how long 2× the held rate is offered")
	fs.DurationVar(&c.Overload.Baseline, "overload-baseline", 20*time.Second, "overload: 0.5× the held rate alone before the surge (the on-time CPU per firing is measured there)")
	fs.DurationVar(&c.Overload.MaxWait, "overload-max-wait", 10*time.Minute, "overload: the most waited after the surge for firings to be on time again")
	fs.IntVar(&c.WorkerKill.Rate, "worker-kill-rate", 1000, "worker-kill (only when named in --scenarios): jittered per-second firings while one of two workers is killed -9 (also try the held rate)")
	fs.DurationVar(&c.WorkerKill.Baseline, "worker-kill-baseline", 20*time.Second, "worker-kill: load alone before the kill")
	fs.DurationVar(&c.WorkerKill.MaxWait, "worker-kill-max-wait", 5*time.Minute, "worker-kill: the most waited after the replacement joined for firings to be on time again")
	fs.IntVar(&c.CPUHog.Rate, "cpu-hog-rate", 1000, "cpu-hog (only when named in --scenarios): jittered per-second firings while a busy loop takes one core")
	fs.DurationVar(&c.CPUHog.Hog, "cpu-hog-duration", time.Minute, "cpu-hog: how long the busy loop runs")
	fs.DurationVar(&c.CPUHog.Baseline, "cpu-hog-baseline", 20*time.Second, "cpu-hog: load alone before the hog")
	fs.DurationVar(&c.CPUHog.MaxWait, "cpu-hog-max-wait", 5*time.Minute, "cpu-hog: the most waited after the hog for firings to be on time again")
	fs.IntVar(&c.DeleteStaged.Jobs, "delete-staged-jobs", 3000, "delete-staged (only when named in --scenarios): per-second jobs that fire with their window staged, then are bulk-deleted")
	fs.DurationVar(&c.DeleteStaged.Fire, "delete-staged-fire", 30*time.Second, "delete-staged: how long they fire before the delete")
	fs.IntVar(&c.DeleteStaged.NewJobs, "delete-staged-new-jobs", 100, "delete-staged: per-second jobs created while the delete runs, whose lateness is measured")
	fs.IntVar(&c.RegisterDelete.Base, "register-delete-base", 500, "register-delete (only when named in --scenarios): jittered per-second jobs that fire throughout and are measured")
	fs.IntVar(&c.RegisterDelete.Herd, "register-delete-herd", 2500, "register-delete: per-second herd jobs registered next to them, fired, then bulk-deleted")
	fs.DurationVar(&c.RegisterDelete.Baseline, "register-delete-baseline", 30*time.Second, "register-delete: how long the base fires before the herd is registered")
	fs.DurationVar(&c.RegisterDelete.Ahead, "register-delete-ahead", 150*time.Second, "register-delete: the herd's first slot after its registration begins")
	fs.DurationVar(&c.RegisterDelete.Fire, "register-delete-fire", 60*time.Second, "register-delete: how long the herd fires before the delete")
	fs.DurationVar(&c.RegisterDelete.After, "register-delete-after", 60*time.Second, "register-delete: how long the base is measured after the delete")
	fs.DurationVar(&c.DeleteStaged.After, "delete-staged-after", 90*time.Second, "delete-staged: how long after the delete the discarding, the memory and the new jobs are measured")
	fs.IntVar(&c.Tenants.FloodJobs, "tenants-flood-jobs", 2000, "tenants (only when named in --scenarios): one-off jobs of the flooding tenant due at one instant")
	fs.Float64Var(&c.Tenants.FloodRate, "tenants-flood-rate", 200, "tenants: the flooding tenant's firing_rate_per_second in the workers' quotas file")
	fs.IntVar(&c.Tenants.FloodBurst, "tenants-flood-burst", 20, "tenants: the flooding tenant's firing_burst")
	fs.IntVar(&c.Tenants.QuietJobs, "tenants-quiet-jobs", 20, "tenants: jobs of another tenant (no quota) firing every second through the flood")
	fs.DurationVar(&c.Tenants.Duration, "tenants-duration", 15*time.Second, "tenants: how long the quiet tenant's jobs fire from the flood's instant")
	fs.IntVar(&c.Tenants.Workers, "tenants-workers", 2, "tenants: workers sharing the quota (through Redis)")
	fs.IntVar(&c.Staging.Jobs, "staging-jobs", 200_000, "staging (only when named in --scenarios): daily jobs due at one instant, staged by each arrangement of prefetchers")
	fs.StringVar(&f.stagingPrefetchers, "staging-prefetchers", "1,2,4", "staging: the counts of prefetchers sharing --staging-ranges ranges, each measured after one prefetcher leading one range")
	fs.IntVar(&c.Staging.Ranges, "staging-ranges", 16, "staging: the prefetchers' --ranges")
	fs.IntVar(&c.Staging.Chunk, "staging-chunk", 50_000, "staging: rows per COPY transaction")
}

// applyQuick shrinks every scenario for the CI smoke run, leaving flags the
// user set alone.
func (f *flags) applyQuick(set map[string]bool) {
	c := &f.cfg
	c.Shared = true
	def := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	// The herd is left out of the smoke run (it would only repeat steady's
	// checks at one instant a second); --scenarios herd adds it.
	def("scenarios", func() {
		f.scenarios = strings.Join(slices.DeleteFunc(slices.Clone(bench.Scenarios), func(s string) bool { return s == "herd" }), ",")
	})
	def("settle", func() { f.settle = 2 * time.Second })
	def("herd-rate", func() { c.Herd.Rate = 100 })
	def("herd-duration", func() { c.Herd.Duration = 15 * time.Second })
	def("rate", func() { c.Steady.Rate = 100 })
	def("duration", func() { c.Steady.Duration = 8 * time.Second })
	def("max-rates", func() { f.maxRates = "100,200" })
	def("max-step", func() { c.Max.Step = 6 * time.Second })
	// Over two of the fire holder's release chunks (256), registered in
	// about 3 s on a loaded CI machine (2,000 took 11 s).
	def("burst-jobs", func() { c.Burst.Jobs = 600 })
	def("burst-critical", func() { c.Burst.Critical = 5 })
	def("cancel-rate", func() { c.Cancel.Rate = 100 })
	def("cancel-window", func() { c.Cancel.Window = 5 * time.Second })
	def("registered-jobs", func() { c.Registered.Jobs = 20_000 })
	def("registered-rate", func() { c.Registered.Rate = 100 })
	def("registered-phase", func() { c.Registered.Phase = 6 * time.Second })
	def("failover-rate", func() { c.Failover.Rate = 100 })
	def("failover-duration", func() { c.Failover.Duration = 16 * time.Second })
	// Two workers with 64 LOW executors each: two waves of the slow LOW
	// herd, the second through the window.
	def("priority-low-jobs", func() { c.Priority.LowJobs = 200 })
	def("priority-critical", func() { c.Priority.Critical = 5 })
	def("priority-high", func() { c.Priority.High = 5 })
	def("priority-duration", func() { c.Priority.Duration = 5 * time.Second })
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "peers" {
		return runPeers(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "chaos" {
		return runChaos(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "drop" {
		return runDrop(args[1:], stderr)
	}
	fs := flag.NewFlagSet("sundial-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f flags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.quick {
		f.applyQuick(set)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := f.finish(); err != nil {
		fmt.Fprintf(stderr, "sundial-bench: %v\n", err)
		return 2
	}
	// The sink and the expected slots of a long run are millions of small
	// objects: collect less often, so the benchmark's own GC takes less of
	// the CPU the platform is measured on. Memory is plentiful here.
	debug.SetGCPercent(400)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := execute(ctx, f, args, log, stdout); err != nil {
		fmt.Fprintf(stderr, "sundial-bench: %v\n", err)
		return 1
	}
	return 0
}

// finish validates the flags and derives what they imply.
func (f *flags) finish() error {
	for _, s := range strings.Split(f.scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "all" {
			f.cfg.Scenarios = append(f.cfg.Scenarios, bench.Scenarios...)
			continue
		}
		known := false
		for _, k := range append(slices.Clone(bench.Scenarios), bench.Optional...) {
			known = known || k == s
		}
		if !known {
			return fmt.Errorf("--scenarios: unknown scenario %q (known: %s)", s, strings.Join(append(slices.Clone(bench.Scenarios), bench.Optional...), ", "))
		}
		f.cfg.Scenarios = append(f.cfg.Scenarios, s)
	}
	if len(f.cfg.Scenarios) == 0 {
		return errors.New("--scenarios: none selected")
	}
	f.cfg.Max.Rates = nil
	for _, s := range strings.Split(f.maxRates, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("--max-rates: %q is not a positive rate", s)
		}
		f.cfg.Max.Rates = append(f.cfg.Max.Rates, n)
	}
	f.cfg.Staging.Prefetchers = nil
	for _, s := range strings.Split(f.stagingPrefetchers, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 16 {
			return fmt.Errorf("--staging-prefetchers: %q is not a count of prefetchers from 1 to 16", s)
		}
		f.cfg.Staging.Prefetchers = append(f.cfg.Staging.Prefetchers, n)
	}
	if r := f.cfg.Staging.Ranges; r < 1 || 256%r != 0 {
		return fmt.Errorf("--staging-ranges: want a divisor of 256, got %d", r)
	}
	if t := f.cfg.Topology; t.Prefetchers < 1 || t.Relays < 1 || t.Workers < 1 || t.Prefetchers > 16 || t.Relays > 16 || t.Workers > 16 {
		return errors.New("--prefetchers, --relays and --workers: want 1 to 16 each")
	}
	if r := f.deploy.Ranges; r < 1 || 256%r != 0 {
		return fmt.Errorf("--ranges: want a divisor of 256 (1: one leader), got %d", r)
	}
	if r := f.cfg.Failover.Ranges; r < 1 || 256%r != 0 {
		return fmt.Errorf("--failover-ranges: want a divisor of 256 (1: one leader and standbys), got %d", r)
	}
	if f.cfg.Failover.Prefetchers < 2 {
		return fmt.Errorf("--failover-prefetchers: want at least 2, got %d", f.cfg.Failover.Prefetchers)
	}
	if f.cfg.Staging.Jobs < 1 || f.cfg.Staging.Chunk < 1 {
		return errors.New("--staging-jobs and --staging-chunk must be positive")
	}
	switch f.durable {
	case "on", "off":
	case "auto":
		f.durable = map[bool]string{true: "off", false: "on"}[f.quick]
	default:
		return fmt.Errorf("--durable: want on, off or auto, got %q", f.durable)
	}
	c := f.cfg
	switch {
	case c.Steady.Rate < 1, c.Herd.Rate < 1, c.Registered.Rate < 1, c.Failover.Rate < 1, c.Cancel.Rate < 1:
		return errors.New("rates must be at least 1")
	case c.Steady.Duration < 2*time.Second, c.Herd.Duration < 2*time.Second, c.Registered.Phase < 2*time.Second, c.Max.Step < 2*time.Second, c.Failover.Duration < 10*time.Second, c.Cancel.Window < 2*time.Second:
		return errors.New("durations too short")
	case c.Burst.Jobs < 1, c.Burst.Critical < 0, c.Registered.Jobs < 1:
		return errors.New("burst and registered sizes must be positive")
	case c.Priority.LowJobs < 1, c.Priority.Critical < 1, c.Priority.High < 0, c.Priority.Slow <= 0, c.Priority.Duration < 2*time.Second:
		return errors.New("--priority-low-jobs and --priority-critical must be at least 1, --priority-high not negative, --priority-slow positive and --priority-duration at least 2s")
	case f.jitter < 0 || f.jitter > time.Minute:
		return errors.New("--jitter must be between 0 and 1m")
	case c.Overload.Held < 2:
		return fmt.Errorf("--overload-held: want at least 2, got %d", c.Overload.Held)
	case c.WorkerKill.Rate < 1:
		return fmt.Errorf("--worker-kill-rate: want at least 1, got %d", c.WorkerKill.Rate)
	case c.CPUHog.Rate < 1:
		return fmt.Errorf("--cpu-hog-rate: want at least 1, got %d", c.CPUHog.Rate)
	case c.RegisterDelete.Base < 1 || c.RegisterDelete.Herd < 1 || c.RegisterDelete.Fire < 2*time.Second || c.RegisterDelete.After < 40*time.Second || c.RegisterDelete.Ahead < 10*time.Second:
		return errors.New("--register-delete-base and --register-delete-herd: at least 1; --register-delete-fire: at least 2s; --register-delete-after: at least 40s; --register-delete-ahead: at least 10s")
	case c.DeleteStaged.Jobs < 1 || c.DeleteStaged.NewJobs < 1:
		return errors.New("--delete-staged-jobs and --delete-staged-new-jobs: want at least 1")
	case c.Overload.Surge < 2*time.Second || c.CPUHog.Hog < 2*time.Second || c.DeleteStaged.Fire < 2*time.Second || c.DeleteStaged.After < 10*time.Second:
		return errors.New("--overload-surge, --cpu-hog-duration and --delete-staged-fire: at least 2s; --delete-staged-after: at least 10s")
	case c.Overload.Baseline < 5*time.Second || c.WorkerKill.Baseline < 5*time.Second || c.CPUHog.Baseline < 5*time.Second:
		return errors.New("--overload-baseline, --worker-kill-baseline and --cpu-hog-baseline: at least 5s (the on-time figures are measured there)")
	case c.Overload.MaxWait < bench.NormalWindow || c.WorkerKill.MaxWait < bench.NormalWindow || c.CPUHog.MaxWait < bench.NormalWindow:
		return fmt.Errorf("the --*-max-wait flags: at least %s", bench.NormalWindow)
	}
	return nil
}

func execute(ctx context.Context, f flags, args []string, log *slog.Logger, stdout io.Writer) (err error) {
	root, in, err := components(ctx, f.infraUp, log)
	if err != nil {
		return err
	}
	if err := markClustered(f.cluster, &f.deploy); err != nil {
		return err
	}
	cluster := func(ctx context.Context, component string, args ...string) (string, error) {
		return scriptOutput(ctx, root, "cluster/"+component+".sh", log, args...)
	}
	if err := clusterAddrs(ctx, cluster, &in, &f.deploy); err != nil {
		return err
	}
	workDir := f.workDir
	if workDir == "" {
		workDir = filepath.Join(root, ".run", "bench", time.Now().UTC().Format("20060102T150405Z"))
	}
	binDir := f.binDir
	if binDir == "" {
		binDir = filepath.Join(workDir, "bin")
		log.Info("building the services", "into", binDir)
		if err := harness.Build(ctx, root, binDir); err != nil {
			return err
		}
	}
	if f.durable == "on" {
		log.Info("turning durable commits on in Postgres for the run (ALTER SYSTEM; restored at the end)")
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
	infraDir := os.Getenv("SUNDIAL_INFRA_DIR") // infra.sh's own override
	if infraDir == "" {
		infraDir = filepath.Join(root, ".infra")
	}
	env := bench.Describe(ctx, infraDir, in)
	f.deploy.Durable = durableLabel(f.durable)
	r, err := bench.NewRunner(bench.Options{
		Deploy:   f.deploy,
		InfraDir: infraDir, Infra: in, BinDir: binDir, WorkDir: workDir, ProfileDir: f.profileDir, KeepProblemNamespaces: f.keepProblems,
		Logger: log, Clock: clock.Real{}, Window: f.window, Jitter: f.jitter,
		Executors: f.executors, WorkerArgs: strings.Fields(f.workerArgs), PrefetcherArgs: strings.Fields(f.prefetcherArgs), RegisterConcurrency: f.concurrency, Settle: f.settle, Quick: f.quick,
	})
	if err != nil {
		return err
	}
	started := time.Now()
	results, runErr := r.Run(ctx, f.cfg)
	title := fmt.Sprintf("%s UTC", started.UTC().Format("2006-01-02 15:04"))
	if f.quick {
		title += " — quick (smoke run: sizes too small to mean anything about speed)"
	}
	if f.note != "" {
		title += " — " + f.note
	}
	shape := fmt.Sprintf("per-second jobs (`* * * * * *`, HTTP target) with max_jitter %s, so each job's firings land at a deterministic uniform offset within each second (rate N = N jobs); herd: the same jobs without jitter, all N firings of a second due at the whole second; burst: one-off jobs at one instant; prefetch window %s; %d executors per worker", f.jitter, f.window, f.executors)
	if f.jitter == 0 {
		shape = fmt.Sprintf("per-second jobs (`* * * * * *`, HTTP target) without jitter: all N firings of a second due at the same instant; prefetch window %s; %d executors per worker", f.window, f.executors)
	}
	if f.workerArgs != "" {
		shape += "; workers also run with `" + f.workerArgs + "`"
	}
	md := bench.Markdown(title, "sundial-bench "+strings.Join(args, " "), env, bench.LoadAvg(), shape, results)
	fmt.Fprint(stdout, md)
	if f.appendDocs && len(results) > 0 {
		docs := f.docs
		if docs == "" {
			docs = filepath.Join(root, "docs", "benchmarks.md")
		}
		if err := appendFile(docs, "\n"+md); err != nil {
			return errors.Join(runErr, err)
		}
		log.Info("appended to the docs", "file", docs)
	}
	if runErr != nil {
		return runErr
	}
	var problems []string
	for _, res := range results {
		problems = append(problems, res.Problems...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d correctness problems (lost or duplicated firings, bad deliveries):\n%s", len(problems), strings.Join(problems, "\n"))
	}
	log.Info("done", "took", time.Since(started).Round(time.Second), "logs", workDir)
	return nil
}

// infraFromScript is where the components listen: SUNDIAL_TEST_* when set,
// else what `infra.sh env` says (it reports the ports each component was
// started with), else the defaults.
// components finds the repository, starts (or reuses) the components when
// up says so, and reads their addresses.
func components(ctx context.Context, up bool, log *slog.Logger) (root string, in harness.Infra, err error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", in, err
	}
	if root, err = harness.RepoRoot(wd); err != nil {
		return "", in, err
	}
	if up {
		log.Info("starting (or reusing) the infrastructure: deploy/local/infra.sh up")
		cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy/local/infra.sh"), "up")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", in, fmt.Errorf("infra.sh up: %w", err)
		}
	}
	return root, infraFromScript(ctx, root), nil
}

func infraFromScript(ctx context.Context, root string) harness.Infra {
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy/local/infra.sh"), "env").Output()
	if err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if ok && os.Getenv(k) == "" {
				_ = os.Setenv(k, strings.Trim(v, `'"`))
			}
		}
	}
	return harness.InfraFromEnv()
}

// durableLabel names how Postgres commits during a run, for the tables'
// deployment lines.
func durableLabel(durable string) string {
	if durable == "on" {
		return "durable Postgres commits (--durable on)"
	}
	return "Postgres commits as the cluster has them (--durable off; see Durability)"
}

func appendFile(path, s string) error {
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.WriteString(s); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// runDrop drops the namespaces named (what --keep-problem-namespaces left
// behind) from the running components.
func runDrop(names []string, stderr io.Writer) int {
	if len(names) == 0 {
		fmt.Fprintln(stderr, "usage: sundial-bench drop NAMESPACE...")
		return 2
	}
	in := harness.InfraFromEnv()
	code := 0
	for _, name := range names {
		ns, err := harness.OpenNamespace(in, name)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			err = ns.Drop(ctx)
			cancel()
		}
		if err != nil {
			fmt.Fprintf(stderr, "sundial-bench: drop %s: %v\n", name, err)
			code = 1
		}
	}
	return code
}
