// Package executor is the bounded pool that fires due firings: it pops the
// most urgent one from the ready queue, takes its lease in one Redis call,
// calls the target, and hands the attempt's records to the recorder.
//
// The firing path is timer → ready queue → lease (Redis) → target. Neither
// Postgres nor the relay is on it, and the ledger is written beside it: the
// RUNNING record is handed to the recorder without waiting, the final one
// after the target answered.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Leaser is the part of lease.Store the executor uses.
type Leaser interface {
	Acquire(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) (lease.Result, error)
	Renew(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	MarkDone(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
	MarkAttemptDone(ctx context.Context, ex lease.Execution, holder string, ttl time.Duration) error
}

// Recorder is the part of recorder.Recorder the executor uses.
type Recorder interface {
	Running(a *sundialv1.ExecutionAttempt)
	Final(ctx context.Context, a *sundialv1.ExecutionAttempt, done func()) bool
}

// Holder takes items back to try again later.
type Holder interface{ Add(it *work.Item) }

// Decider turns a finished attempt into its ledger status. The default says
// SUCCEEDED or FAILED; the retry policy (next issue) replaces it with one
// that schedules the next attempt (RETRY_SCHEDULED) or dead-letters the
// execution (DEAD), and it runs before the done markers are written.
type Decider interface {
	Decide(ctx context.Context, f *sundialv1.Firing, res target.Result) sundialv1.ExecutionStatus
}

// SucceededOrFailed is the default Decider: 2xx (or an acknowledged
// produce) is SUCCEEDED, anything else FAILED.
type SucceededOrFailed struct{}

func (SucceededOrFailed) Decide(_ context.Context, _ *sundialv1.Firing, res target.Result) sundialv1.ExecutionStatus {
	if res.OK {
		return sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED
	}
	return sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
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
}

// DefaultConfig values.
var DefaultConfig = Config{Executors: 128, LeaseTTL: 10 * time.Second, DoneTTL: 7 * 24 * time.Hour, RedisTimeout: 2 * time.Second, RetryAfter: 250 * time.Millisecond}

// Pool is a lifecycle.Service running Config.Executors goroutines.
type Pool struct {
	cfg     Config
	queue   *readyq.Queue
	holder  Holder
	leaser  Leaser
	target  target.Target
	rec     Recorder
	decider Decider
	clk     clock.Clock
	m       *metrics.Metrics
	logger  *slog.Logger

	seq    atomic.Uint64
	runner lifecycle.Runner
	// stopping ends when Stop is called: attempts run on, but a final
	// record that cannot be handed to the recorder is then given up (the
	// firing stays unfinished and is redelivered).
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
	return &Pool{cfg: cfg, queue: q, holder: h, leaser: l, target: t, rec: rec, decider: SucceededOrFailed{}, clk: clk, m: m, logger: logger}
}

// SetDecider replaces the default Decider; call before Start.
func (p *Pool) SetDecider(d Decider) { p.decider = d }

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

func (p *Pool) count(f *sundialv1.Firing, pr sundialv1.Priority, outcome string) {
	if f != nil {
		pr = f.GetPriority()
	}
	p.m.Firings.WithLabelValues(firing.PriorityName(pr), outcome).Inc()
}

func (p *Pool) process(ctx context.Context, it *work.Item) {
	if !it.Owner.Claim(it) {
		return // its partition went elsewhere; the new owner fires it
	}
	f, err := firing.Decode(it.Envelope)
	if err != nil {
		// Checked when the record arrived, so only a bug gets here.
		p.logger.Error("undecodable firing", "err", err)
		p.count(nil, it.Priority, "poison")
		it.Owner.Finish(it)
		return
	}
	pr := firing.PriorityName(f.GetPriority())
	p.m.Lateness.WithLabelValues(pr, "timer").Observe(max(0, time.Duration(it.Ready-it.FireAt).Seconds()))

	ex := lease.Execution{JobID: f.GetJobId(), ExecutionID: f.GetExecutionId(), Attempt: max(f.GetAttempt(), 1), Version: f.GetJobVersion()}
	// Unique per delivery, so a duplicate delivered to this same worker is
	// excluded too.
	holder := p.cfg.WorkerID + "/" + strconv.FormatUint(p.seq.Add(1), 36)
	lctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
	res, err := p.leaser.Acquire(lctx, ex, holder, p.cfg.LeaseTTL)
	cancel()
	if err != nil {
		p.count(f, 0, "lease_error")
		p.logger.Warn("lease call failed, holding the firing to try again", "err", err, "execution_id", ex.ExecutionID, "retry_in", p.cfg.RetryAfter)
		p.requeue(it, p.cfg.RetryAfter)
		return
	}
	switch res.Outcome {
	case lease.AlreadyDone:
		// A redelivery (relay re-publish, rebalance, crash before commit).
		p.count(f, 0, "duplicate")
		it.Owner.Finish(it)
	case lease.Stale:
		p.count(f, 0, "stale")
		now := p.clk.Now()
		a := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
		a.FinishedTime = timestamppb.New(now)
		a.Reason = fmt.Sprintf("stale job version %d (current %d)", f.GetJobVersion(), res.CurrentVersion)
		p.final(ctx, it, a)
	case lease.Held:
		// Another delivery is firing it. Keep ours until that lease ends:
		// if its holder dies, this copy still fires; if it finished, the
		// next look finds the done marker.
		p.count(f, 0, "lease_conflict")
		p.m.LeaseConflicts.Inc()
		it.Deliveries++
		p.requeue(it, res.HeldFor+p.cfg.LeaseTTL/10)
	case lease.Acquired:
		p.attempt(ctx, it, f, ex, holder, res.Fence)
	}
}

func (p *Pool) requeue(it *work.Item, after time.Duration) {
	if !it.Owner.Requeue(it) {
		return
	}
	it.FireAt = p.clk.Now().Add(after).UnixNano()
	p.holder.Add(it)
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
	p.m.Lateness.WithLabelValues(pr, "target").Observe(max(0, started.Sub(fireAt).Seconds()))

	running := p.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, fence)
	running.StartedTime = timestamppb.New(started)
	running.Lateness = durationpb.New(started.Sub(fireAt))
	p.rec.Running(running)

	actx, cancel := context.WithCancelCause(ctx)
	renewDone := make(chan struct{})
	// Armed before the call starts, so the first renewal is due LeaseTTL/3
	// after the attempt began whatever the scheduling.
	renewTimer := p.clk.NewTimer(p.cfg.LeaseTTL / 3)
	go func() {
		defer close(renewDone)
		p.renew(actx, cancel, ex, holder, renewTimer)
	}()
	res := p.target.Fire(actx, target.Request{Firing: f, Fence: fence, SentAt: started})
	fenced := errors.Is(context.Cause(actx), lease.ErrFenced)
	cancel(nil)
	<-renewDone
	finished := p.clk.Now()

	var status sundialv1.ExecutionStatus
	if fenced {
		// Another holder fires with a larger fence; this result is stale.
		status = sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED
		if res.Err == nil {
			res.Err = lease.ErrFenced
		}
	} else {
		status = p.decider.Decide(ctx, f, res)
		p.markFinished(ctx, ex, holder, status)
	}
	p.count(f, 0, outcomeName(status))

	a := p.attemptRecord(f, status, fence)
	a.StartedTime = timestamppb.New(started)
	a.FinishedTime = timestamppb.New(finished)
	a.Lateness = durationpb.New(started.Sub(fireAt))
	a.Duration = durationpb.New(finished.Sub(started))
	a.HttpStatus = int32(res.HTTPStatus)
	a.ResponseExcerpt = res.Excerpt
	if res.Err != nil && !res.OK {
		a.Error = res.Err.Error()
	}
	if !res.OK && status == sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED {
		p.logger.Info("attempt failed", "execution_id", ex.ExecutionID, "job_id", ex.JobID, "attempt", ex.Attempt, "http_status", res.HTTPStatus, "err", res.Err)
	}
	p.final(ctx, it, a)
}

// renew keeps the lease alive while the target call runs; a takeover by
// another holder cancels the call.
func (p *Pool) renew(ctx context.Context, cancel context.CancelCauseFunc, ex lease.Execution, holder string, t clock.Timer) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		rctx, c := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		err := p.leaser.Renew(rctx, ex, holder, p.cfg.LeaseTTL)
		c()
		switch {
		case errors.Is(err, lease.ErrFenced):
			p.logger.Warn("lease taken over during the attempt; abandoning it", "execution_id", ex.ExecutionID)
			cancel(lease.ErrFenced)
			return
		case err != nil && ctx.Err() == nil:
			// Expired or Redis unreachable: nobody else holds it (or we
			// cannot tell); finishing is better than abandoning.
			p.logger.Warn("lease renewal failed", "err", err, "execution_id", ex.ExecutionID)
		}
		t.Reset(p.cfg.LeaseTTL / 3)
	}
}

// markFinished writes the done marker (success) or the attempt-finished
// marker (anything else), which also releases the lease. It retries a
// little: without the marker a redelivery would fire again.
func (p *Pool) markFinished(ctx context.Context, ex lease.Execution, holder string, status sundialv1.ExecutionStatus) {
	mark := p.leaser.MarkAttemptDone
	if status == sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		mark = p.leaser.MarkDone
	}
	backoff := 50 * time.Millisecond
	for i := 0; ; i++ {
		mctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
		err := mark(mctx, ex, holder, p.cfg.DoneTTL)
		cancel()
		if err == nil {
			return
		}
		if i == 3 {
			p.logger.Error("could not write the done marker; a redelivery would fire again", "err", err, "execution_id", ex.ExecutionID)
			return
		}
		t := p.clk.NewTimer(backoff)
		<-t.C()
		backoff *= 2
	}
}

func (p *Pool) final(_ context.Context, it *work.Item, a *sundialv1.ExecutionAttempt) {
	if !p.rec.Final(p.stopping, a, func() { it.Owner.Finish(it) }) {
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
