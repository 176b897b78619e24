// Package executor is the bounded pool that fires due firings: it pops the
// most urgent one from the ready queue, takes its lease in one Redis call,
// calls the target, settles what follows (a retry staged in the outbox, a
// dead letter, a completed job), and hands the attempt's records to the
// recorder.
//
// The firing path is timer → ready queue → (host rate limit) → lease
// (Redis) → target. Neither Postgres nor the relay is on it: Postgres is
// written after the target answered, and only when the attempt failed or
// was the job's last slot. The ledger is written beside the path: the
// RUNNING record is handed to the recorder without waiting, the final one
// after the attempt settled.
//
// After the target answers, in this order, while the lease is still held
// and renewed:
//
//  1. decide (pkg retry): SUCCEEDED, RETRY_SCHEDULED or DEAD;
//  2. settle (pkg settle): write the retry to the outbox, or the dead
//     letter to Postgres and the DLQ topic, and complete a last-slot job —
//     retried until it succeeds; a pool stopping meanwhile leaves the
//     firing unfinished and its lease released, so it is redelivered;
//  3. mark (Redis): the done marker (success), or the attempt marker, which
//     also keeps or clears the overlap policy's running marker;
//  4. notify the job's callback (asynchronous, best effort);
//  5. record the final ledger row, whose write finishes the firing.
//
// A crash before 3 redelivers the firing and repeats the attempt (1 and 2
// are idempotent); a crash after 3 drops the redelivery as done.
//
// With a tracer (SetTracer), a traced firing's lease call, target call and
// settling are spans under its worker.consume span, the target receives
// the target span's context as its traceparent, and a retry is staged with
// the consume span's context, so the next attempt continues the trace.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Leaser is the part of lease.Store the executor uses.
type Leaser interface {
	Acquire(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) (lease.Result, error)
	Renew(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	Release(ctx context.Context, ex lease.Execution, holder string) (bool, error)
	MarkDone(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	MarkAttemptDone(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	MarkRetryPending(ctx context.Context, ex lease.Execution, holder string, ttl, keepRunning time.Duration) error
}

// Recorder is the part of recorder.Recorder the executor uses.
type Recorder interface {
	Running(a *sundialv1.ExecutionAttempt)
	// Final hands in an attempt's outcome; held says the attempt kept its
	// lease to the end (its record needs no fence check).
	Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool
}

// Holder takes items back to try again later.
type Holder interface{ Add(it *work.Item) }

// Settler makes an attempt's consequences durable (*settle.Settler).
type Settler interface {
	Settle(ctx context.Context, f *sundialv1.Firing, d retry.Decision, res target.Result) (settle.Outcome, error)
}

// Notifier queues completion notifications without blocking
// (*notify.Notifier).
type Notifier interface {
	Notify(callbackURL string, s notify.Summary) bool
}

// Limiter rate-limits requests per target host (*hostguard.Limiter).
type Limiter interface {
	Reserve(host string, now time.Time) time.Duration
}

// Config tunes the pool.
type Config struct {
	// Executors bounds concurrent attempts.
	Executors int
	// WorkerID names this worker in leases and ledger records.
	WorkerID string
	// LeaseTTL is how long a crashed worker blocks an execution; long
	// attempts renew every LeaseTTL/3.
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
var DefaultConfig = Config{Executors: 128, LeaseTTL: 10 * time.Second, DoneTTL: 7 * 24 * time.Hour, RedisTimeout: 2 * time.Second,
	RetryAfter: 250 * time.Millisecond, RunningGrace: time.Minute}

// Pool is a lifecycle.Service running Config.Executors goroutines.
type Pool struct {
	cfg      Config
	queue    *readyq.Queue
	holder   Holder
	leaser   Leaser
	target   target.Target
	rec      Recorder
	settler  Settler
	notifier Notifier
	limiter  Limiter
	tracer   trace.Tracer
	clk      clock.Clock
	m        *metrics.Metrics
	logger   *slog.Logger

	seq    atomic.Uint64
	runner lifecycle.Runner
	// stopping ends when Stop is called: attempts run on, but settling
	// gives up retrying, and a final record that cannot be handed to the
	// recorder is given up (the firing stays unfinished and is
	// redelivered).
	stopping context.Context
}

// New returns a pool. clk is the corrected clock.
func New(cfg Config, q *readyq.Queue, h Holder, l Leaser, t target.Target, rec Recorder, clk clock.Clock, m *metrics.Metrics, logger *slog.Logger) *Pool {
	if cfg.Executors <= 0 {
		cfg.Executors = DefaultConfig.Executors
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultConfig.LeaseTTL
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = DefaultConfig.DoneTTL
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = DefaultConfig.RedisTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultConfig.RetryAfter
	}
	if cfg.RunningGrace <= 0 {
		cfg.RunningGrace = max(DefaultConfig.RunningGrace, 3*cfg.LeaseTTL)
	}
	return &Pool{cfg: cfg, queue: q, holder: h, leaser: l, target: t, rec: rec, clk: clk, m: m, logger: logger, stopping: context.Background()}
}

// SetSettler makes failures retried through the outbox and dead-lettered,
// and last slots complete their jobs. Without one (no Postgres), a failed
// attempt is recorded FAILED and nothing follows it. Call before Start.
func (p *Pool) SetSettler(s Settler) { p.settler = s }

// SetNotifier sends completion notifications to jobs' callback URLs.
func (p *Pool) SetNotifier(n Notifier) { p.notifier = n }

// SetLimiter rate-limits requests per target host.
func (p *Pool) SetLimiter(l Limiter) { p.limiter = l }

// SetTracer traces the lease, target and settle steps of traced firings
// (those the consumer gave a work.Trace). Call before Start.
func (p *Pool) SetTracer(t trace.Tracer) { p.tracer = t }

// Start runs the executors.
func (p *Pool) Start(context.Context) error {
	return p.runner.Run(func(ctx context.Context) error {
		p.stopping = ctx
		var wg sync.WaitGroup
		for range p.cfg.Executors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					it := p.queue.Pop(ctx)
					if it == nil {
						return
					}
					// An attempt that started finishes even while the
					// pool stops: the consumer already waited for it
					// before giving up its partition.
					p.process(context.WithoutCancel(ctx), it)
				}
			}()
		}
		wg.Wait()
		return nil
	})
}

// Stop stops popping and waits for attempts in progress.
func (p *Pool) Stop() { p.runner.Stop() }

// count counts an outcome of the item's firing (f, when decoded, names
// its priority, and its job when that is watched) and notes it on the
// firing's trace.
func (p *Pool) count(it *work.Item, f *sundialv1.Firing, outcome string) {
	pr, tenant := it.Priority, it.Tenant
	if f != nil {
		pr, tenant = f.GetPriority(), f.GetTenant()
		if j := p.m.Job(f.GetJobId()); j != nil {
			j.Fired(outcome)
		}
	}
	p.m.Firings.WithLabelValues(firing.PriorityName(pr), outcome, p.m.Tenant(tenant)).Inc()
	if it.Trace != nil {
		it.Trace.Consume.SetAttributes(tracing.AttrOutcome.String(outcome))
	}
}

// Overlap maps a job's overlap policy to the lease script's.
func Overlap(o sundialv1.OverlapPolicy) lease.Overlap {
	switch o {
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
		return lease.OverlapSkip
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:
		return lease.OverlapBufferOne
	default:
		return lease.OverlapAllow
	}
}

func (p *Pool) process(ctx context.Context, it *work.Item) {
	if !it.Owner.Claim(it) {
		return // its partition went elsewhere; the new owner fires it
	}
	if it.Trace != nil {
		it.Trace.Hold.End()
		ctx = trace.ContextWithSpan(ctx, it.Trace.Consume)
	}
	f, err := firing.Decode(it.Envelope)
	if err != nil {
		// Checked when the record arrived, so only a bug gets here.
		p.logger.Error("undecodable firing", "err", err)
		p.count(it, nil, "poison")
		it.Owner.Finish(it)
		return
	}
	pr := firing.PriorityName(f.GetPriority())
	p.m.Lateness.WithLabelValues(pr, "timer", p.m.Tenant(f.GetTenant())).Observe(max(0, time.Duration(it.Ready-it.FireAt).Seconds()))

	// The host's rate limit is checked before the lease: a firing over it
	// waits in the holder, not in an executor and not under a lease.
	if p.limiter != nil {
		if host := target.Host(f); host != "" {
			if wait := p.limiter.Reserve(host, p.clk.Now()); wait > 0 {
				p.count(it, f, "rate_limited")
				p.m.RateLimited.Inc()
				p.requeue(it, wait)
				return
			}
		}
	}

	ex := lease.Execution{
		JobID: f.GetJobId(), ExecutionID: f.GetExecutionId(), Attempt: max(f.GetAttempt(), 1), Version: f.GetJobVersion(),
		Overlap: Overlap(f.GetOverlap()), FirstAttempt: f.GetFirstAttempt(),
	}
	// Unique per delivery, so a duplicate delivered to this same worker is
	// excluded too.
	holder := p.cfg.WorkerID + "/" + strconv.FormatUint(p.seq.Add(1), 36)
	lctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
	var span trace.Span
	if p.traced(it) {
		lctx, span = p.tracer.Start(lctx, SpanLease, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system", "redis")))
	}
	res, err := p.leaser.Acquire(lctx, ex, holder, p.cfg.LeaseTTL)
	cancel()
	if span != nil {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else if span.IsRecording() {
			span.SetAttributes(attribute.String("sundial.lease", res.Outcome.String()), attribute.Int64("sundial.fence_token", res.Fence))
		}
		span.End()
	}
	if err != nil {
		p.count(it, f, "lease_error")
		p.logger.Warn("lease call failed, holding the firing to try again", "err", err, "execution_id", ex.ExecutionID, "retry_in", p.cfg.RetryAfter)
		p.requeue(it, p.cfg.RetryAfter)
		return
	}
	switch res.Outcome {
	case lease.AlreadyDone:
		// A redelivery (relay re-publish, rebalance, crash before commit).
		p.count(it, f, "duplicate")
		it.Owner.Finish(it)
	case lease.Stale:
		p.count(it, f, "stale")
		a := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
		a.FinishedTime = timestamppb.New(p.clk.Now())
		a.Reason = fmt.Sprintf("stale job version %d (current %d): the job changed after this firing was staged", f.GetJobVersion(), res.CurrentVersion)
		p.final(it, a, false)
	case lease.Held:
		// Another delivery is firing it. Keep ours until that lease ends:
		// if its holder dies, this copy still fires; if it finished, the
		// next look finds the done marker.
		p.count(it, f, "lease_conflict")
		p.m.LeaseConflicts.Inc()
		it.Deliveries++
		p.requeue(it, res.HeldFor+p.cfg.LeaseTTL/10)
	case lease.Overlapping:
		p.overlapSkipped(ctx, it, f, ex, res.Running)
	case lease.Waiting:
		// Behind the running execution (BUFFER_ONE, or a retry): look
		// again when its marker ends.
		p.count(it, f, "overlap_waiting")
		p.m.OverlapWaits.WithLabelValues(ex.Overlap.String()).Inc()
		p.requeue(it, res.HeldFor+p.cfg.LeaseTTL/10)
	case lease.Poison:
		p.poison(ctx, it, f, ex, holder, res)
	case lease.Acquired:
		p.attempt(ctx, it, f, ex, holder, res.Fence)
	}
}

func (p *Pool) requeue(it *work.Item, after time.Duration) {
	if !it.Owner.Requeue(it) {
		return
	}
	it.FireAt = p.clk.Now().Add(after).UnixNano()
	if p.traced(it) {
		_, it.Trace.Hold = p.tracer.Start(trace.ContextWithSpan(context.Background(), it.Trace.Consume), SpanHold,
			trace.WithAttributes(attribute.Int("sundial.deliveries", int(it.Deliveries))))
	}
	p.holder.Add(it)
}

// Span names of the executor's steps; SpanHold is the consumer's name
// for a firing waiting, reused when one waits again.
const (
	SpanLease  = "worker.lease"
	SpanTarget = "worker.target"
	SpanSettle = "worker.settle"
	SpanHold   = "worker.hold"
)

func (p *Pool) overlapSkipped(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, running string) {
	p.count(it, f, "overlap_skipped")
	p.m.OverlapSkips.WithLabelValues(ex.Overlap.String()).Inc()
	a := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
	a.FinishedTime = timestamppb.New(p.clk.Now())
	if ex.Overlap == lease.OverlapBufferOne {
		a.Reason = fmt.Sprintf("overlap BUFFER_ONE: execution %s of this job is running and another is already waiting behind it", running)
	} else {
		a.Reason = fmt.Sprintf("overlap SKIP: execution %s of this job is still running", running)
	}
	if f.GetLastSlot() && p.settler != nil {
		// The schedule's last slot was skipped: nothing later will
		// complete the job.
		d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, Attempts: 0, Reason: a.Reason}
		if _, err := p.settleTraced(ctx, it, f, d, target.Result{}); err != nil {
			p.logger.Warn("could not complete the job after its skipped last slot; it is redelivered", "err", err, "execution_id", ex.ExecutionID)
			return
		}
	}
	p.final(it, a, false)
}

// poison dead-letters an attempt its workers kept dying on, without firing
// it again; the lease is held.
func (p *Pool) poison(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, holder string, lr lease.Result) {
	p.count(it, f, "poison")
	err := fmt.Errorf("delivered %d times without finishing (max deliveries %d): its workers crashed or hung on it", lr.Deliveries, p.cfg.MaxDeliveries)
	res := target.Failed(target.ClassPoison, true, err)
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, Class: target.ClassPoison, Attempts: retry.AttemptsMade(f),
		Reason: "poison: " + err.Error() + "; dead-lettered without firing"}
	now := p.clk.Now()
	out, ok := p.settle(ctx, it, f, ex, holder, &d, res)
	if !ok {
		return
	}
	p.markFinished(ctx, ex, holder, d)
	p.notify(f, d, res, now, out)
	a := p.attemptRecord(f, d.Status, lr.Fence)
	a.FinishedTime = timestamppb.New(now)
	a.Error = err.Error()
	a.Reason = d.Reason
	p.final(it, a, false)
}

func (p *Pool) attempt(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, holder string, fence int64) {
	p.m.Executing.Inc()
	defer p.m.Executing.Dec()
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
	renewDone := make(chan struct{})
	// Armed before the call starts, so the first renewal is due LeaseTTL/3
	// after the attempt began whatever the scheduling.
	renewTimer := p.clk.NewTimer(p.cfg.LeaseTTL / 3)
	// renewFailed is written by the renewer and read after renewDone.
	renewFailed := false
	go func() {
		defer close(renewDone)
		renewFailed = p.renew(actx, cancel, ex, holder, renewTimer)
	}()
	stopRenewing := func() {
		cancel(nil)
		<-renewDone
	}
	req := target.Request{Firing: f, Fence: fence, SentAt: started}
	fctx := actx // actx itself is the renewer's
	var span trace.Span
	if p.traced(it) {
		fctx, span = p.tracer.Start(actx, SpanTarget, trace.WithSpanKind(trace.SpanKindClient))
		req.Traceparent = tracing.Format(span.SpanContext())
	}
	res := p.target.Fire(fctx, req)
	finished := p.clk.Now()
	if span != nil {
		endTargetSpan(span, f, res, fence)
		// A retry or dead letter staged from here carries this attempt's
		// context: the next attempt continues the trace.
		f.Traceparent = tracing.Format(it.Trace.Consume.SpanContext())
	}

	var (
		d   retry.Decision
		out settle.Outcome
		// held: the lease was ours to the end (every renewal and the
		// marker written under our fence), so the record's fence is
		// current and the ledger need not check it.
		held bool
	)
	if errors.Is(context.Cause(actx), lease.ErrFenced) {
		// Another holder fires with a larger fence; this result is stale.
		stopRenewing()
		d = retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED, Attempts: retry.AttemptsMade(f),
			Reason: "lease taken over by another delivery during the attempt; this result is discarded"}
		if res.Err == nil {
			res.Err = lease.ErrFenced
		}
	} else {
		d = p.decide(f, res, finished)
		// Settled under the lease, which is still being renewed.
		var ok bool
		out, ok = p.settle(ctx, it, f, ex, holder, &d, res)
		stopRenewing()
		if !ok {
			return
		}
		held = p.markFinished(ctx, ex, holder, d) && !renewFailed
		p.notify(f, d, res, finished, out)
	}
	p.count(it, f, outcomeName(d.Status))

	a := p.attemptRecord(f, d.Status, fence)
	a.StartedTime = timestamppb.New(started)
	a.FinishedTime = timestamppb.New(finished)
	a.Lateness = durationpb.New(started.Sub(fireAt))
	a.Duration = durationpb.New(finished.Sub(started))
	a.HttpStatus = int32(res.HTTPStatus)
	a.ResponseExcerpt = res.Excerpt
	a.Reason = d.Reason
	if res.Err != nil && !res.OK {
		a.Error = res.Err.Error()
	}
	if !res.OK && d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED {
		p.logger.Info("attempt failed", "execution_id", ex.ExecutionID, "job_id", ex.JobID, "attempt", ex.Attempt,
			"http_status", res.HTTPStatus, "class", d.Class, "status", outcomeName(d.Status), "err", res.Err)
	}
	p.final(it, a, held)
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

// settle runs the settler; when it gives up (the pool is stopping and
// Postgres or Kafka does not answer), the lease is released and the firing
// left unfinished, so its redelivery makes the attempt again.
func (p *Pool) settle(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, holder string, d *retry.Decision, res target.Result) (settle.Outcome, bool) {
	if p.settler == nil {
		if d.Status == sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD {
			d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
			d.Reason += "; not dead-lettered: this worker has no Postgres (--postgres-dsn)"
		}
		return settle.Outcome{}, true
	}
	out, err := p.settleTraced(ctx, it, f, *d, res)
	if err != nil {
		p.logger.Error("could not settle the attempt while stopping; it will be redelivered and made again", "err", err, "execution_id", ex.ExecutionID, "attempt", ex.Attempt)
		rctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		_, _ = p.leaser.Release(rctx, ex, holder)
		cancel()
		return out, false
	}
	if out.Next != nil {
		d.Reason = fmt.Sprintf("%s; staged as attempt %d", d.Reason, out.Next.GetAttempt())
	}
	return out, true
}

// traced: the firing has a trace and this pool a tracer.
func (p *Pool) traced(it *work.Item) bool { return it.Trace != nil && p.tracer != nil }

// settleTraced is the settler's Settle under a worker.settle span when
// the firing is traced.
func (p *Pool) settleTraced(ctx context.Context, it *work.Item, f *sundialv1.Firing, d retry.Decision, res target.Result) (settle.Outcome, error) {
	if !p.traced(it) {
		return p.settler.Settle(p.stopping, f, d, res)
	}
	_, span := p.tracer.Start(trace.ContextWithSpan(p.stopping, it.Trace.Consume), SpanSettle,
		trace.WithAttributes(attribute.String("sundial.decision", outcomeName(d.Status))))
	defer span.End()
	out, err := p.settler.Settle(trace.ContextWithSpan(p.stopping, span), f, d, res)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else if out.Next != nil && span.IsRecording() {
		span.SetAttributes(attribute.Int("sundial.next_attempt", int(out.Next.GetAttempt())))
	}
	return out, err
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

// renew keeps the lease alive while the target call runs and the attempt
// settles; a takeover by another holder cancels the call. It reports
// whether any renewal failed (the lease may have lapsed).
func (p *Pool) renew(ctx context.Context, cancel context.CancelCauseFunc, ex lease.Execution, holder string, t clock.Timer) (failed bool) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return failed
		case <-t.C():
		}
		rctx, c := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		err := p.leaser.Renew(rctx, ex, holder, p.cfg.LeaseTTL)
		c()
		switch {
		case errors.Is(err, lease.ErrFenced):
			p.logger.Warn("lease taken over during the attempt; abandoning it", "execution_id", ex.ExecutionID)
			cancel(lease.ErrFenced)
			return true
		case err != nil && ctx.Err() == nil:
			// Expired or Redis unreachable: nobody else holds it (or we
			// cannot tell); finishing is better than abandoning.
			p.logger.Warn("lease renewal failed", "err", err, "execution_id", ex.ExecutionID)
			failed = true
		}
		t.Reset(p.cfg.LeaseTTL / 3)
	}
}

// markFinished writes the done marker (success), the retry-pending marker
// (a retry is staged: the overlap marker stays through the backoff) or the
// attempt marker (anything else), which also releases the lease. It retries
// a little: without the marker a redelivery would fire again. It reports
// whether the marker was written (under this holder's fence).
func (p *Pool) markFinished(ctx context.Context, ex lease.Execution, holder string, d retry.Decision) bool {
	mark := func(c context.Context) error { return p.leaser.MarkAttemptDone(c, ex, holder, p.cfg.DoneTTL) }
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
		mark = func(c context.Context) error { return p.leaser.MarkDone(c, ex, holder, p.cfg.DoneTTL) }
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		keep := d.Delay + p.cfg.RunningGrace
		mark = func(c context.Context) error { return p.leaser.MarkRetryPending(c, ex, holder, p.cfg.DoneTTL, keep) }
	}
	backoff := 50 * time.Millisecond
	for i := 0; ; i++ {
		mctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		err := mark(mctx)
		cancel()
		if err == nil {
			return true
		}
		if i == 3 {
			p.logger.Error("could not write the done marker; a redelivery would fire again", "err", err, "execution_id", ex.ExecutionID)
			return false
		}
		t := p.clk.NewTimer(backoff)
		<-t.C()
		backoff *= 2
	}
}

// notify queues the job's completion notification: on success, and on
// death (its final failure and its entry in the DLQ, one notification).
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
	if !p.rec.Final(p.stopping, a, held, func() { it.Owner.Finish(it) }) {
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

func outcomeName(s sundialv1.ExecutionStatus) string {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
		return "succeeded"
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED:
		return "failed"
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED:
		return "fenced"
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		return "retry_scheduled"
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		return "dead"
	default:
		return "other"
	}
}
