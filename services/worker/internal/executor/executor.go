// Package executor is the worker's fire and settle stages: a bounded pool
// of executors pops the most urgent due firing from the ready queue — its
// lease and fence already taken ahead of the instant by the prepare stage —
// and sends only the request; a small pool of settlers then records what
// followed, several attempts at a time.
//
// The firing path at the instant is fire holder → ready queue → (host rate
// limit) → target. Neither Redis, Postgres nor the ledger is on it: the
// lease was taken before (package prepare), and everything else happens
// after the target answered, off the executor that called it.
//
// After the target answers, the executor hands the attempt to the settle
// stage and pops the next firing. Settlers take turns gathering the
// attempts that end within SettleLinger (up to SettleBatch); each settles
// its group while the others gather, and, while each lease is still held
// and renewed:
//
//  1. decides (pkg retry): SUCCEEDED, RETRY_SCHEDULED or DEAD;
//  2. settles (pkg settle): writes a retry to the outbox, or the dead
//     letter to Postgres and the DLQ topic, and completes a last-slot job —
//     only for the attempts that need it, retried until it succeeds; a pool
//     stopping meanwhile leaves the firing unfinished and its lease
//     released, so it is redelivered;
//  3. marks (Redis, one call for the whole group): the done marker
//     (success) or the attempt marker, which also keeps or clears the
//     overlap policy's running marker and releases the lease;
//  4. notifies the job's callback (asynchronous, best effort);
//  5. hands the final ledger record to the recorder, whose write finishes
//     the firing.
//
// A crash before 3 redelivers the firing and repeats the attempt (1 and 2
// are idempotent); a crash after 3 drops the redelivery as done.
//
// Firings the prepare stage could not lease to fire (stale, overlapping,
// poison, cancelled) come through the ready queue too, and an executor
// records their skip or cancel, or dead-letters them.
//
// A cancelled execution (JobService.CancelExecution, or another execution's
// CANCEL_OTHER or TERMINATE_OTHER) is learnt at the attempt's next lease
// renewal: the attempt's context ends, the request is abandoned, and the
// attempt is settled CANCELLED (never retried) under its lease, naming who
// cancelled; its target is then told (target.CancelNotice). An attempt
// whose target answered before the abandonment keeps its real outcome.
//
// With a tracer, a traced firing's target call and settling are spans
// under its worker.consume span, the target receives the target span's
// context as its traceparent, and a retry is staged with the consume
// span's context, so the next attempt continues the trace.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	"github.com/sundialhq/sundial/pkg/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/notify"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Leaser is the part of lease.Store the fire and settle stages use.
type Leaser interface {
	AcquireMany(ctx context.Context, batch []lease.Acquisition) ([]lease.Result, error)
	Renew(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	Release(ctx context.Context, ex lease.Execution, holder string) (bool, error)
	FinishMany(ctx context.Context, batch []lease.Finish) error
}

// Recorder is the part of recorder.Recorder the executor uses.
type Recorder interface {
	Running(a *sundialv1.ExecutionAttempt)
	// Final hands in an attempt's outcome; held says the attempt kept its
	// lease to the end (its record needs no fence check).
	Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool
}

// Holder holds a leased firing until it may fire (the fire holder).
type Holder interface{ Add(it *work.Item) }

// Preparer takes a firing back to lease it again later (*prepare.Stage).
type Preparer interface {
	Again(it *work.Item, after time.Duration)
}

// Settler makes attempts' consequences durable, a group at a time
// (*settle.Settler).
type Settler interface {
	SettleMany(ctx context.Context, as []settle.Attempt) []settle.Settled
}

// Notifier queues completion notifications without blocking
// (*notify.Notifier).
type Notifier interface {
	Notify(callbackURL string, s notify.Summary) bool
}

// Marker writes a group's markers, keeping them to write later when Redis
// does not answer (*settle.Marks): it reports whether they were written now,
// and otherwise calls written once they are.
type Marker interface {
	Write(ctx context.Context, marks []lease.Finish, written func()) bool
}

// Versions knows the job versions announced since a firing was leased
// (*versions.Watch).
type Versions interface {
	Newer(jobID string, version int64) (int64, bool)
}

// Limiter admits a firing to its target at the instant: the per-host rate
// (*hostguard.Limiter), or every limit held across the cluster
// (*limits.Guard: tenant and host rates, host concurrency, the shared
// breaker). It returns how long the firing waits first, and the outcome it
// is counted as meanwhile.
type Limiter interface {
	Admit(ctx context.Context, it *work.Item, now time.Time) (wait time.Duration, outcome string)
}

// Config tunes the pool.
type Config struct {
	// Executors bounds concurrent attempts.
	Executors int
	// CriticalExecutors are executors on top of Executors that take only
	// CRITICAL firings: in a herd that occupies every other executor, a
	// CRITICAL firing still starts at its instant. How many of the
	// Executors the less urgent priorities may occupy is the Queue's
	// admission rule (readyq.WithLimits), set where the queue is built.
	CriticalExecutors int
	// Settlers is how many groups of finished attempts are settled at once.
	Settlers int
	// SettleBatch bounds the attempts one settler takes (one marker call).
	SettleBatch int
	// SettleLinger is how long a settler waits after its first attempt for
	// more, so attempts that end spread out (jittered jobs) still share a
	// marker call; their leases are held meanwhile.
	SettleLinger time.Duration
	// WorkerID names this worker in ledger records.
	WorkerID string
	// LeaseTTL is how long a crashed worker blocks an execution; long
	// attempts renew every LeaseTTL/3, and a firing that waited in the
	// ready queue until less than half of it was left renews before its
	// request.
	LeaseTTL time.Duration
	// DoneTTL is how long a done marker rejects redeliveries.
	DoneTTL time.Duration
	// RedisTimeout bounds one lease call.
	RedisTimeout time.Duration
	// RetryAfter is how long a firing waits when Redis could not be asked.
	RetryAfter time.Duration
	// RunningGrace is how long, past a retry's backoff, the job's overlap
	// marker keeps naming the execution (the retry re-takes it when it
	// fires; the grace covers its publishing and a late timer).
	RunningGrace time.Duration
	// MaxDeliveries is the poison threshold (for the ledger's wording; the
	// lease store enforces it).
	MaxDeliveries int
}

// DefaultConfig values.
var DefaultConfig = Config{Executors: 128, Settlers: 8, SettleBatch: 256, SettleLinger: 20 * time.Millisecond, LeaseTTL: 5 * time.Second, DoneTTL: 7 * 24 * time.Hour,
	RedisTimeout: 2 * time.Second, RetryAfter: 250 * time.Millisecond, RunningGrace: time.Minute}

// Deps are what the pool works with. Queue, Holder, Prepare, Leaser,
// Target, Recorder, Clock, Metrics and Logger are required.
type Deps struct {
	Queue   *readyq.Queue
	Holder  Holder
	Prepare Preparer
	Leaser  Leaser
	Target  target.Target
	// Recorder takes the ledger records.
	Recorder Recorder
	// Settler retries failures through the outbox, dead-letters, and
	// completes last-slot jobs. Without one (no Postgres), a failed attempt
	// is recorded FAILED and nothing follows it.
	Settler Settler
	// Notifier sends completion notifications to jobs' callback URLs.
	Notifier Notifier
	// Limiter rate-limits requests per target host.
	Limiter Limiter
	// Versions, when set, skips a firing whose job changed after its lease
	// was taken ahead of the instant.
	Versions Versions
	// Marks, when set, takes the markers Redis did not take, so settling
	// goes on through a Redis outage and no marker is lost; without it a
	// marker is given up after a few tries.
	Marks Marker
	// Tracer traces the target and settle steps of traced firings (those
	// the consumer gave a work.Trace).
	Tracer trace.Tracer
	// Clock is the corrected clock.
	Clock   clock.Clock
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Pool is a lifecycle.Service running Config.Executors executors and
// Config.Settlers settlers.
type Pool struct {
	cfg      Config
	queue    *readyq.Queue
	holder   Holder
	prepare  Preparer
	leaser   Leaser
	target   target.Target
	rec      Recorder
	settler  Settler
	notifier Notifier
	limiter  Limiter
	versions Versions
	marks    Marker
	tracer   trace.Tracer
	clk      clock.Clock
	m        *metrics.Metrics
	logger   *slog.Logger

	// settled carries attempts from the executors to the settlers; its
	// bound is the back-pressure that keeps settling from falling behind
	// without limit.
	settled chan *attempt
	// gathering is held by the settler whose turn it is to gather.
	gathering sync.Mutex
	runner    lifecycle.Runner
	// renewals keeps the leases of attempts in flight alive.
	renewals *renewals
	// notices are the cancel notices being sent to targets; Start waits
	// for them before it returns.
	notices sync.WaitGroup
	// stopping ends when Stop is called: attempts run on, but settling
	// gives up retrying, and a final record that cannot be handed to the
	// recorder is given up (the firing stays unfinished and is
	// redelivered).
	stopping context.Context
}

// New returns a pool.
func New(cfg Config, d Deps) *Pool {
	def := DefaultConfig
	if cfg.Executors <= 0 {
		cfg.Executors = def.Executors
	}
	if cfg.Settlers <= 0 {
		cfg.Settlers = def.Settlers
	}
	if cfg.SettleBatch <= 0 {
		cfg.SettleBatch = def.SettleBatch
	}
	// A zero SettleLinger settles what waits at once.
	cfg.SettleLinger = max(cfg.SettleLinger, 0)
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = def.LeaseTTL
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = def.DoneTTL
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = def.RedisTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = def.RetryAfter
	}
	if cfg.RunningGrace <= 0 {
		cfg.RunningGrace = max(def.RunningGrace, 3*cfg.LeaseTTL)
	}
	p := &Pool{cfg: cfg, queue: d.Queue, holder: d.Holder, prepare: d.Prepare, leaser: d.Leaser, target: d.Target, rec: d.Recorder,
		settler: d.Settler, notifier: d.Notifier, limiter: d.Limiter, versions: d.Versions, marks: d.Marks, tracer: d.Tracer, clk: d.Clock, m: d.Metrics, logger: d.Logger,
		stopping: context.Background(), settled: make(chan *attempt, 2*(cfg.Executors+cfg.CriticalExecutors))}
	p.renewals = newRenewals(p)
	return p
}

// Start runs the executors and the settlers.
func (p *Pool) Start(context.Context) error {
	return p.runner.Run(func(ctx context.Context) error {
		p.stopping = ctx
		// Attempts run on after Stop until settled: their leases are
		// renewed until the settlers are done.
		rctx, stopRenewals := context.WithCancel(context.WithoutCancel(ctx))
		renewing := make(chan struct{})
		go func() {
			defer close(renewing)
			p.renewals.run(rctx)
		}()
		defer func() {
			stopRenewals()
			<-renewing
		}()
		var settlers sync.WaitGroup
		for range p.cfg.Settlers {
			settlers.Add(1)
			go func() {
				defer settlers.Done()
				p.settleLoop()
			}()
		}
		var wg sync.WaitGroup
		execute := func(pop func(context.Context) *work.Item) {
			defer wg.Done()
			for {
				it := pop(ctx)
				if it == nil {
					return
				}
				// Taken before process: a firing held again changes
				// hands, and its priority's count must fall by one.
				pr := it.Priority
				// An attempt that started finishes even while the pool
				// stops: the consumer already waited for it before
				// giving up its partition.
				p.process(context.WithoutCancel(ctx), it)
				// The executor is free: a firing its priority's cap
				// held back may start (readyq.Limits).
				p.queue.Done(pr)
			}
		}
		for range p.cfg.Executors {
			wg.Add(1)
			go execute(p.queue.Pop)
		}
		for range p.cfg.CriticalExecutors {
			wg.Add(1)
			go execute(p.queue.PopCritical)
		}
		wg.Wait()
		// Every attempt the executors made is settled before Stop
		// returns.
		close(p.settled)
		settlers.Wait()
		p.notices.Wait()
		return nil
	})
}

// Stop stops popping and waits for attempts in progress and their
// settling.
func (p *Pool) Stop() { p.runner.Stop() }

// Done is closed when the pool's loop returned; Err says why, when it was
// not Stop (lifecycle.Watched).
func (p *Pool) Done() <-chan struct{} { return p.runner.Done() }

// Err is why the pool's loop returned on its own, if it did.
func (p *Pool) Err() error { return p.runner.Err() }

var _ lifecycle.Watched = (*Pool)(nil)

// count counts an outcome of f and notes it on the item's trace.
func (p *Pool) count(it *work.Item, f *sundialv1.Firing, outcome string) {
	if j := p.m.Job(f.GetJobId()); j != nil {
		j.Fired(outcome)
	}
	p.m.Firings.WithLabelValues(firing.PriorityName(f.GetPriority()), outcome, p.m.Tenant(f.GetTenant())).Inc()
	if it.Trace != nil {
		it.Trace.Consume.SetAttributes(tracing.AttrOutcome.String(outcome))
	}
}

func (p *Pool) process(ctx context.Context, it *work.Item) {
	f := it.Firing
	if it.Trace != nil {
		it.Trace.Hold.End()
		ctx = trace.ContextWithSpan(ctx, it.Trace.Consume)
	}
	p.m.Lateness.WithLabelValues(firing.PriorityName(f.GetPriority()), "timer", p.m.Tenant(f.GetTenant())).Observe(max(0, time.Duration(it.Ready-it.FireAt).Seconds()))
	ex := prepare.Execution(f)
	switch it.Lease.Outcome {
	case lease.Stale:
		p.stale(it, f, it.Lease.CurrentVersion, "staged")
	case lease.Overlapping:
		p.overlapSkipped(ctx, it, f, ex, it.Lease.Running)
	case lease.Poison:
		p.poison(ctx, it, f, ex)
	case lease.Cancelled:
		p.cancelledBefore(ctx, it, f, ex, it.Lease.CancelledBy, false)
	case lease.Acquired:
		if p.versions != nil {
			if v, newer := p.versions.Newer(f.GetJobId(), f.GetJobVersion()); newer {
				// Changed (paused, updated, deleted) after the lease was
				// taken ahead: give the lease back and skip, as the lease
				// script would have.
				if it.Overlap {
					// Its place among the job's running executions goes
					// with it; any other lease simply runs out, as no
					// copy of a stale firing fires.
					rctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
					_, _ = p.leaser.Release(rctx, ex, it.LeaseHolder)
					cancel()
				}
				p.stale(it, f, v, "leased")
				return
			}
		}
		// The limits are checked at the instant: a firing over its
		// tenant's or host's rate, or its host's concurrency, waits in
		// the fire holder, not in an executor; it keeps its lease, which
		// is renewed below if the wait ate into it.
		if p.limiter != nil {
			if wait, outcome := p.limiter.Admit(ctx, it, p.clk.Now()); wait > 0 {
				p.count(it, f, outcome)
				p.m.RateLimited.Inc()
				it.NotBefore = p.clk.Now().Add(wait).UnixNano()
				p.hold(it)
				p.holder.Add(it)
				return
			}
		}
		if !p.leaseLeft(it) {
			return
		}
		p.attempt(ctx, it, f, ex)
	default:
		// The prepare stage routes nothing else here.
		p.logger.Error("firing reached an executor without a lease decision", "execution_id", f.GetExecutionId(), "outcome", it.Lease.Outcome.String())
		p.prepare.Again(it, p.cfg.RetryAfter)
	}
}

// stale records a firing of a job version older than current: SKIPPED,
// nothing fired.
func (p *Pool) stale(it *work.Item, f *sundialv1.Firing, current int64, when string) {
	p.count(it, f, "stale")
	a := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
	a.FinishedTime = timestamppb.New(p.clk.Now())
	a.Reason = fmt.Sprintf("stale job version %d (current %d): the job changed after this firing was %s", f.GetJobVersion(), current, when)
	// Written without the fence check: a skip at fence 0 is stored as it
	// is whatever another delivery recorded (readers compare fences), and
	// the check is a read that costs Cassandra more than the write — a
	// deleted job's two minutes of staged firings are all skipped here.
	p.final(it, a, true)
}

// leaseLeft reports whether the lease taken ahead still has at least half
// its TTL to run, so the request goes out with no Redis call before it.
// One that has less (it waited in the ready queue or behind a limit longer
// than the prepare stage's admission allowed for) goes back to the prepare
// stage, which takes it again in its next batch, before the firings it has
// not leased yet, under the same delivery: a lease is never renewed or
// taken again by an executor one firing at a time, on time or late.
func (p *Pool) leaseLeft(it *work.Item) bool {
	if time.Duration(it.LeaseUntil-p.clk.Now().UnixNano()) >= p.cfg.LeaseTTL/2 {
		return true
	}
	p.count(it, it.Firing, "lease_again")
	p.prepare.Again(it, 0)
	return false
}

// hold reopens the hold span of a traced firing that waits again.
func (p *Pool) hold(it *work.Item) {
	if p.traced(it) {
		_, it.Trace.Hold = p.tracer.Start(trace.ContextWithSpan(context.Background(), it.Trace.Consume), SpanHold,
			trace.WithAttributes(attribute.Int("sundial.deliveries", int(it.Deliveries))))
	}
}

// Span names of the executor's steps; SpanHold is the consumer's name
// for a firing waiting, reused when one waits again. The lease, taken ahead
// for a batch, is an event (prepare.EventLease), not a span.
const (
	SpanTarget = "worker.target"
	SpanSettle = "worker.settle"
	SpanHold   = "worker.hold"
)

func (p *Pool) overlapSkipped(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, running string) {
	p.count(it, f, "overlap_skipped")
	p.m.OverlapSkips.WithLabelValues(ex.Overlap.String()).Inc()
	a := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
	a.FinishedTime = timestamppb.New(p.clk.Now())
	who := "execution " + running + " of this job is"
	if n := f.GetMaxConcurrency(); n > 1 {
		who = fmt.Sprintf("%d executions of this job (its max_concurrency), among them %s, are", n, running)
	}
	switch ex.Overlap {
	case lease.OverlapBufferOne:
		a.Reason = fmt.Sprintf("overlap BUFFER_ONE: %s running and another is already waiting behind it", who)
	case lease.OverlapBufferAll:
		a.Reason = fmt.Sprintf("overlap BUFFER_ALL: %s running and the queue is full (%d waiting)", who, lease.MaxBuffered)
	default:
		a.Reason = fmt.Sprintf("overlap SKIP: %s still running", who)
	}
	if f.GetLastSlot() && p.settler != nil {
		// The schedule's last slot was skipped: nothing later will
		// complete the job.
		d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, Attempts: 0, Reason: a.Reason}
		if _, ok := p.settle(ctx, it, f, ex, it.LeaseHolder, &d, target.Result{}); !ok {
			return // redelivered; the skip is decided again (the marker says done)
		}
	}
	p.final(it, a, false)
}

// cancelledBefore records an execution cancelled before this attempt was
// sent: CANCELLED, nothing fired, no retry. held: this delivery holds the
// lease (a renewal just before the request found the cancel), and its
// marker releases it; otherwise the lease script already marked the
// execution.
func (p *Pool) cancelledBefore(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, by string, held bool) {
	p.count(it, f, "cancelled")
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, Attempts: retry.AttemptsMade(f),
		Reason: "cancelled by " + by + " before this attempt was sent; not retried"}
	if f.GetLastSlot() && p.settler != nil {
		if _, ok := p.settle(ctx, it, f, ex, it.LeaseHolder, &d, target.Result{}); !ok {
			return // redelivered; decided again
		}
	}
	fence := int64(0)
	if held {
		fence = it.Lease.Fence
		p.finishMarks(ctx, []lease.Finish{p.mark(ex, it.LeaseHolder, d)})
	}
	now := p.clk.Now()
	p.notify(f, d, target.Result{}, now, settle.Outcome{})
	a := p.attemptRecord(f, d.Status, fence)
	a.FinishedTime = timestamppb.New(now)
	a.Reason = d.Reason
	p.final(it, a, false)
}

// noticeCancel tells f's target, in the background, that the attempt sent
// to it was cancelled (target.CancelNotice); best effort, bounded by
// target.CancelNoticeTimeout.
func (p *Pool) noticeCancel(f *sundialv1.Firing, fence int64, by string) {
	now := p.clk.Now()
	n := target.CancelNotice(f, by, now)
	p.notices.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.stopping), target.CancelNoticeTimeout)
		defer cancel()
		res := p.target.Fire(ctx, target.Request{Firing: n, Fence: fence, SentAt: now, Event: firing.EventCancelled})
		if !res.OK {
			p.logger.Warn("could not tell the target of the cancel", "execution_id", f.GetExecutionId(), "job_id", f.GetJobId(), "err", res.Err)
		}
	})
}

// poison dead-letters an attempt its workers kept dying on, without firing
// it again; the lease is held.
func (p *Pool) poison(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution) {
	p.count(it, f, "poison")
	lr := it.Lease
	err := fmt.Errorf("delivered %d times without finishing (max deliveries %d): its workers crashed or hung on it", lr.Deliveries, p.cfg.MaxDeliveries)
	res := target.Failed(target.ClassPoison, true, err)
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, Class: target.ClassPoison, Attempts: retry.AttemptsMade(f),
		Reason: "poison: " + err.Error() + "; dead-lettered without firing"}
	now := p.clk.Now()
	out, ok := p.settle(ctx, it, f, ex, it.LeaseHolder, &d, res)
	if !ok {
		return
	}
	p.finishMarks(ctx, []lease.Finish{p.mark(ex, it.LeaseHolder, d)})
	p.notify(f, d, res, now, out)
	a := p.attemptRecord(f, d.Status, lr.Fence)
	a.FinishedTime = timestamppb.New(now)
	a.Error = err.Error()
	a.Reason = d.Reason
	p.final(it, a, false)
}

// attempt is one request to the target, made by an executor; what follows
// it is the settle stage's.
type attempt struct {
	it                *work.Item
	f                 *sundialv1.Firing
	ex                lease.Execution
	started, finished time.Time
	fireAt            time.Time
	res               target.Result
	// fenced: a renewal found another holder; the result is stale.
	fenced bool
	// cancelledBy names who cancelled the execution while its request
	// was out (the request was abandoned); empty otherwise.
	cancelledBy string
	// stopRenewing ends the lease's renewal and reports whether any
	// renewal failed.
	stopRenewing func() (failed bool)

	// Set while settling.
	d   retry.Decision
	out settle.Outcome
	// dropped: settling gave up (stopping); the lease is released and the
	// firing left unfinished, so it is redelivered.
	dropped bool
}

func (p *Pool) attempt(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution) {
	p.m.Executing.Inc()
	defer p.m.Executing.Dec()
	fence := it.Lease.Fence
	pr := firing.PriorityName(f.GetPriority())
	started := p.clk.Now()
	fireAt := f.GetFireTime().AsTime()
	if f.GetFireTime() == nil {
		fireAt = f.GetScheduledTime().AsTime()
	}
	late := max(0, started.Sub(fireAt).Seconds())
	p.m.Lateness.WithLabelValues(pr, "target", p.m.Tenant(f.GetTenant())).Observe(late)
	if j := p.m.Job(f.GetJobId()); j != nil {
		j.Lateness.Observe(late)
	}

	running := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, fence)
	running.StartedTime = timestamppb.New(started)
	running.Lateness = durationpb.New(started.Sub(fireAt))
	p.rec.Running(running)

	actx, cancel := context.WithCancelCause(ctx)
	// Registered before the call starts, so the first renewal is due
	// LeaseTTL/3 after the attempt began whatever the scheduling.
	rn := p.renewals.add(ex, it.LeaseHolder, started, cancel)
	req := target.Request{Firing: f, Fence: fence, SentAt: started}
	fctx := actx // actx itself is the renewer's
	var span trace.Span
	if p.traced(it) {
		fctx, span = p.tracer.Start(actx, SpanTarget, trace.WithSpanKind(trace.SpanKindClient))
		req.Traceparent = tracing.Format(span.SpanContext())
	}
	res := p.target.Fire(fctx, req)
	finished := p.clk.Now()
	cancelledBy := ""
	if ce := (*lease.CancelledError)(nil); !res.OK && errors.As(context.Cause(actx), &ce) {
		cancelledBy = ce.By
	}
	if span != nil {
		endTargetSpan(span, f, res, fence)
		// A retry or dead letter staged from here carries this attempt's
		// context: the next attempt continues the trace.
		f.Traceparent = tracing.Format(it.Trace.Consume.SpanContext())
	}
	// The renewer keeps the lease until the settle stage has written the
	// attempt's marker.
	p.settled <- &attempt{
		it: it, f: f, ex: ex, started: started, finished: finished, fireAt: fireAt, res: res,
		fenced:      errors.Is(context.Cause(actx), lease.ErrFenced),
		cancelledBy: cancelledBy,
		stopRenewing: func() bool {
			failed := p.renewals.stop(rn)
			cancel(nil)
			return failed
		},
	}
}

// settleLoop is one settler. Settlers take turns gathering: one waits for
// an attempt, then up to SettleLinger for more (up to SettleBatch), and
// hands the turn on before settling what it gathered — so while one
// settler waits on Postgres or Redis, the next is already gathering, and
// attempts that end spread out still share a marker call.
func (p *Pool) settleLoop() {
	batch := make([]*attempt, 0, p.cfg.SettleBatch)
	for {
		p.gathering.Lock()
		batch = p.gather(batch[:0])
		p.gathering.Unlock()
		if len(batch) == 0 {
			return // the executors are gone and everything is settled
		}
		p.settleBatch(batch)
		clear(batch)
	}
}

// gather appends the next group of finished attempts to batch; none when
// the executors are gone and nothing is left.
func (p *Pool) gather(batch []*attempt) []*attempt {
	a, ok := <-p.settled
	if !ok {
		return batch
	}
	batch = append(batch, a)
	var linger <-chan time.Time // nil without a linger: take only what waits
	if p.cfg.SettleLinger > 0 {
		t := p.clk.NewTimer(p.cfg.SettleLinger)
		defer t.Stop()
		linger = t.C()
	}
	for len(batch) < p.cfg.SettleBatch {
		if linger == nil {
			select {
			case a, ok := <-p.settled:
				if !ok {
					return batch
				}
				batch = append(batch, a)
				continue
			default:
				return batch
			}
		}
		select {
		case a, ok := <-p.settled:
			if !ok {
				return batch
			}
			batch = append(batch, a)
		case <-linger:
			return batch
		}
	}
	return batch
}

// settleBatch settles attempts that ended about together: each one's
// decision and Postgres consequences, then every marker in one Redis
// call, then the records.
func (p *Pool) settleBatch(batch []*attempt) {
	ctx := context.WithoutCancel(p.stopping)
	group := make([]settling, 0, len(batch))
	for _, a := range batch {
		if a.fenced {
			// Another holder fires with a larger fence; this result is
			// stale, and the new holder writes its own marker.
			a.stopRenewing()
			a.d = retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED, Attempts: retry.AttemptsMade(a.f),
				Reason: "lease taken over by another delivery during the attempt; this result is discarded"}
			if a.res.Err == nil {
				a.res.Err = lease.ErrFenced
			}
			continue
		}
		if a.cancelledBy != "" {
			a.d = retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, Class: target.ClassCanceled, Attempts: retry.AttemptsMade(a.f),
				Reason: "cancelled by " + a.cancelledBy + " during the attempt: the request was abandoned (it may have reached the target, which is told); not retried"}
		} else {
			a.d = p.decide(a.f, a.res, a.finished)
		}
		group = append(group, settling{it: a.it, f: a.f, ex: a.ex, holder: a.it.LeaseHolder, d: &a.d, res: a.res, out: &a.out})
	}
	// Settled under the leases, which are still being renewed.
	settled := p.settleGroup(ctx, group)
	marks := make([]lease.Finish, 0, len(group))
	k := 0
	for _, a := range batch {
		if a.fenced {
			continue
		}
		if !settled[k] {
			a.dropped = true
			a.stopRenewing()
		} else {
			marks = append(marks, p.mark(a.ex, a.it.LeaseHolder, a.d))
		}
		k++
	}
	// Markers Redis did not take wait in p.marks; until they are written
	// the group's firings are recorded but not finished (offsets stay
	// uncommitted, so a crash redelivers them).
	var wait *markWait
	marked := false
	if p.marks != nil {
		wait = &markWait{}
		marked = p.marks.Write(ctx, marks, wait.written)
		if marked {
			wait = nil
		}
	} else {
		marked = p.finishMarks(ctx, marks)
	}
	for _, a := range batch {
		if a.dropped {
			continue
		}
		held := false
		if !a.fenced {
			// Always stopped: a renewer left running when the markers
			// were not written would renew the lease for ever.
			renewFailed := a.stopRenewing()
			held = marked && !renewFailed
			p.notify(a.f, a.d, a.res, a.finished, a.out)
			if a.cancelledBy != "" {
				p.noticeCancel(a.f, a.it.Lease.Fence, a.cancelledBy)
			}
		}
		p.record(a, held, wait)
	}
}

// markWait finishes firings once both their record is written and their
// group's markers are (the markers waited for Redis).
type markWait struct {
	mu      sync.Mutex
	done    bool
	pending []func()
}

// written: the markers are in Redis; run the finishes that waited.
func (w *markWait) written() {
	w.mu.Lock()
	w.done = true
	fs := w.pending
	w.pending = nil
	w.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// then runs f now if the markers are written, else once they are.
func (w *markWait) then(f func()) func() {
	return func() {
		w.mu.Lock()
		if !w.done {
			w.pending = append(w.pending, f)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		f()
	}
}

// record counts an attempt's outcome and hands its final record in; with
// wait, the firing finishes only once its group's markers are written too.
func (p *Pool) record(at *attempt, held bool, wait *markWait) {
	f, d, res := at.f, at.d, at.res
	p.count(at.it, f, firing.ExecutionStatusWord(d.Status))
	a := p.attemptRecord(f, d.Status, at.it.Lease.Fence)
	a.StartedTime = timestamppb.New(at.started)
	a.FinishedTime = timestamppb.New(at.finished)
	a.Lateness = durationpb.New(at.started.Sub(at.fireAt))
	a.Duration = durationpb.New(at.finished.Sub(at.started))
	a.HttpStatus = int32(res.HTTPStatus)
	a.ResponseExcerpt = res.Excerpt
	a.Reason = d.Reason
	if res.Err != nil && !res.OK {
		a.Error = res.Err.Error()
	}
	if !res.OK && d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED {
		p.logger.Info("attempt failed", "execution_id", at.ex.ExecutionID, "job_id", at.ex.JobID, "attempt", at.ex.Attempt,
			"http_status", res.HTTPStatus, "class", d.Class, "status", firing.ExecutionStatusWord(d.Status), "err", res.Err)
	}
	p.finalAfter(at.it, a, held, wait)
}

// decide is retry.Decide, or SUCCEEDED/FAILED when nothing can follow a
// failure (no Postgres to stage a retry or record a dead letter in).
func (p *Pool) decide(f *sundialv1.Firing, res target.Result, now time.Time) retry.Decision {
	d := retry.Decide(f, res, now)
	if p.settler == nil && d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		return retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, Class: d.Class, Attempts: d.Attempts,
			Reason: d.Class + "; not retried or dead-lettered: this worker has no Postgres (--postgres-dsn)"}
	}
	return d
}

// settling is one attempt's part in a settler call.
type settling struct {
	it     *work.Item
	f      *sundialv1.Firing
	ex     lease.Execution
	holder string
	d      *retry.Decision
	res    target.Result
	out    *settle.Outcome
}

// settle runs the settler for one firing; see settleGroup.
func (p *Pool) settle(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, holder string, d *retry.Decision, res target.Result) (settle.Outcome, bool) {
	var out settle.Outcome
	ok := p.settleGroup(ctx, []settling{{it: it, f: f, ex: ex, holder: holder, d: d, res: res, out: &out}})
	return out, ok[0]
}

// settleGroup runs the settler over attempts that ended about together
// (one statement completes all their jobs). For an attempt it gives up on
// (the pool is stopping and Postgres or Kafka does not answer), the lease
// is released and the firing left unfinished, so its redelivery makes the
// attempt again; it reports, in order, which were settled.
func (p *Pool) settleGroup(ctx context.Context, group []settling) []bool {
	ok := make([]bool, len(group))
	if p.settler == nil {
		for i, g := range group {
			if g.d.Status == sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD {
				g.d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
				g.d.Reason += "; not dead-lettered: this worker has no Postgres (--postgres-dsn)"
			}
			ok[i] = true
		}
		return ok
	}
	as := make([]settle.Attempt, len(group))
	spans := make([]trace.Span, len(group))
	for i, g := range group {
		as[i] = settle.Attempt{Firing: g.f, Decision: *g.d, Result: g.res}
		if p.traced(g.it) {
			_, spans[i] = p.tracer.Start(trace.ContextWithSpan(p.stopping, g.it.Trace.Consume), SpanSettle,
				trace.WithAttributes(attribute.String("sundial.decision", firing.ExecutionStatusWord(g.d.Status))))
		}
	}
	res := p.settler.SettleMany(p.stopping, as)
	for i, g := range group {
		r := res[i]
		if span := spans[i]; span != nil {
			if r.Err != nil {
				span.SetStatus(codes.Error, r.Err.Error())
			} else if r.Outcome.Next != nil && span.IsRecording() {
				span.SetAttributes(attribute.Int("sundial.next_attempt", int(r.Outcome.Next.GetAttempt())))
			}
			span.End()
		}
		*g.out = r.Outcome
		if r.Err != nil {
			p.logger.Error("could not settle the attempt while stopping; it will be redelivered and made again", "err", r.Err, "execution_id", g.ex.ExecutionID, "attempt", g.ex.Attempt)
			rctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
			_, _ = p.leaser.Release(rctx, g.ex, g.holder)
			cancel()
			continue
		}
		if r.Outcome.Next != nil {
			g.d.Reason = fmt.Sprintf("%s; staged as attempt %d", g.d.Reason, r.Outcome.Next.GetAttempt())
		}
		ok[i] = true
	}
	return ok
}

// traced: the firing has a trace and this pool a tracer.
func (p *Pool) traced(it *work.Item) bool { return it.Trace != nil && p.tracer != nil }

// endTargetSpan ends the target call's span with what the target did.
func endTargetSpan(span trace.Span, f *sundialv1.Firing, res target.Result, fence int64) {
	if span.IsRecording() {
		a := []attribute.KeyValue{attribute.Int64("sundial.fence_token", fence)}
		if h := f.GetTarget().GetHttp(); h != nil {
			method := strings.ToUpper(h.GetMethod())
			if method == "" {
				method = "POST"
			}
			a = append(a, attribute.String("http.request.method", method), attribute.String("server.address", target.Host(f)))
		} else if k := f.GetTarget().GetKafka(); k != nil {
			a = append(a, attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", k.GetTopic()))
		}
		if res.HTTPStatus > 0 {
			a = append(a, attribute.Int("http.response.status_code", res.HTTPStatus))
		}
		if res.Class != "" {
			a = append(a, attribute.String("error.type", res.Class))
		}
		span.SetAttributes(a...)
		if !res.OK {
			msg := res.Class
			if res.Err != nil {
				msg = res.Err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End()
}

// mark is the marker an attempt's decision writes: the done marker
// (success), the retry-pending marker (a retry is staged: the overlap
// marker stays through the backoff) or the attempt marker (anything else);
// each also releases the lease.
func (p *Pool) mark(ex lease.Execution, holder string, d retry.Decision) lease.Finish {
	f := lease.Finish{Execution: ex, Holder: holder, TTL: p.cfg.DoneTTL, Mark: lease.FinishAttempt}
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
		f.Mark = lease.FinishDone
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		f.Mark, f.KeepRunning = lease.FinishRetryPending, d.Delay+p.cfg.RunningGrace
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		f.Mark = lease.FinishCancelled
	}
	return f
}

// finishMarks writes the markers in one call, retrying a little: without
// its marker a redelivery would fire again. It reports whether they were
// written (under these holders' fences).
func (p *Pool) finishMarks(ctx context.Context, marks []lease.Finish) bool {
	if len(marks) == 0 {
		return true
	}
	p.m.SettleBatch.Observe(float64(len(marks)))
	backoff := 50 * time.Millisecond
	for i := 0; ; i++ {
		mctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		err := p.leaser.FinishMany(mctx, marks)
		cancel()
		if err == nil {
			return true
		}
		if i == 3 {
			p.logger.Error("could not write the done markers; a redelivery would fire again", "err", err, "attempts", len(marks), "execution_id", marks[0].Execution.ExecutionID)
			return false
		}
		t := p.clk.NewTimer(backoff)
		<-t.C()
		backoff *= 2
	}
}

// notify queues the job's completion notification: on success, on death
// (its final failure and its entry in the DLQ, one notification), and on
// cancel.
func (p *Pool) notify(f *sundialv1.Firing, d retry.Decision, res target.Result, finished time.Time, out settle.Outcome) {
	if p.notifier == nil || f.GetCallbackUrl() == "" {
		return
	}
	event := ""
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
		event = notify.EventSucceeded
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		event = notify.EventDead
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		event = notify.EventCancelled
	default:
		return
	}
	s := notify.Summary{
		Event: event, ExecutionID: f.GetExecutionId(), JobID: f.GetJobId(), Tenant: f.GetTenant(), Status: d.Status.String(),
		Attempt: max(f.GetAttempt(), 1), Attempts: d.Attempts, ErrorClass: d.Class, HTTPStatus: res.HTTPStatus,
		Scheduled: f.GetScheduledTime().AsTime(), Finished: finished.UTC(), CatchUp: f.GetCatchUp(), DeadLetter: out.DeadLetter != nil,
	}
	if res.Err != nil && !res.OK {
		s.Error = res.Err.Error()
	}
	p.notifier.Notify(f.GetCallbackUrl(), s)
}

func (p *Pool) final(it *work.Item, a *sundialv1.ExecutionAttempt, held bool) {
	p.finalAfter(it, a, held, nil)
}

// finalAfter is final whose firing finishes only once wait's markers are
// written too (nil: at once).
func (p *Pool) finalAfter(it *work.Item, a *sundialv1.ExecutionAttempt, held bool, wait *markWait) {
	finish := func() { it.Owner.Finish(it) }
	if wait != nil {
		finish = wait.then(finish)
	}
	if !p.rec.Final(p.stopping, a, held, finish) {
		// Stopping: leave the firing unfinished, so its offset is not
		// committed and it is redelivered (then dropped as done).
		p.logger.Warn("recorder stopped before the attempt was recorded", "execution_id", a.GetExecutionId())
	}
}

func (p *Pool) attemptRecord(f *sundialv1.Firing, status sundialv1.ExecutionStatus, fence int64) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   f.GetExecutionId(),
		JobId:         f.GetJobId(),
		Tenant:        f.GetTenant(),
		Attempt:       max(f.GetAttempt(), 1),
		Status:        status,
		ScheduledTime: f.GetScheduledTime(),
		FireTime:      f.GetFireTime(),
		FenceToken:    fence,
		Worker:        p.cfg.WorkerID,
		CatchUp:       f.GetCatchUp(),
		JobVersion:    f.GetJobVersion(),
	}
}
