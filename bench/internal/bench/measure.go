package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/store/lease"
	"github.com/sundialhq/sundial/testkit/harness"
)

// infraComponents are the five components deploy/local/infra.sh runs.
var infraComponents = []string{"postgres", "kafka", "cassandra", "redis", "zookeeper"}

// infraPid is the pid of a component infra.sh started in this checkout, or
// 0 when it is not found (the components run elsewhere).
func (r *Runner) infraPid(component string) int {
	return harness.ComponentPid(r.opts.InfraDir, component)
}

// UsageSnap is the CPU and memory of every process that matters at one
// instant: the deployment's services, the five components (Postgres with
// its backends), the benchmark itself (the sink and the load) and the
// whole machine ("machine", from /proc/stat).
type UsageSnap map[string]harness.Usage

type usageSnap = UsageSnap

// usageOrder lists the names of a snapshot in report order.
func usageOrder(s usageSnap) []string {
	rank := func(n string) int {
		for i, p := range []string{"api", "prefetcher", "relay", "worker", "postgres", "kafka", "cassandra", "redis", "zookeeper", "bench"} {
			if strings.HasPrefix(n, p) {
				return i
			}
		}
		return 99
	}
	var names []string
	for n := range s {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if rank(names[i]) != rank(names[j]) {
			return rank(names[i]) < rank(names[j])
		}
		return names[i] < names[j]
	})
	return names
}

func (r *Runner) snapUsage(d *deployment) usageSnap {
	now := r.clock.Now()
	s := usageSnap{}
	for _, pr := range d.services() {
		if u, err := pr.Usage(now); err == nil {
			s[pr.Name] = u
		}
	}
	for _, c := range infraComponents {
		if r.clustered(c) {
			if u, ok := r.clusterUsage(now, c); ok {
				s[c] = u
			}
			continue
		}
		if pid := r.infraPid(c); pid != 0 {
			if u, err := harness.ReadUsage(pid, c == "postgres", now); err == nil {
				s[c] = u
			}
		}
	}
	if u, err := harness.ReadUsage(os.Getpid(), false, now); err == nil {
		s[BenchKey] = u
	}
	if u, err := ReadMachineUsage(now); err == nil {
		s[machineKey] = u
	}
	return s
}

// clustered reports whether the deployment reaches component in the
// cluster profile's clustered mode.
func (r *Runner) clustered(component string) bool {
	if component == "redis" && r.opts.Deploy.RedisCluster != "" {
		return true
	}
	return slices.Contains(r.opts.Deploy.Clustered, component)
}

// clusterNodeDirs are where deploy/local/cluster/<component>.sh keeps each
// node's files under the infra directory: each holds the node's pid file
// (Postgres's postmaster.pid under data/).
var clusterNodeDirs = map[string][]string{
	"zookeeper": {"zk-ensemble/1", "zk-ensemble/2", "zk-ensemble/3"},
	"kafka":     {"kafka-cluster/1", "kafka-cluster/2", "kafka-cluster/3"},
	"cassandra": {"cassandra-ring/1", "cassandra-ring/2", "cassandra-ring/3"},
	"postgres":  {"pg-ha/a", "pg-ha/b"},
}

// clusterPidFiles are the pid files of the component's clustered nodes:
// the Redis Cluster's by the ports of Deploy.RedisCluster, the others'
// by clusterNodeDirs.
func (r *Runner) clusterPidFiles(component string) []string {
	var files []string
	switch component {
	case "redis":
		for _, addr := range strings.Split(r.opts.Deploy.RedisCluster, ",") {
			_, port, err := net.SplitHostPort(strings.TrimSpace(addr))
			if err != nil {
				return nil
			}
			files = append(files, filepath.Join(r.opts.InfraDir, "redis-cluster", port, "pid"))
		}
	case "postgres":
		for _, d := range clusterNodeDirs[component] {
			files = append(files, filepath.Join(r.opts.InfraDir, d, "data", "postmaster.pid"))
		}
	default:
		for _, d := range clusterNodeDirs[component] {
			files = append(files, filepath.Join(r.opts.InfraDir, d, "pid"))
		}
	}
	return files
}

// clusterUsage is a clustered component's nodes (started by
// deploy/local/cluster/<component>.sh in this checkout) summed as one
// component; not ok unless every node is found, so a node killed by a
// chaos row does not read as CPU given back.
func (r *Runner) clusterUsage(now time.Time, component string) (harness.Usage, bool) {
	files := r.clusterPidFiles(component)
	if len(files) == 0 {
		return harness.Usage{}, false
	}
	var sum harness.Usage
	for _, f := range files {
		pid := harness.PidFile(f)
		if pid == 0 {
			return harness.Usage{}, false
		}
		u, err := harness.ReadUsage(pid, component == "postgres", now)
		if err != nil {
			return harness.Usage{}, false
		}
		sum.At, sum.CPU, sum.RSS, sum.PeakRSS = u.At, sum.CPU+u.CPU, sum.RSS+u.RSS, sum.PeakRSS+u.PeakRSS
	}
	return sum, true
}

// at is when the snapshot was read (by the machine's reading, else any
// process's).
func (s UsageSnap) at() time.Time {
	if u, ok := s[machineKey]; ok {
		return u.At
	}
	for _, u := range s {
		return u.At
	}
	return time.Time{}
}

// window is the time between two snapshots (by the machine's reading,
// else any process's).
func (s UsageSnap) window(prev UsageSnap) time.Duration {
	if u, ok := s[machineKey]; ok {
		if p, ok := prev[machineKey]; ok {
			return u.At.Sub(p.At)
		}
	}
	for n, u := range s {
		if p, ok := prev[n]; ok {
			return u.At.Sub(p.At)
		}
	}
	return 0
}

// cpuOf is the cores a process used between a and b.
func cpuOf(a, b usageSnap, name string) (float64, bool) {
	ua, ok1 := a[name]
	ub, ok2 := b[name]
	if !ok1 || !ok2 {
		return 0, false
	}
	return ub.Cores(ua), true
}

// usageLine renders "name cores/RSS" for every process in both snapshots.
func usageLine(a, b usageSnap) string {
	var parts []string
	for _, n := range usageOrder(b) {
		c, ok := cpuOf(a, b, n)
		if !ok {
			continue
		}
		rss := b[n].RSS
		if n == "bench" || strings.HasPrefix(n, "api") || strings.HasPrefix(n, "prefetcher") || strings.HasPrefix(n, "relay") || strings.HasPrefix(n, "worker") {
			parts = append(parts, fmt.Sprintf("%s %.2f/%s", n, c, mib(rss)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.2f", n, c))
		}
	}
	return strings.Join(parts, ", ")
}

func mib(b int64) string { return fmt.Sprintf("%dM", b>>20) }

// serviceUsageCells is "cores / RSS" of each service kind, summed over the
// processes of the kind, for the table's columns.
func serviceUsageCells(a, b usageSnap) []string {
	var cells []string
	for _, kind := range []string{"api", "prefetcher", "relay", "worker"} {
		var cores float64
		var rss int64
		found := false
		for n := range b {
			if !strings.HasPrefix(n, kind) {
				continue
			}
			if c, ok := cpuOf(a, b, n); ok {
				cores += c
				rss += b[n].RSS
				found = true
			}
		}
		if !found {
			cells = append(cells, "–")
			continue
		}
		cells = append(cells, fmt.Sprintf("%.2f / %s", cores, mib(rss)))
	}
	return cells
}

// profiles captures a CPU profile of every running service of d for dur,
// into <ProfileDir>/<scenario>-<process>.pprof. It returns at once; wait
// blocks until every capture ended and returns the files written.
func (r *Runner) profiles(ctx context.Context, d *deployment, scenario string, dur time.Duration) (wait func() []string) {
	if r.opts.ProfileDir == "" {
		return func() []string { return nil }
	}
	secs := max(int(dur/time.Second), 1)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		files []string
	)
	for _, pr := range d.services() {
		wg.Add(2)
		go func() {
			defer wg.Done()
			path := filepath.Join(r.opts.ProfileDir, scenario+"-"+pr.Name+".pprof")
			if err := fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pr.Admin, secs), time.Duration(secs+30)*time.Second, path); err != nil {
				r.log.Warn("profile not captured", "process", pr.Name, "err", err)
				return
			}
			mu.Lock()
			files = append(files, path)
			mu.Unlock()
		}()
		// Halfway through, where every goroutine waits: a CPU profile
		// shows what a process spends, not what its firings wait for.
		go func() {
			defer wg.Done()
			if Sleep(ctx, r.clock, dur/2) != nil {
				return
			}
			path := filepath.Join(r.opts.ProfileDir, scenario+"-"+pr.Name+".goroutines.txt")
			if err := fetch(ctx, "http://"+pr.Admin+"/debug/pprof/goroutine?debug=1", 30*time.Second, path); err != nil {
				r.log.Warn("goroutine dump not captured", "process", pr.Name, "err", err)
			}
		}()
	}
	return func() []string {
		wg.Wait()
		sort.Strings(files)
		return files
	}
}

// fetch GETs url into the file at path, bounded by timeout.
func fetch(ctx context.Context, url string, timeout time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// histogram reads one histogram of the process (merged over label sets
// matching labels); the zero histogram when it cannot.
func histogram(ctx context.Context, pr *harness.Process, name string, labels ...string) harness.Histogram {
	m, err := pr.Metrics(ctx)
	if err != nil {
		return harness.Histogram{}
	}
	h, _ := m.Histogram(name, labels...)
	return h
}

// leaderOf is the prefetcher that says it leads, or nil.
func leaderOf(ctx context.Context, ps []*harness.Process) *harness.Process {
	for _, pr := range ps {
		if !pr.Alive() {
			continue
		}
		if m, err := pr.Metrics(ctx); err == nil {
			if v, ok := m.Value("sundial_prefetcher_leader"); ok && v == 1 {
				return pr
			}
		}
	}
	return nil
}

// FormatLatency renders a latency for a table: ms with up to 3 significant
// digits.
func FormatLatency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 10000:
		return fmt.Sprintf("%.1f s", ms/1000)
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f ms", ms)
	}
}

// sumGauge adds a gauge over processes (labels as in Metrics.Value); max
// instead of sum with takeMax (for gauges every replica reads from one
// shared table).
func sumGauge(ctx context.Context, ps []*harness.Process, name string, takeMax bool) float64 {
	total := 0.0
	for _, pr := range ps {
		if !pr.Alive() {
			continue
		}
		m, err := pr.Metrics(ctx)
		if err != nil {
			continue
		}
		v, _ := m.Value(name)
		if takeMax {
			total = max(total, v)
		} else {
			total += v
		}
	}
	return total
}

// stagedAhead is every firing staged and not yet fired: rows in the
// outbox, records in Kafka the workers have not fetched, firings the
// workers hold. What a deletion of every job leaves to drop.
func stagedAhead(ctx context.Context, d *deployment) float64 {
	return sumGauge(ctx, d.relays, "sundial_relay_outbox_rows", true) +
		sumGauge(ctx, d.workers, "sundial_worker_consumer_lag_records", false) +
		sumGauge(ctx, d.workers, "sundial_worker_held_firings", false)
}

// pipelineState says where the firings are: rows in the outbox, records not
// yet fetched by the workers, firings held until their instant.
func (d *deployment) pipelineState(ctx context.Context) string {
	return fmt.Sprintf("outbox %.0f rows (%.0f due), workers' consumer lag %.0f records, %.0f firings held by the workers",
		sumGauge(ctx, d.relays, "sundial_relay_outbox_rows", true),
		sumGauge(ctx, d.relays, "sundial_relay_outbox_due_rows", true),
		sumGauge(ctx, d.workers, "sundial_worker_consumer_lag_records", false),
		sumGauge(ctx, d.workers, "sundial_worker_held_firings", false))
}

// gauge is one sampled series' mean and maximum.
type gauge struct {
	name     string
	sum, max float64
	n        int
}

// sampleGauges samples the pipeline's queues every second until stop,
// which returns their means and maxima: where firings wait when they are
// late.
func (r *Runner) sampleGauges(ctx context.Context, d *deployment) (stop func() string) {
	series := []struct {
		name    string
		ps      []*harness.Process
		metric  string
		takeMax bool
	}{
		{"ready queue", d.workers, "sundial_worker_ready_queue_depth", false},
		{"executing", d.workers, "sundial_worker_executing", false},
		{"held", d.workers, "sundial_worker_held_firings", false},
		{"consumer lag", d.workers, "sundial_worker_consumer_lag_records", false},
		{"outbox due rows", d.relays, "sundial_relay_outbox_due_rows", true},
		{"worker GOMAXPROCS", d.workers, "sundial_worker_procs", false},
	}
	gs := make([]gauge, len(series))
	for i, s := range series {
		gs[i].name = s.name
	}
	idle := counterSince(ctx, func() []*harness.Process { return d.workers }, "sundial_worker_executor_idle_while_due_seconds_total")
	from := r.clock.Now()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i, s := range series {
				v := sumGauge(sctx, s.ps, s.metric, s.takeMax)
				gs[i].sum += v
				gs[i].max = max(gs[i].max, v)
				gs[i].n++
			}
			if Sleep(sctx, r.clock, time.Second) != nil {
				return
			}
		}
	}()
	return func() string {
		cancel()
		<-done
		var parts []string
		for _, g := range gs {
			if g.n > 0 {
				parts = append(parts, fmt.Sprintf("%s mean %.0f max %.0f", g.name, g.sum/float64(g.n), g.max))
			}
		}
		parts = append(parts, fmt.Sprintf("executors idle while a firing that could start waited %.3f executor-s in %s",
			idle(ctx), r.clock.Now().Sub(from).Round(time.Second)))
		return strings.Join(parts, "; ")
	}
}

// counterSince reads a counter of every process ps gives now and returns
// what reads how much it grew since, summed over the processes ps gives
// then: one that died in between is left out with what it counted, one
// started since (a replaced worker) counts from zero.
func counterSince(ctx context.Context, ps func() []*harness.Process, name string) func(context.Context) float64 {
	read := func(ctx context.Context, pr *harness.Process) (float64, bool) {
		if !pr.Alive() {
			return 0, false
		}
		m, err := pr.Metrics(ctx)
		if err != nil {
			return 0, false
		}
		return m.Value(name)
	}
	start := map[*harness.Process]float64{}
	for _, pr := range ps() {
		if v, ok := read(ctx, pr); ok {
			start[pr] = v
		}
	}
	return func(ctx context.Context) float64 {
		total := 0.0
		for _, pr := range ps() {
			if v, ok := read(ctx, pr); ok {
				total += max(v-start[pr], 0)
			}
		}
		return total
	}
}

// redisSnap is what the shared Redis holds at one instant: the bytes its
// allocator reports in use and its number of keys.
type redisSnap struct {
	used, keys int64
	ok         bool
}

// snapRedis reads INFO memory's used_memory and DBSIZE: two cheap calls,
// neither of which walks the keyspace, so sampling them does not disturb
// the run being measured.
func (r *Runner) snapRedis(ctx context.Context) redisSnap {
	rdb := redis.NewClient(&redis.Options{Addr: r.opts.Infra.RedisAddr})
	defer func() { _ = rdb.Close() }()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return redisSnap{}
	}
	var s redisSnap
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			s.used, err = strconv.ParseInt(v, 10, 64)
			s.ok = err == nil
		}
	}
	if s.keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return redisSnap{}
	}
	return s
}

// redisGrowth says how Redis grew per firing between a and b and what that
// comes to when every firing's markers live for ttl at rate firings/s:
// the markers' steady state, since a marker written in the window outlives
// it. Other clients of the same Redis add to it, so read it on a quiet one.
func redisGrowth(a, b redisSnap, firings int, rate int, ttl time.Duration) string {
	if !a.ok || !b.ok || firings <= 0 {
		return "not read"
	}
	per := float64(b.used-a.used) / float64(firings)
	keys := float64(b.keys-a.keys) / float64(firings)
	steady := per * float64(rate) * ttl.Seconds()
	return fmt.Sprintf("used_memory %s → %s, %.0f bytes and %.2f keys per firing over %d firings; at %d/s with markers of %s: ≈ %.2f GiB",
		mib(a.used), mib(b.used), per, keys, firings, rate, ttl, steady/(1<<30))
}

// markerTTL is how long the deployment's workers keep a firing's done
// marker and delivery counter: their --done-ttl when the bench passes one,
// the worker's default otherwise.
func (d *deployment) markerTTL() time.Duration {
	args := append(append([]string(nil), d.r.opts.WorkerArgs...), d.topo.workerArgs...)
	ttl := lease.DefaultMarkerTTL
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--done-ttl=")
		if !ok && a == "--done-ttl" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			if t, err := time.ParseDuration(v); err == nil {
				ttl = t
			}
		}
	}
	return ttl
}
