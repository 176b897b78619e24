// Package app composes the worker from its parts, so main and the
// in-process integration tests build exactly the same thing.
//
// Start order (stop is the reverse): connections, clock estimator,
// liveness key, deferred markers, ledger recorder, signing keys, notifier,
// poison forwarder, GOMAXPROCS governor, fire holder, prepare holder,
// prepare stage, versions watch, executor pool (with its settlers),
// consumer, lag exporter. The consumer stops first (after the lag
// exporter): it stops fetching and leaves the group, and its final revoke
// waits for the executing firings — which need the executors, the
// recorder, Redis and Cassandra still running. New builds them in that
// order, one step per part (build.go).
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/clockoffset"
	"github.com/sundialhq/sundial/services/worker/internal/consumer"
	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/limits"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/procs"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/recorder"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Check is a readiness check.
type Check = admin.Check

// Worker is the composed worker.
type Worker struct {
	Services []lifecycle.Service
	Checks   map[string]Check

	Consumer *consumer.Consumer
	// Holder is where the consumer puts arriving firings: the prepare
	// holder, with the fire holder counted in its Len.
	Holder    *stages
	Queue     *readyq.Queue
	Estimator *clockoffset.Estimator // nil without --postgres-dsn
	Metrics   *metrics.Metrics
	// Breakers is the per-host circuit breaker (nil when disabled, or
	// when Limits holds them).
	Breakers *hostguard.Breakers
	// Limits are the limits held across the cluster (nil when no limit
	// is set).
	Limits *limits.Guard
}

// Deps lets tests replace what the worker would otherwise connect to.
type Deps struct {
	// Ledger replaces the Cassandra writer.
	Ledger recorder.Ledger
	// Clock replaces the local wall clock (before --clock-offset).
	Clock clock.Clock
	// KafkaOpts are extra options for the consumer's client.
	KafkaOpts []kgo.Opt
	// Environ is the process environment (os.Environ); leftover
	// SUNDIAL_SECRET_* variables (no longer read: secrets are per tenant)
	// are warned about. main passes it so nothing deeper reads the
	// environment.
	Environ []string
	// Tracer traces firings through the worker; nil: tracing off.
	Tracer trace.Tracer
	// RedisDialer replaces how connections to Redis are made (tests cut
	// a worker off from Redis with it).
	RedisDialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New builds the worker. Nothing runs until its Services are started; the
// connections it opens are closed by the first service's Stop (the last to
// stop).
//
// It builds the parts in the order they start (the package doc), one step
// each, every step taking what the earlier ones built: the clocks, Redis,
// the ledger and its recorder, the Kafka producer, the outbound side
// (targets and their signing keys), callbacks and poison records, the
// prepare and fire stages, the executors with the settle stage, and the
// consumer with its lag exporter. Each step appends its services and
// readiness checks to the worker and what it opens to the closer, so when
// one fails, everything opened before it is closed.
func New(ctx context.Context, cfg Config, deps Deps, logger *slog.Logger, reg prometheus.Registerer) (w *Worker, err error) {
	secret, err := cfg.Secret()
	if err != nil {
		return nil, err
	}
	cl := &closer{}
	defer func() {
		if err != nil {
			cl.Stop()
		}
	}()
	watched, err := cfg.WatchedJobs()
	if err != nil {
		return nil, fmt.Errorf("metrics-job-ids: %w", err)
	}
	m := metrics.New(reg, cfg.MetricsMaxTenants, watched...)
	w = &Worker{Metrics: m, Checks: map[string]Check{}}
	w.Services = append(w.Services, cl)
	b := &builder{cfg: cfg, deps: deps, logger: logger, reg: reg, m: m, w: w, cl: cl}

	clk, err := b.clocks()
	if err != nil {
		return nil, err
	}
	rs, err := b.redis(clk)
	if err != nil {
		return nil, err
	}
	spill := &spillPool{}
	led, err := b.ledger(ctx, spill)
	if err != nil {
		return nil, err
	}
	q := b.readyQueue(clk)
	rec := b.recorder(led.writer, spill, q)
	kafka, err := b.producer()
	if err != nil {
		return nil, err
	}
	out, err := b.outbound(ctx, secret, clk, rs, kafka.producer)
	if err != nil {
		return nil, err
	}
	nt, poison := b.callbacks(secret, clk, out, kafka.dlq)
	st, err := b.stages(clk, rs, led, rec, q)
	if err != nil {
		return nil, err
	}
	if err := b.fireAndSettle(ctx, clk, rs, st, out.fire, rec, nt, kafka.dlq, spill); err != nil {
		return nil, err
	}
	if err := b.consumer(clk, st, kafka, poison); err != nil {
		return nil, err
	}
	if err := b.evictor(clk, rs, kafka); err != nil {
		return nil, err
	}
	return w, nil
}

// builder is what every step of New reads (the settings, the replacements,
// the logger, the registry and the metrics) and fills in (the worker's
// services and checks, and the closer of what was opened).
type builder struct {
	cfg    Config
	deps   Deps
	logger *slog.Logger
	reg    prometheus.Registerer
	m      *metrics.Metrics
	w      *Worker
	cl     *closer
}

// run appends services to the worker in the order they are to start (and
// the reverse of the order they stop).
func (b *builder) run(s ...lifecycle.Service) { b.w.Services = append(b.w.Services, s...) }

// heldShares is the back-pressure per priority topic: MEDIUM's and LOW's
// parts of --max-held, so a LOW or MEDIUM backlog pauses its own topics
// and HIGH fetches on (CRITICAL is never paused).
func heldShares(topics firing.Topics, cfg Config) []consumer.TopicShare {
	var out []consumer.TopicShare
	for _, s := range []struct {
		p   sundialv1.Priority
		pct int
	}{{sundialv1.Priority_PRIORITY_MEDIUM, cfg.MediumHeldPercent}, {sundialv1.Priority_PRIORITY_LOW, cfg.LowHeldPercent}} {
		if s.pct > 0 {
			out = append(out, consumer.TopicShare{Topic: topics.Fire(s.p), Percent: s.pct})
		}
	}
	return out
}

// closer closes connections when stopped; it is the first service started
// and so the last stopped.
type closer struct{ fns []func() }

func (c *closer) add(f func())                    { c.fns = append(c.fns, f) }
func (c *closer) Start(ctx context.Context) error { return nil }
func (c *closer) Stop() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// stages is the consumer's view of the worker's stages: arriving firings go
// to the prepare holder, and a revoke takes back those not yet prepared (a
// prepared one is claimed, so the revoke waits for it to fire instead).
// Len counts every firing waiting in memory — both holders, the firings
// the prepare stage has not leased yet and the ready queue — for
// sundial_worker_held_firings. (--max-held is the consumer's:
// it counts per topic what it fetched and is not finished, so a backlog of
// one priority pauses that priority's topic.)
type stages struct {
	prepare, fire *holder.Holder
	ready         *readyq.Queue
	unleased      func() int
}

func (s *stages) AddAfter(it *work.Item, notBefore int64) {
	s.prepare.AddAfter(it, notBefore)
}
func (s *stages) Remove(it *work.Item) bool { return s.prepare.Remove(it) }
func (s *stages) Len() int {
	return s.prepare.Len() + s.unleased() + s.fire.Len() + s.ready.Len()
}

// A release of a whole chunk of the fire holder's (holder.ReleaseChunk)
// at once is a herd, and GOMAXPROCS goes up before it is fired. A whole
// chunk, not a few dozen: a spread load of 1,000/s gathers 32 due firings
// in any 32 ms the holder is woken late (a busy machine, a collection),
// and each such "herd" held the worker at every P for the governor's calm
// span, at more CPU per firing than one P; a herd smaller than a chunk is
// a few milliseconds of requests for one P.
const herdChunk = holder.ReleaseChunk

// applyGCPercent applies --gc-percent, unless it is 0 or the GOGC
// variable is set (then the operator's figure stays).
func applyGCPercent(cfg Config, logger *slog.Logger) {
	switch {
	case cfg.GCPercent == 0:
	case os.Getenv("GOGC") != "":
		logger.Info("GOGC is set: --gc-percent leaves it", "gogc", os.Getenv("GOGC"))
	default:
		debug.SetGCPercent(cfg.GCPercent)
	}
}

// procsGovernor applies --procs: auto returns the governor that sizes
// GOMAXPROCS to the load (unless the GOMAXPROCS variable is set: then the
// operator's figure stays); a number sets it once, and empty leaves it. In
// those cases the governor returned does nothing and the gauge is set once.
func procsGovernor(cfg Config, clk clock.Clock, m *metrics.Metrics, logger *slog.Logger) (*procs.Governor, error) {
	auto, fixed, err := cfg.procsSetting()
	if err != nil {
		return nil, err
	}
	pc := procs.DefaultConfig
	switch {
	case fixed > 0:
		runtime.GOMAXPROCS(fixed)
	case auto && os.Getenv("GOMAXPROCS") != "":
		logger.Info("GOMAXPROCS is set: --procs auto leaves it", "gomaxprocs", runtime.GOMAXPROCS(0))
	case auto:
		pc.Max = runtime.GOMAXPROCS(0)
	}
	if pc.Max <= 1 {
		m.Procs.Set(float64(runtime.GOMAXPROCS(0)))
		return procs.New(pc, clk, logger), nil
	}
	return procs.New(pc, clk, logger, procs.WithReport(func(n int) { m.Procs.Set(float64(n)) })), nil
}
