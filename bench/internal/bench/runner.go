// Package bench measures a Sundial deployment the way its users would see
// it: jobs registered through the api fire an HTTP sink, and the sink's
// arrival instant minus the firing's fire instant is the lateness. Load is
// open-loop: every due instant is fixed by the registered schedules before
// the measurement starts, so a slow platform shows up as lateness, never as
// a lower offered rate.
//
// Each scenario (steady, max, burst, registered, priority, failover) runs on a
// deployment of its own (processes of the built binaries, a namespace of
// its own in the shared components) and returns one table row plus
// details. See docs/benchmarks.md.
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/harness"
)

// Options are the settings every scenario shares.
type Options struct {
	InfraDir   string // where deploy/local/infra.sh keeps the components' pid files
	Infra      harness.Infra
	BinDir     string // built service binaries
	WorkDir    string // logs of every process go under <WorkDir>/logs
	ProfileDir string // when set, CPU profiles of each service are written here
	// KeepProblemNamespaces leaves the namespace (schema, keyspace,
	// topics, group, Redis keys, election path) of a scenario that found
	// a correctness problem behind, to follow it through the components;
	// the log names it.
	KeepProblemNamespaces bool
	Logger                *slog.Logger
	Clock                 clock.Clock

	// Window is the prefetcher's staging window (its --window).
	Window time.Duration
	// Jitter is the max_jitter of the rate scenarios' jobs: their firings
	// spread uniformly over [slot, slot+Jitter). Zero fires every job of a
	// second at the same instant.
	Jitter time.Duration
	// Executors is each worker's --executors.
	Executors int
	// WorkerArgs are more flags for every worker, after the bench's own
	// (so a later one wins), for comparing worker settings run to run.
	WorkerArgs []string
	// PrefetcherArgs are more flags for every prefetcher of the rate
	// scenarios' deployments, after the bench's own.
	PrefetcherArgs []string
	// RegisterConcurrency is how many CreateJob calls are in flight.
	RegisterConcurrency int
	// Settle is the wait between registering jobs and their first
	// measured slot, beyond the registration itself (see Runner.lead).
	Settle time.Duration
	// Deploy configures every deployment beyond its size (DefaultDeploy:
	// what make run deploys).
	Deploy Deploy
	// Quick marks the CI smoke run: scenarios share one deployment and
	// their jobs stop with the measurement (see Runner.tail).
	Quick bool
}

// Runner runs scenarios.
type Runner struct {
	opts            Options
	log             *slog.Logger
	clock           clock.Clock
	topicPartitions int

	mu      sync.Mutex
	regRate float64 // CreateJob calls per second measured so far (0: none yet)
}

// NewRunner checks opts and fills defaults.
func NewRunner(opts Options) (*Runner, error) {
	if opts.BinDir == "" || opts.WorkDir == "" {
		return nil, fmt.Errorf("bench: BinDir and WorkDir are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Window <= 0 {
		opts.Window = 2 * time.Minute
	}
	if opts.Executors <= 0 {
		opts.Executors = 128
	}
	if opts.RegisterConcurrency <= 0 {
		opts.RegisterConcurrency = 16
	}
	if opts.ProfileDir != "" {
		if err := os.MkdirAll(opts.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.WorkDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	return &Runner{
		opts:            opts,
		log:             opts.Logger,
		clock:           opts.Clock,
		topicPartitions: 4,
	}, nil
}

// serviceEnv is the environment every service of a deployment gets beyond
// the namespace: settings a service without the flag ignores.
func (r *Runner) serviceEnv(sinkAddrs string) []string {
	env := []string{
		// The worker refuses loopback targets unless allowlisted; the sink
		// is one.
		"SUNDIAL_ALLOW_TARGET_ADDRS=" + sinkAddrs,
		// Topics the relay creates.
		fmt.Sprintf("SUNDIAL_TOPIC_PARTITIONS=%d", r.topicPartitions),
	}
	if !r.opts.Deploy.APILimits {
		// The api's per-tenant quotas would refuse a benchmark's job count
		// and creation rate, and so would the per-token request rate
		// limit: registration runs CreateJob calls as fast as the api
		// answers them. 0 is no limit. Only registration passes through
		// the api, so the firings measured are make run's either way.
		env = append(env, "SUNDIAL_QUOTA_MAX_JOBS=0", "SUNDIAL_QUOTA_CREATE_RATE_PER_MINUTE=0", "SUNDIAL_RATE_LIMIT=0")
	}
	if slices.Contains(r.opts.Deploy.Clustered, "cassandra") {
		// The api creates the ledger keyspace on the ring replicated to
		// every node.
		env = append(env, "SUNDIAL_CASSANDRA_REPLICATION="+RingReplication)
	}
	if c := r.opts.Deploy.RedisCluster; c != "" {
		// After the platform's own SUNDIAL_REDIS_ADDR, so it wins.
		env = append(env, "SUNDIAL_REDIS_ADDR="+c)
	}
	return env
}

// lead is how long before the first slot n jobs are registered: the
// registration itself (at the throughput measured so far) plus Settle.
// Jobs whose first slots fall inside the prefetcher's window at
// registration have a window's worth of slots staged, published and
// consumed at once; Settle is there for that burst to be over before the
// measurement starts (scenarios report the pipeline's state at their first
// slot to show it was).
func (r *Runner) lead(n int) time.Duration {
	r.mu.Lock()
	rate := r.regRate
	r.mu.Unlock()
	if rate <= 0 {
		rate = 300 // a cautious first guess for a loaded 2-core machine
	}
	// The rate was measured on a smaller registration; a large one slows
	// as the jobs table and its indexes grow (the burst's 100,000 went at
	// about 360 jobs/s after a calibration of 572), so it gets a wider
	// margin.
	margin := 1.3
	if n >= 10_000 {
		margin = 1.8
	}
	if r.opts.Quick {
		// Quick runs go beside the rest of make test (chaos-quick's own
		// deployment registers its thousand jobs at the same time), and
		// their rate comes from a registration of a hundred: in CI the
		// burst's 605 went at 68 jobs/s after one at 157 and missed its
		// 2 s margin by a second. Their leads are seconds, so a wide
		// margin costs little.
		margin = 2.5
	}
	return time.Duration(float64(n)/rate*margin*float64(time.Second)) + 3*time.Second + r.opts.Settle
}

// tail is how long per-second jobs go on after the last measured slot:
// one window, so staging and publishing continue through the measurement
// as they would in a steady state. Quick runs share a deployment between
// scenarios and skip it, so no scenario's load runs into the next.
func (r *Runner) tail() time.Duration {
	if r.opts.Quick {
		return 0
	}
	return r.opts.Window + 10*time.Second
}

// noteRegistration records a registration's throughput for later leads.
func (r *Runner) noteRegistration(n int, took time.Duration) {
	if n < 100 || took <= 0 {
		return
	}
	r.mu.Lock()
	r.regRate = float64(n) / took.Seconds()
	r.mu.Unlock()
}

// Sleep waits d on c, or until ctx ends.
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// sleepUntil waits until instant t on c, or until ctx ends.
func sleepUntil(ctx context.Context, c clock.Clock, t time.Time) error {
	return Sleep(ctx, c, t.Sub(c.Now()))
}
