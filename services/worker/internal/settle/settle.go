// Package settle is the worker's settle stage, the last of its three
// (prepare, fire, settle): Stage takes each attempt the fire stage made and
// decides, settles, marks, notifies and records it, several at a time
// (stage.go). This file is what it settles with: an attempt's consequences
// made durable before the worker lets go of it — the next attempt of a
// failed execution is written to the outbox, a dead execution to the
// dead_letters table and the DLQ topic, and a job whose last slot
// succeeded or died is queued for completion (package completer completes
// it, at its pace).
//
// The stage calls Settler after the target answered and before it writes
// the lease markers, while the execution's lease is still held (and
// renewed by the fire stage). So a crash at any point leaves either the consequence written, or
// the attempt unmarked and its Kafka offset uncommitted — the firing is
// redelivered and the attempt made again, and every write here is
// idempotent (ON CONFLICT … DO NOTHING, an upsert, a guarded UPDATE), so
// doing it twice is harmless. This is what makes a retry survive any crash:
// it never lives only in a worker's memory.
//
// Postgres is reached only for failures and for last slots, never on the
// way to the target: the firing path stays timer → lease → target.
package settle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// Store is the Postgres side (Postgres implements it).
type Store interface {
	// InsertRetry stages the next attempt in the outbox, due for
	// publishing now and firing at next's fire time, and wakes the relay.
	// Staging an attempt already staged is a no-op.
	InsertRetry(ctx context.Context, next *sundialv1.Firing, envelope []byte) error
	// UpsertDeadLetter records the dead execution (one row per execution:
	// a re-driven execution that dies again updates it, keeping its
	// re-drive count) and returns the row's re-drive count and time.
	UpsertDeadLetter(ctx context.Context, dl *sundialv1.DeadLetter, envelope []byte) (redrives int32, redriven time.Time, err error)
	// QueueCompletions queues the job of each completion's firing (the
	// schedule's last slot), in one statement, to be completed (and its
	// audit row appended) if it is still active at the firing's version
	// with no slot left.
	QueueCompletions(ctx context.Context, cs []Completion) error
}

// Completion is a job to complete after its last slot ended with Outcome.
type Completion struct {
	Firing  *sundialv1.Firing
	Outcome string
}

// Publisher sends dead letters to the DLQ topic.
type Publisher interface {
	PublishDeadLetter(ctx context.Context, dl *sundialv1.DeadLetter) error
}

// Metrics observes the settler; nil fields are skipped.
type Metrics struct {
	RetryScheduled func(priority, class string)
	DeadLetter     func(class string)
	// StepError counts failed tries of a step (retry, dead_letter, dlq,
	// complete: the queueing) that will be tried again.
	StepError func(step string)
}

// Config tunes the settler.
type Config struct {
	// StepTimeout bounds one try of one write.
	StepTimeout time.Duration
	// MaxBackoff caps the wait between tries.
	MaxBackoff time.Duration
}

// Settler is safe for concurrent use.
type Settler struct {
	store  Store
	pub    Publisher
	clk    clock.Clock
	cfg    Config
	m      Metrics
	logger *slog.Logger
}

// New returns a settler. clk is the corrected clock (it stamps the retry's
// staged time and the dead letter's time).
func New(store Store, pub Publisher, clk clock.Clock, cfg Config, m Metrics, logger *slog.Logger) *Settler {
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 5 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	return &Settler{store: store, pub: pub, clk: clk, cfg: cfg, m: m, logger: logger}
}

// Outcome is what Settle wrote, for the ledger and the notification.
type Outcome struct {
	// Next is the staged next attempt (RETRY_SCHEDULED).
	Next *sundialv1.Firing
	// DeadLetter is what went to the DLQ (DEAD).
	DeadLetter *sundialv1.DeadLetter
}

// Settle writes what d implies for the attempt f that ended with res. Every
// write is tried at least once; tries are repeated (with a capped backoff)
// until they succeed or ctx ends, and then the error is returned: the
// caller must not mark the attempt finished.
func (s *Settler) Settle(ctx context.Context, f *sundialv1.Firing, d retry.Decision, res target.Result) (Outcome, error) {
	r := s.SettleMany(ctx, []Attempt{{Firing: f, Decision: d, Result: res}})
	return r[0].Outcome, r[0].Err
}

// Attempt is one finished attempt to settle.
type Attempt struct {
	Firing   *sundialv1.Firing
	Decision retry.Decision
	Result   target.Result
}

// Settled is what settling one Attempt wrote, or why it could not.
type Settled struct {
	Outcome Outcome
	Err     error
}

// SettleMany settles attempts that ended about together, as Settle would
// one by one, except that the jobs their last slots complete are queued
// with one statement: a herd of one-off jobs costs one write per group, not
// one per firing. Results are in the order of as.
func (s *Settler) SettleMany(ctx context.Context, as []Attempt) []Settled {
	out := make([]Settled, len(as))
	var (
		cs  []Completion
		idx []int
	)
	for i, a := range as {
		out[i].Outcome, out[i].Err = s.settleOwn(ctx, a.Firing, a.Decision, a.Result)
		if out[i].Err != nil {
			continue
		}
		if outcome := completionOutcome(a.Decision.Status); a.Firing.GetLastSlot() && outcome != "" {
			cs = append(cs, Completion{Firing: a.Firing, Outcome: outcome})
			idx = append(idx, i)
		}
	}
	if len(cs) == 0 {
		return out
	}
	err := s.try(ctx, "complete", func(c context.Context) error { return s.store.QueueCompletions(c, cs) })
	if err != nil {
		for _, i := range idx {
			out[i].Err = err
		}
	}
	return out
}

// settleOwn writes what is the attempt's alone: its retry, or its dead
// letter.
func (s *Settler) settleOwn(ctx context.Context, f *sundialv1.Firing, d retry.Decision, res target.Result) (Outcome, error) {
	var out Outcome
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		next := firing.NextAttempt(f, d.NextFire, s.clk.Now())
		env, err := firing.Encode(next)
		if err != nil {
			return out, fmt.Errorf("settle: encode retry: %w", err)
		}
		if err := s.try(ctx, "retry", func(c context.Context) error { return s.store.InsertRetry(c, next, env) }); err != nil {
			return out, err
		}
		out.Next = next
		if s.m.RetryScheduled != nil {
			s.m.RetryScheduled(firing.PriorityName(f.GetPriority()), d.Class)
		}
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		dl := DeadLetterOf(f, d, res, s.clk.Now())
		env, err := firing.Encode(f)
		if err != nil {
			return out, fmt.Errorf("settle: encode dead letter: %w", err)
		}
		// The table first: it is what the DeadLetterService lists and
		// re-drives from, and it tells the topic record its re-drive count.
		if err := s.try(ctx, "dead_letter", func(c context.Context) error {
			n, at, err := s.store.UpsertDeadLetter(c, dl, env)
			if err == nil {
				dl.RedriveCount = n
				if !at.IsZero() {
					dl.RedriveTime = timestamppb.New(at)
				}
			}
			return err
		}); err != nil {
			return out, err
		}
		if s.pub != nil {
			if err := s.try(ctx, "dlq", func(c context.Context) error { return s.pub.PublishDeadLetter(c, dl) }); err != nil {
				return out, err
			}
		}
		out.DeadLetter = dl
		if s.m.DeadLetter != nil {
			s.m.DeadLetter(dl.GetErrorClass())
		}
	}
	return out, nil
}

// completionOutcome names the end of an execution that completes its job
// when it was the schedule's last slot: it succeeded, died, was skipped by
// the overlap policy or was cancelled (no later slot will come to complete
// the job).
func completionOutcome(s sundialv1.ExecutionStatus) string {
	switch s {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD,
		sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return firing.ExecutionStatusWord(s)
	default:
		return ""
	}
}

// try runs step until it succeeds; after a failure it waits (doubling from
// 50 ms up to MaxBackoff) unless ctx has ended.
func (s *Settler) try(ctx context.Context, step string, fn func(context.Context) error) error {
	wait := 50 * time.Millisecond
	for {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StepTimeout)
		err := fn(c)
		cancel()
		if err == nil {
			return nil
		}
		if s.m.StepError != nil {
			s.m.StepError(step)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("settle: %s: %w (giving up: %w)", step, err, ctx.Err())
		}
		s.logger.Warn("settling an attempt failed, trying again", "step", step, "err", err, "retry_in", wait)
		t := s.clk.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("settle: %s: %w (giving up: %w)", step, err, ctx.Err())
		}
		wait = min(2*wait, s.cfg.MaxBackoff)
	}
}

// DeadLetterOf builds the dead letter of f.
func DeadLetterOf(f *sundialv1.Firing, d retry.Decision, res target.Result, now time.Time) *sundialv1.DeadLetter {
	dl := &sundialv1.DeadLetter{
		Firing:     f,
		ErrorClass: d.Class,
		DeadTime:   timestamppb.New(now),
		HttpStatus: int32(res.HTTPStatus),
		Attempts:   d.Attempts,
	}
	if res.Err != nil {
		dl.LastError = res.Err.Error()
	}
	if dl.LastError == "" {
		dl.LastError = d.Reason
	}
	return dl
}
