// Package fire is the worker's fire stage, the second of its three
// (prepare, fire, settle): a bounded pool of executors pops the most
// urgent due firing from the ready queue — its lease and fence already
// taken ahead of the instant by the prepare stage — and sends only the
// request, then hands the attempt, its lease still held and renewed, to
// the settle stage (package settle) and pops the next.
//
// The firing path at the instant is fire holder → ready queue → (limits)
// → target. Neither Redis, Postgres nor the ledger is on it: the lease was
// taken before, within what the executors fire before it runs low
// (prepare.Admission), and everything else happens after the target
// answered, in the settle stage, which gets the request's work.Outcome. A
// firing whose lease did run low goes back through the prepare holder
// (AddAfter, the holders' one port back) to be leased again in a batch;
// one over a host's or tenant's limit waits in the fire holder, keeping its
// lease. The stage calls no earlier stage.
//
// Firings the prepare stage could not lease to fire (stale, overlapping,
// poison, cancelled) come through the ready queue too, and are handed to
// the settle stage to be recorded (settle.Stage.Unfired).
//
// A cancelled execution (JobService.CancelExecution, or another execution's
// CANCEL_OTHER or TERMINATE_OTHER) is learnt at the attempt's next lease
// renewal: the attempt's context ends, the request is abandoned, and the
// settle stage records it CANCELLED (never retried), naming who cancelled,
// and tells its target (target.CancelNotice). An attempt whose target
// answered before the abandonment keeps its real outcome.
//
// With a tracer, a traced firing's target call is a span under its
// worker.consume span, and the target receives that span's context as its
// traceparent.
package fire

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Leaser is the part of lease.Store the fire stage uses: renewals of the
// leases of attempts in flight, and the release of a stale overlap job's.
type Leaser interface {
	RenewMany(ctx context.Context, batch []lease.Renewal) ([]error, error)
	Release(ctx context.Context, ex lease.Execution, holder string) (bool, error)
}

// Recorder is the part of recorder.Recorder the fire stage uses.
type Recorder interface {
	Running(a *sundialv1.ExecutionAttempt)
}

// Holder is the holders' one port back (*holder.Holder): a firing that
// must wait again is held, not to be released before notBefore. The fire
// holder takes a firing a limit holds back (it keeps its lease); the
// prepare holder one whose lease ran low (it is leased again).
type Holder interface {
	AddAfter(it *work.Item, notBefore int64)
}

// Settle is the settle stage (*settle.Stage): it takes the outcome of each
// attempt made, and records the firings not to be fired.
type Settle interface {
	Settle(it *work.Item, o work.Outcome)
	Stale(it *work.Item, f *sundialv1.Firing, current int64, when string)
	Unfired(ctx context.Context, it *work.Item, ex lease.Execution) bool
	// Stopping: the worker stops; settling gives up retrying.
	Stopping()
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

// Config tunes the stage.
type Config struct {
	// Executors bounds concurrent attempts.
	Executors int
	// CriticalExecutors are executors on top of Executors that take only
	// CRITICAL firings: in a herd that occupies every other executor, a
	// CRITICAL firing still starts at its instant. How many of the
	// Executors the less urgent priorities may occupy is the Queue's
	// admission rule (readyq.WithLimits), set where the queue is built.
	CriticalExecutors int
	// WorkerID names this worker in ledger records.
	WorkerID string
	// LeaseTTL is how long a crashed worker blocks an execution; long
	// attempts renew every LeaseTTL/3, and a firing with less than half
	// of it left goes back to be leased again before its request.
	LeaseTTL time.Duration
	// RedisTimeout bounds one renewal or release.
	RedisTimeout time.Duration
}

// DefaultConfig values.
var DefaultConfig = Config{Executors: 128, LeaseTTL: 5 * time.Second, RedisTimeout: 2 * time.Second}

// Deps are what the stage works with. Queue, Holder, Prepare, Settle,
// Leaser, Target, Recorder, Clock, Metrics and Logger are required.
type Deps struct {
	Queue *readyq.Queue
	// Holder is the fire holder: a firing over a limit waits in it.
	Holder Holder
	// Prepare is the prepare holder: a firing whose lease ran low goes
	// back through it to be leased again.
	Prepare Holder
	Settle  Settle
	Leaser  Leaser
	Target  target.Target
	// Recorder takes the RUNNING records.
	Recorder Recorder
	// Limiter holds back firings over their host's or tenant's limits.
	Limiter Limiter
	// Versions, when set, skips a firing whose job changed after its lease
	// was taken ahead of the instant.
	Versions Versions
	// Tracer traces the target calls of traced firings (those the
	// consumer gave a work.Trace).
	Tracer trace.Tracer
	// Clock is the corrected clock.
	Clock   clock.Clock
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Stage is a lifecycle.Service running Config.Executors executors (and
// Config.CriticalExecutors for CRITICAL firings alone).
type Stage struct {
	cfg      Config
	queue    *readyq.Queue
	holder   Holder
	prepare  Holder
	settle   Settle
	leaser   Leaser
	target   target.Target
	rec      Recorder
	limiter  Limiter
	versions Versions
	tracer   trace.Tracer
	clk      clock.Clock
	m        *metrics.Metrics
	logger   *slog.Logger

	runner lifecycle.Runner
	// renewals keeps the leases of attempts in flight alive until the
	// settle stage has written their markers.
	renewals *renewals
}

// New returns a fire stage.
func New(cfg Config, d Deps) *Stage {
	def := DefaultConfig
	if cfg.Executors <= 0 {
		cfg.Executors = def.Executors
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = def.LeaseTTL
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = def.RedisTimeout
	}
	p := &Stage{cfg: cfg, queue: d.Queue, holder: d.Holder, prepare: d.Prepare, settle: d.Settle, leaser: d.Leaser, target: d.Target, rec: d.Recorder,
		limiter: d.Limiter, versions: d.Versions, tracer: d.Tracer, clk: d.Clock, m: d.Metrics, logger: d.Logger}
	p.renewals = newRenewals(p)
	return p
}

// Start runs the executors until Stop.
func (p *Stage) Start(context.Context) error {
	return p.runner.Run(func(ctx context.Context) error {
		// Attempts run on after Stop until their settling has written
		// their markers: their leases are renewed until the renewals
		// are stopped, after the settle stage (Stop).
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
				// An attempt that started finishes even while the stage
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
		<-ctx.Done()
		p.settle.Stopping()
		wg.Wait()
		return nil
	})
}

// Stop stops popping and waits for the attempts in progress to be handed
// to the settle stage.
func (p *Stage) Stop() { p.runner.Stop() }

// Done is closed when the stage's loop returned; Err says why, when it was
// not Stop (lifecycle.Watched).
func (p *Stage) Done() <-chan struct{} { return p.runner.Done() }

// Err is why the stage's loop returned on its own, if it did.
func (p *Stage) Err() error { return p.runner.Err() }

var _ lifecycle.Watched = (*Stage)(nil)

func (p *Stage) count(it *work.Item, f *sundialv1.Firing, outcome string) { p.m.Count(it, f, outcome) }

func (p *Stage) process(ctx context.Context, it *work.Item) {
	f := it.Firing
	if it.Trace != nil {
		it.Trace.Hold.End()
		ctx = trace.ContextWithSpan(ctx, it.Trace.Consume)
	}
	p.m.Lateness.WithLabelValues(firing.PriorityName(f.GetPriority()), "timer", p.m.Tenant(f.GetTenant())).Observe(max(0, time.Duration(it.Ready-it.FireAt).Seconds()))
	ex := prepare.Execution(f)
	switch it.Lease.Outcome {
	case lease.Stale, lease.Overlapping, lease.Poison, lease.Cancelled:
		p.settle.Unfired(ctx, it, ex)
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
				p.settle.Stale(it, f, v, "leased")
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
				p.hold(it)
				p.holder.AddAfter(it, p.clk.Now().Add(wait).UnixNano())
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
		p.leaseAgain(it)
	}
}

// leaseLeft reports whether the lease taken ahead still has at least half
// its TTL to run, so the request goes out with no Redis call before it.
// One that has less (it waited in the ready queue or behind a limit longer
// than the prepare stage's admission allowed for) goes back to the prepare
// stage, which takes it again in its next batch, before the firings it has
// not leased yet, under the same delivery: a lease is never renewed or
// taken again by an executor one firing at a time, on time or late.
func (p *Stage) leaseLeft(it *work.Item) bool {
	if time.Duration(it.LeaseUntil-p.clk.Now().UnixNano()) >= p.cfg.LeaseTTL/2 {
		return true
	}
	p.count(it, it.Firing, "lease_again")
	p.leaseAgain(it)
	return false
}

// leaseAgain sends a firing back to be leased again, through the prepare
// holder's AddAfter, the one way back: its owner takes it back first
// (work.Owner.Requeue: it is held again, not fired), and drops it when its
// partition is gone.
func (p *Stage) leaseAgain(it *work.Item) {
	if !it.Owner.Requeue(it) {
		return
	}
	p.prepare.AddAfter(it, p.clk.Now().UnixNano())
}

// hold reopens the hold span of a traced firing that waits again.
func (p *Stage) hold(it *work.Item) {
	if p.traced(it) {
		_, it.Trace.Hold = p.tracer.Start(trace.ContextWithSpan(context.Background(), it.Trace.Consume), SpanHold,
			trace.WithAttributes(attribute.Int("sundial.deliveries", int(it.Deliveries))))
	}
}

// Span names of the fire stage's steps; SpanHold is the consumer's name
// for a firing waiting, reused when one waits again. The lease, taken ahead
// for a batch, is an event (prepare.EventLease), not a span; settling is
// settle.SpanSettle.
const (
	SpanTarget = "worker.target"
	SpanHold   = "worker.hold"
)

// traced: the firing has a trace and this stage a tracer.
func (p *Stage) traced(it *work.Item) bool { return it.Trace != nil && p.tracer != nil }

func (p *Stage) attempt(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution) {
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
	p.m.Rollup.Started(f.GetTenant(), f.GetPriority(), late)
	defer p.m.Rollup.Finished(f.GetTenant())
	if j := p.m.Job(f.GetJobId()); j != nil {
		j.Lateness.Observe(late)
	}

	running := settle.AttemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, fence, p.cfg.WorkerID)
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
	traceparent := ""
	if span != nil {
		endTargetSpan(span, f, res, fence)
		// A retry or dead letter staged from here carries this attempt's
		// context: the next attempt continues the trace.
		traceparent = tracing.Format(it.Trace.Consume.SpanContext())
	}
	// The renewer keeps the lease until the settle stage has written the
	// attempt's marker.
	p.settle.Settle(it, work.Outcome{
		Execution: ex, Started: started, Finished: finished, FireAt: fireAt, Result: res,
		Fenced:          errors.Is(context.Cause(actx), lease.ErrFenced),
		CancelledBy:     cancelledBy,
		NextTraceparent: traceparent,
		StopRenewing: func() bool {
			failed := p.renewals.stop(rn)
			cancel(nil)
			return failed
		},
	})
}

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
