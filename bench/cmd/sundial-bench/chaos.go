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
	"strings"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"

	"github.com/sundialhq/sundial/bench/internal/bench"
)

// chaosFlags are the flags of `sundial-bench chaos`.
type chaosFlags struct {
	rows       string
	cluster    string
	quick      bool
	infraUp    bool
	binDir     string
	workDir    string
	window     time.Duration
	settle     time.Duration
	executors  int
	workerArgs string
	deploy     bench.Deploy
	cfg        bench.ChaosConfig
}

func (f *chaosFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.rows, "rows", strings.Join(bench.ChaosRows, ","), "comma-separated faults, in this order: "+strings.Join(bench.ChaosRows, ", ")+"; of the clustered components (with their --redis-cluster): "+strings.Join(bench.ChaosClusterRows, ", ")+" (default: every row the deployment can take)")
	fs.BoolVar(&f.quick, "quick", false, "the subset make test runs (under 4 minutes): "+strings.Join(bench.ChaosQuickRows, ", ")+" at 100 firings/s (kill-worker-loaded at --loaded-rate more); no component is stopped")
	fs.BoolVar(&f.infraUp, "infra-up", true, "run deploy/local/infra.sh up first (it reuses running components)")
	fs.StringVar(&f.binDir, "bin-dir", "", "use the service binaries in this folder instead of building them")
	fs.StringVar(&f.workDir, "work-dir", "", "folder for binaries and process logs (default .run/bench/chaos-<time> in the repository)")
	fs.DurationVar(&f.window, "window", 2*time.Minute, "the prefetcher's staging window (--window)")
	fs.DurationVar(&f.settle, "settle", 10*time.Second, "wait between registering the jobs and their first slot")
	fs.IntVar(&f.executors, "executors", 128, "each worker's --executors")
	fs.StringVar(&f.workerArgs, "worker-args", "", "more flags for every worker, space-separated")
	c := &f.cfg
	fs.IntVar(&c.Rate, "rate", 200, "firings per second of the load (jobs firing every second, jittered within the second)")
	fs.IntVar(&c.HangJobs, "hang-jobs", 10, "jobs firing every second at the second target, the one target-hang hangs")
	fs.DurationVar(&c.Baseline, "baseline", 20*time.Second, "load alone before the first fault: the lateness every fault is compared with")
	fs.DurationVar(&c.Outage, "outage", 10*time.Second, "how long Redis and Kafka stay stopped, and a worker stays cut off from one of them")
	fs.DurationVar(&c.LongOutage, "long-outage", 60*time.Second, "how long Postgres and ZooKeeper stay stopped, and the ledger refuses every call")
	fs.DurationVar(&c.CassandraOutage, "cassandra-outage", 5*time.Minute, "how long Cassandra stays stopped")
	fs.DurationVar(&c.Hang, "hang", 20*time.Second, "how long the second target hangs")
	fs.DurationVar(&c.Recover, "recover", 15*time.Second, "least time after a fault ends before the next")
	fs.DurationVar(&c.RecoverMax, "recover-max", 3*time.Minute, "most time waited for firings to be on time again before the next fault")
	fs.DurationVar(&c.SkewWorker, "skew", 2*time.Second, "clock offset of the worker worker-clock-ahead adds")
	fs.IntVar(&c.Loaded.Rate, "loaded-rate", 1000, "kill-worker-loaded: jittered per-second firings of its own load (the worker-kill scenario's), on top of --rate")
	fs.DurationVar(&c.Loaded.Baseline, "loaded-baseline", 20*time.Second, "kill-worker-loaded: its load alone before the kill")
	fs.DurationVar(&c.Loaded.MaxWait, "loaded-max-wait", 3*time.Minute, "kill-worker-loaded: the most waited after the replacement joined for its firings to be on time again")
	fs.IntVar(&f.deploy.Ranges, "ranges", bench.DefaultRanges, "the prefetchers' --ranges (make run's 16; 1: one leader)")
	fs.StringVar(&f.cluster, "cluster", "", "comma-separated components the deployment reaches in the cluster profile's clustered mode ("+strings.Join(bench.ClusterComponents, ", ")+"; 1 or all: every one), started by CLUSTER=<same> make infra-up; their addresses are read from deploy/local/cluster/<component>.sh, their single nodes' rows are left out and their failover rows added")
	fs.StringVar(&f.deploy.RedisCluster, "redis-cluster", "", "comma-separated nodes of a Redis Cluster (CLUSTER=redis make infra-up; e.g. 127.0.0.1:7101,…,127.0.0.1:7106) the api and workers use instead of the single Redis; the rows that act on the single Redis are refused beside it")
	fs.BoolVar(&f.deploy.Plaintext, "plaintext-api", false, "serve the api without TLS (make run serves TLS with a development CA, and so does the matrix unless this is set)")
}

// applyQuick shrinks the matrix for make test, leaving flags the user set
// alone.
func (f *chaosFlags) applyQuick(set map[string]bool) {
	def := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	def("rows", func() { f.rows = strings.Join(bench.ChaosQuickRows, ",") })
	def("rate", func() { f.cfg.Rate = 100 })
	def("hang-jobs", func() { f.cfg.HangJobs = 5 })
	def("baseline", func() { f.cfg.Baseline = 10 * time.Second })
	def("recover", func() { f.cfg.Recover = 10 * time.Second })
	def("recover-max", func() { f.cfg.RecoverMax = 30 * time.Second })
	def("settle", func() { f.settle = 5 * time.Second })
	// kill-worker-loaded at 1,000/s, kept short: about a minute in all.
	def("loaded-baseline", func() { f.cfg.Loaded.Baseline = 8 * time.Second })
	def("loaded-max-wait", func() { f.cfg.Loaded.MaxWait = 30 * time.Second })
}

func (f *chaosFlags) finish() error {
	known := slices.Concat(bench.ChaosRows, bench.ChaosClusterRows)
	for _, s := range splitList(f.rows) {
		if !slices.Contains(known, s) {
			return fmt.Errorf("--rows: unknown fault %q (known: %s)", s, strings.Join(known, ", "))
		}
		f.cfg.Rows = append(f.cfg.Rows, s)
	}
	if err := bench.CheckChaosRows(f.cfg.Rows, f.deploy); err != nil {
		return err
	}
	c := f.cfg
	switch {
	case len(c.Rows) == 0:
		return errors.New("--rows: none selected")
	case c.Rate < 1 || c.HangJobs < 1:
		return errors.New("--rate and --hang-jobs must be at least 1")
	case c.Baseline < 5*time.Second:
		return errors.New("--baseline: at least 5s")
	case c.Outage <= 0 || c.LongOutage <= 0 || c.CassandraOutage <= 0 || c.Hang <= 0:
		return errors.New("outages and --hang must be positive")
	case c.Recover < 0 || c.RecoverMax < c.Recover:
		return errors.New("--recover must be between 0 and --recover-max")
	case c.Loaded.Rate < 1:
		return fmt.Errorf("--loaded-rate: want at least 1, got %d", c.Loaded.Rate)
	case c.Loaded.Baseline < 5*time.Second:
		return errors.New("--loaded-baseline: at least 5s")
	case c.Loaded.MaxWait < bench.NormalWindow:
		return fmt.Errorf("--loaded-max-wait: at least %s", bench.NormalWindow)
	case f.deploy.Ranges < 1 || 256%f.deploy.Ranges != 0:
		return fmt.Errorf("--ranges: want a divisor of 256 (1: one leader), got %d", f.deploy.Ranges)
	}
	return nil
}

// markClustered checks a --cluster list and marks the deployment's
// clustered components (Redis by its nodes, read later unless
// --redis-cluster named them).
func markClustered(list string, deploy *bench.Deploy) error {
	names := splitList(list)
	if slices.Contains(names, "1") || slices.Contains(names, "all") {
		names = bench.ClusterComponents
	}
	for _, c := range names {
		switch {
		case !slices.Contains(bench.ClusterComponents, c):
			return fmt.Errorf("--cluster: unknown component %q (known: %s; 1 or all for every one)", c, strings.Join(bench.ClusterComponents, ", "))
		case c == "redis":
			if deploy.RedisCluster == "" {
				deploy.RedisCluster = pendingRedisCluster
			}
		case !slices.Contains(deploy.Clustered, c):
			deploy.Clustered = append(deploy.Clustered, c)
		}
	}
	return nil
}

// pendingRedisCluster stands for the Redis Cluster's nodes until
// executeChaos reads them from cluster/redis.sh (after infra.sh up).
const pendingRedisCluster = "(cluster/redis.sh addrs)"

// clusterAddrs points in and deploy at the clustered components' nodes,
// as their scripts print them.
func clusterAddrs(ctx context.Context, run func(ctx context.Context, component string, args ...string) (string, error), in *harness.Infra, deploy *bench.Deploy) error {
	envOf := func(component, key string) (string, error) {
		out, err := run(ctx, component, "env")
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(out, "\n") {
			k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
			if ok && k == key {
				return strings.Trim(v, `'"`), nil
			}
		}
		return "", fmt.Errorf("cluster/%s.sh env printed no %s", component, key)
	}
	if deploy.RedisCluster == pendingRedisCluster {
		out, err := run(ctx, "redis", "addrs")
		if err != nil {
			return err
		}
		deploy.RedisCluster = strings.TrimSpace(out)
	}
	for _, c := range deploy.Clustered {
		var err error
		var v string
		switch c {
		case "zookeeper":
			if v, err = envOf(c, "SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS"); err == nil {
				in.ZooKeeperAddrs = harness.SplitList(v)
			}
		case "postgres":
			if v, err = envOf(c, "SUNDIAL_TEST_PG_HA_DSN"); err == nil {
				in.PostgresDSN = v
			}
		case "kafka":
			if v, err = envOf(c, "SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS"); err == nil {
				in.KafkaBrokers = harness.SplitList(v)
			}
		case "cassandra":
			if v, err = envOf(c, "SUNDIAL_TEST_CASSANDRA_RING_HOSTS"); err == nil {
				in.CassandraHosts = harness.SplitList(v)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scriptRunner runs deploy/local/<name> of the checkout at root with the
// args it is given, logging what it printed.
func scriptRunner(root, name string, log *slog.Logger) func(ctx context.Context, args ...string) error {
	return func(ctx context.Context, args ...string) error {
		_, err := scriptOutput(ctx, root, name, log, args...)
		return err
	}
}

// scriptOutput runs deploy/local/<name> with args and returns its standard
// output (its standard error is logged, and quoted on failure).
func scriptOutput(ctx context.Context, root, name string, log *slog.Logger, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy/local", name), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	log.Info(name+" "+strings.Join(args, " "), "output", strings.TrimSpace(string(out)+stderr.String()))
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

func runChaos(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sundial-bench chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f chaosFlags
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
	if err := markClustered(f.cluster, &f.deploy); err != nil {
		fmt.Fprintf(stderr, "sundial-bench chaos: %v\n", err)
		return 2
	}
	if !set["rows"] && !f.quick {
		f.rows = strings.Join(bench.ChaosRowsFor(f.deploy), ",")
	}
	if err := f.finish(); err != nil {
		fmt.Fprintf(stderr, "sundial-bench chaos: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := executeChaos(ctx, f, args, log, stdout); err != nil {
		fmt.Fprintf(stderr, "sundial-bench chaos: %v\n", err)
		return 1
	}
	return 0
}

func executeChaos(ctx context.Context, f chaosFlags, args []string, log *slog.Logger, stdout io.Writer) error {
	root, in, err := components(ctx, f.infraUp, log)
	if err != nil {
		return err
	}
	infraDir := os.Getenv("SUNDIAL_INFRA_DIR") // infra.sh's own override, passed on to it
	if infraDir == "" {
		infraDir = filepath.Join(root, ".infra")
	}
	workDir := f.workDir
	if workDir == "" {
		workDir = filepath.Join(root, ".run", "bench", "chaos-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	binDir := f.binDir
	if binDir == "" {
		binDir = filepath.Join(workDir, "bin")
		log.Info("building the services", "into", binDir)
		if err := harness.Build(ctx, root, binDir); err != nil {
			return err
		}
	}
	cfg := f.cfg
	cfg.Infra = scriptRunner(root, "infra.sh", log)
	cfg.Cluster = func(ctx context.Context, component string, args ...string) (string, error) {
		return scriptOutput(ctx, root, "cluster/"+component+".sh", log, args...)
	}
	deploy := f.deploy
	if err := clusterAddrs(ctx, cfg.Cluster, &in, &deploy); err != nil {
		return err
	}
	// The matrix stops components but never changes their settings.
	deploy.Durable = "Postgres commits as the cluster has them (see Durability)"
	r, err := bench.NewRunner(bench.Options{
		Deploy:   deploy,
		InfraDir: infraDir, Infra: in, BinDir: binDir, WorkDir: workDir, Logger: log, Clock: clock.Real{},
		Window: f.window, Jitter: time.Second, Executors: f.executors, WorkerArgs: strings.Fields(f.workerArgs),
		Settle: f.settle, Quick: f.quick,
	})
	if err != nil {
		return err
	}
	env := bench.Describe(ctx, infraDir, in)
	started := time.Now()
	res, runErr := r.Chaos(ctx, cfg)
	var b strings.Builder
	title := started.UTC().Format("2006-01-02 15:04") + " UTC"
	if f.quick {
		title += " — quick (the make test subset)"
	}
	fmt.Fprintf(&b, "### %s\n\n", title)
	fmt.Fprintf(&b, "- Command: `sundial-bench chaos %s`\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "- Machine: %s\n", env.Machine)
	fmt.Fprintf(&b, "- Load average (1/5/15 min) at the start: %s; at the end: %s\n", env.LoadStart, bench.LoadAvg())
	fmt.Fprintf(&b, "- Versions: %s; Sundial at %s\n", env.Versions, gitDescribe(ctx, root))
	fmt.Fprintf(&b, "- Durability: %s\n", env.Durability)
	fmt.Fprintf(&b, "- Load: %d jobs firing every second at the sink and %d at a second target, each firing jittered within its second (max_jitter 1 s); two of every service; prefetch window %s; %d executors per worker\n\n",
		cfg.Rate, cfg.HangJobs, f.window, f.executors)
	b.WriteString(bench.ChaosMarkdown(res))
	fmt.Fprint(stdout, b.String())
	if runErr != nil {
		return runErr
	}
	if len(res.Problems) > 0 {
		return fmt.Errorf("%d correctness problems (lost or duplicated firings, bad deliveries):\n%s", len(res.Problems), strings.Join(res.Problems, "\n"))
	}
	log.Info("done", "took", time.Since(started).Round(time.Second), "logs", workDir)
	return nil
}

// gitDescribe is the checkout's commit (and whether it has local changes).
func gitDescribe(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown commit"
	}
	return strings.TrimSpace(string(out))
}
