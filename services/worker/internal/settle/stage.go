package settle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/notify"
	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Stage is the worker's settle stage, the last of its three (prepare,
// fire, settle): it takes each attempt the fire stage made, with its
// work.Outcome (Settle), and records what followed, several attempts at a
// time, off the executors.
// Settlers take turns gathering the attempts that end within
// StageConfig.Linger (up to StageConfig.Batch); each settles its group
// while the others gather, and, while each lease is still held and renewed
// by the fire stage:
//
//  1. decides (package retry): SUCCEEDED, RETRY_SCHEDULED or DEAD;
//  2. settles (Settler): writes a retry to the outbox, or the dead letter
//     to Postgres and the DLQ topic, and completes a last-slot job — only
//     for the attempts that need it, retried until it succeeds; a stage
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
// Firings that are settled without a request — stale, skipped by their
// overlap policy, poison, cancelled before they were sent — are recorded
// (and, for poison and a cancelled last slot, settled) through Unfired.
//
// Nothing goes back: the stage only finishes firings (or, stopping, leaves
// them unfinished for their redelivery).
type Stage struct {
	cfg      StageConfig
	leaser   Leaser
	settler  Consequences
	notifier Notifier
	marks    Marker
	target   target.Target
	rec      Recorder
	tracer   trace.Tracer
	clk      clock.Clock
	m        *metrics.Metrics
	logger   *slog.Logger

	// in carries attempts from the fire stage; its bound is the
	// back-pressure that keeps settling from falling behind without
	// limit. closing guards it: Settle holds it read while sending, the
	// loop takes it to close in.
	in      chan *fired
	closing sync.RWMutex
	closed  bool
	// gathering is held by the settler whose turn it is to gather.
	gathering sync.Mutex
	runner    lifecycle.Runner
	// notices are the cancel notices being sent to targets; the loop
	// waits for them before it returns.
	notices sync.WaitGroup
	// stopping ends when the worker begins to stop (Stopping): attempts
	// still in flight are settled, but settling gives up retrying, and a
	// final record that cannot be handed to the recorder is given up (the
	// firing stays unfinished and is redelivered).
	stopping context.Context
	stop     context.CancelFunc
}

// Leaser is the part of lease.Store the settle stage uses.
type Leaser interface {
	Release(ctx context.Context, ex lease.Execution, holder string) (bool, error)
	FinishMany(ctx context.Context, batch []lease.Finish) error
}

// Recorder is the part of recorder.Recorder the settle stage uses.
type Recorder interface {
	// Final hands in an attempt's outcome; held says the attempt kept its
	// lease to the end (its record needs no fence check).
	Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool
}

// Consequences makes attempts' consequences durable, a group at a time
// (*Settler).
type Consequences interface {
	SettleMany(ctx context.Context, as []Attempt) []Settled
}

// Notifier queues completion notifications without blocking
// (*notify.Notifier).
type Notifier interface {
	Notify(callbackURL string, s notify.Summary) bool
}

// Marker writes a group's markers, keeping them to write later when Redis
// does not answer (*Marks): it reports whether they were written now, and
// otherwise calls written once they are.
type Marker interface {
	Write(ctx context.Context, marks []lease.Finish, written func()) bool
}

// StageConfig tunes the settle stage.
type StageConfig struct {
	// Settlers is how many groups of finished attempts are settled at once.
	Settlers int
	// Batch bounds the attempts one settler takes (one marker call).
	Batch int
	// Linger is how long a settler waits after its first attempt for
	// more, so attempts that end spread out (jittered jobs) still share a
	// marker call; their leases are held meanwhile.
	Linger time.Duration
	// Queue bounds the attempts waiting to be settled: a fire stage that
	// outruns settling waits for room.
	Queue int
	// WorkerID names this worker in ledger records.
	WorkerID string
	// DoneTTL is how long a done marker rejects redeliveries.
	DoneTTL time.Duration
	// RedisTimeout bounds one marker or release call.
	RedisTimeout time.Duration
	// RunningGrace is how long, past a retry's backoff, the job's overlap
	// marker keeps naming the execution (the retry re-takes it when it
	// fires; the grace covers its publishing and a late timer).
	RunningGrace time.Duration
	// MaxDeliveries is the poison threshold (for the ledger's wording; the
	// lease store enforces it).
	MaxDeliveries int
	// Emptied, when set, returns a channel closed once no due firing waits
	// for an executor (the ready queue's Emptied). While one is open, a
	// gathered group waits on it, up to MaxYield, before it is settled: at
	// a herd's instant the requests go out first, and the markers, the
	// Postgres consequences and the ledger records — which need no
	// instant — come after them instead of taking the cores the requests
	// wait for. Leases are held and renewed meanwhile; Queue should hold a
	// herd's attempts, or the executors wait for room while the settlers
	// yield.
	Emptied func() <-chan struct{}
	// MaxYield bounds how long a group waits while firings do
	// (DefaultStageConfig's when zero).
	MaxYield time.Duration
}

// DefaultStageConfig values.
var DefaultStageConfig = StageConfig{Settlers: 8, Batch: 256, Linger: 20 * time.Millisecond, Queue: 264, DoneTTL: lease.DefaultMarkerTTL,
	RedisTimeout: 2 * time.Second, RunningGrace: time.Minute, MaxYield: 250 * time.Millisecond}

// StageDeps are what the stage works with. Leaser, Recorder, Clock,
// Metrics and Logger are required.
type StageDeps struct {
	Leaser   Leaser
	Recorder Recorder
	// Settler retries failures through the outbox, dead-letters, and
	// completes last-slot jobs. Without one (no Postgres), a failed attempt
	// is recorded FAILED and nothing follows it.
	Settler Consequences
	// Notifier sends completion notifications to jobs' callback URLs.
	Notifier Notifier
	// Marks, when set, takes the markers Redis did not take, so settling
	// goes on through a Redis outage and no marker is lost; without it a
	// marker is given up after a few tries.
	Marks Marker
	// Target sends the cancel notices of attempts cancelled in flight.
	Target target.Target
	// Tracer traces the settling of traced firings.
	Tracer trace.Tracer
	// Clock is the corrected clock.
	Clock   clock.Clock
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// NewStage returns a settle stage.
func NewStage(cfg StageConfig, d StageDeps) *Stage {
	def := DefaultStageConfig
	if cfg.Settlers <= 0 {
		cfg.Settlers = def.Settlers
	}
	if cfg.Batch <= 0 {
		cfg.Batch = def.Batch
	}
	// A zero Linger settles what waits at once.
	cfg.Linger = max(cfg.Linger, 0)
	if cfg.Queue <= 0 {
		cfg.Queue = def.Queue
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = def.DoneTTL
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = def.RedisTimeout
	}
	if cfg.RunningGrace <= 0 {
		cfg.RunningGrace = def.RunningGrace
	}
	if cfg.MaxYield <= 0 {
		cfg.MaxYield = def.MaxYield
	}
	s := &Stage{cfg: cfg, leaser: d.Leaser, settler: d.Settler, notifier: d.Notifier, marks: d.Marks, target: d.Target, rec: d.Recorder,
		tracer: d.Tracer, clk: d.Clock, m: d.Metrics, logger: d.Logger, in: make(chan *fired, cfg.Queue)}
	s.stopping, s.stop = context.WithCancel(context.Background())
	return s
}

// fired is an attempt in the settle stage: the firing, what the fire stage
// returned for it (work.Outcome, read here and never written), and what
// settling decided and wrote.
type fired struct {
	Item   *work.Item
	Firing *sundialv1.Firing
	work.Outcome

	// Set while settling.
	d   retry.Decision
	out Outcome
	// dropped: settling gave up (stopping); the lease is released and the
	// firing left unfinished, so it is redelivered.
	dropped bool
}

// Settle takes the outcome o of it's request to settle; it waits while the
// stage's queue is full. After the stage has stopped, the attempt is left
// unfinished (its lease is released when StopRenewing's renewals end, and
// it is redelivered).
func (s *Stage) Settle(it *work.Item, o work.Outcome) {
	s.closing.RLock()
	defer s.closing.RUnlock()
	if s.closed {
		o.StopRenewing()
		return
	}
	s.in <- &fired{Item: it, Firing: it.Firing, Outcome: o}
}

// Stopping tells the stage the worker is stopping: settling still under
// way gives up retrying Postgres and Kafka after one more try (the firing
// is left for its redelivery).
func (s *Stage) Stopping() { s.stop() }

// Start runs the settlers until Stop.
func (s *Stage) Start(context.Context) error {
	return s.runner.Run(func(ctx context.Context) error {
		var settlers sync.WaitGroup
		for range s.cfg.Settlers {
			settlers.Go(s.settleLoop)
		}
		<-ctx.Done()
		s.stop()
		// Every attempt handed in before now is settled before Stop
		// returns.
		s.closing.Lock()
		s.closed = true
		close(s.in)
		s.closing.Unlock()
		settlers.Wait()
		s.notices.Wait()
		return nil
	})
}

// Stop settles what was handed in and returns; the fire stage stops first.
func (s *Stage) Stop() { s.runner.Stop() }

// Done is closed when the stage's loop returned (lifecycle.Watched).
func (s *Stage) Done() <-chan struct{} { return s.runner.Done() }

// Err is why the stage's loop returned on its own, if it did.
func (s *Stage) Err() error { return s.runner.Err() }

var _ lifecycle.Watched = (*Stage)(nil)

func (s *Stage) count(it *work.Item, f *sundialv1.Firing, outcome string) { s.m.Count(it, f, outcome) }

// traced: the firing has a trace and this stage a tracer.
func (s *Stage) traced(it *work.Item) bool { return it.Trace != nil && s.tracer != nil }

// SpanSettle is the settle step's span name.
const SpanSettle = "worker.settle"

// stale records a firing of a job version older than current: SKIPPED,
// nothing fired.
func (s *Stage) stale(it *work.Item, f *sundialv1.Firing, current int64, when string) {
	s.count(it, f, "stale")
	a := s.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
	a.FinishedTime = timestamppb.New(s.clk.Now())
	a.Reason = fmt.Sprintf("stale job version %d (current %d): the job changed after this firing was %s", f.GetJobVersion(), current, when)
	// Written without the fence check: a skip at fence 0 is stored as it
	// is whatever another delivery recorded (readers compare fences), and
	// the check is a read that costs Cassandra more than the write — a
	// deleted job's two minutes of staged firings are all skipped here.
	s.final(it, a, true)
}

func (s *Stage) overlapSkipped(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, running string) {
	s.count(it, f, "overlap_skipped")
	s.m.OverlapSkips.WithLabelValues(ex.Overlap.String()).Inc()
	a := s.attemptRecord(f, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, 0)
	a.FinishedTime = timestamppb.New(s.clk.Now())
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
	if f.GetLastSlot() && s.settler != nil {
		// The schedule's last slot was skipped: nothing later will
		// complete the job.
		d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, Attempts: 0, Reason: a.Reason}
		if _, ok := s.settle(ctx, it, f, ex, it.LeaseHolder, &d, target.Result{}); !ok {
			return // redelivered; the skip is decided again (the marker says done)
		}
	}
	s.final(it, a, false)
}

// cancelledBefore records an execution cancelled before this attempt was
// sent: CANCELLED, nothing fired, no retry. held: this delivery holds the
// lease (a renewal just before the request found the cancel), and its
// marker releases it; otherwise the lease script already marked the
// execution.
func (s *Stage) cancelledBefore(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, by string, held bool) {
	s.count(it, f, "cancelled")
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, Attempts: retry.AttemptsMade(f),
		Reason: "cancelled by " + by + " before this attempt was sent; not retried"}
	if f.GetLastSlot() && s.settler != nil {
		if _, ok := s.settle(ctx, it, f, ex, it.LeaseHolder, &d, target.Result{}); !ok {
			return // redelivered; decided again
		}
	}
	fence := int64(0)
	if held {
		fence = it.Lease.Fence
		s.finishMarks(ctx, []lease.Finish{s.mark(ex, it.LeaseHolder, d)})
	}
	now := s.clk.Now()
	s.notify(f, d, target.Result{}, now, Outcome{})
	a := s.attemptRecord(f, d.Status, fence)
	a.FinishedTime = timestamppb.New(now)
	a.Reason = d.Reason
	s.final(it, a, false)
}

// noticeCancel tells f's target, in the background, that the attempt sent
// to it was cancelled (target.CancelNotice); best effort, bounded by
// target.CancelNoticeTimeout.
func (s *Stage) noticeCancel(f *sundialv1.Firing, fence int64, by string) {
	now := s.clk.Now()
	n := target.CancelNotice(f, by, now)
	s.notices.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.stopping), target.CancelNoticeTimeout)
		defer cancel()
		res := s.target.Fire(ctx, target.Request{Firing: n, Fence: fence, SentAt: now, Event: firing.EventCancelled})
		if !res.OK {
			s.logger.Warn("could not tell the target of the cancel", "execution_id", f.GetExecutionId(), "job_id", f.GetJobId(), "err", res.Err)
		}
	})
}

// poison dead-letters an attempt its workers kept dying on, without firing
// it again; the lease is held.
func (s *Stage) poison(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution) {
	s.count(it, f, "poison")
	lr := it.Lease
	err := fmt.Errorf("delivered %d times without finishing (max deliveries %d): its workers crashed or hung on it", lr.Deliveries, s.cfg.MaxDeliveries)
	res := target.Failed(target.ClassPoison, true, err)
	d := retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD, Class: target.ClassPoison, Attempts: retry.AttemptsMade(f),
		Reason: "poison: " + err.Error() + "; dead-lettered without firing"}
	now := s.clk.Now()
	out, ok := s.settle(ctx, it, f, ex, it.LeaseHolder, &d, res)
	if !ok {
		return
	}
	s.finishMarks(ctx, []lease.Finish{s.mark(ex, it.LeaseHolder, d)})
	s.notify(f, d, res, now, out)
	a := s.attemptRecord(f, d.Status, lr.Fence)
	a.FinishedTime = timestamppb.New(now)
	a.Error = err.Error()
	a.Reason = d.Reason
	s.final(it, a, false)
}

// settleLoop is one settler. Settlers take turns gathering: one waits for
// an attempt, then up to SettleLinger for more (up to SettleBatch), and
// hands the turn on before settling what it gathered — so while one
// settler waits on Postgres or Redis, the next is already gathering, and
// attempts that end spread out still share a marker call.
func (s *Stage) settleLoop() {
	batch := make([]*fired, 0, s.cfg.Batch)
	for {
		s.gathering.Lock()
		batch = s.gather(batch[:0])
		s.gathering.Unlock()
		if len(batch) == 0 {
			return // the executors are gone and everything is settled
		}
		s.yield()
		s.settleBatch(batch)
		clear(batch)
	}
}

// yield waits while due firings wait for an executor (StageConfig.Emptied),
// up to MaxYield, and while the stage's queue is less than half full; not
// once the worker is stopping.
//
// Why the queue bounds it: the yield is there so the requests go out
// first, but once attempts to settle pile up faster than yielding
// settlers take them, the executors are about to wait for room, and the
// attempts already waiting hold their leases long enough to need renewing
// — Redis calls that the yield meant to put off. Past half the queue
// settling goes on at once, as the recorder writes records once its
// queue is half full (recorder.Recorder.pressed).
func (s *Stage) yield() {
	if s.cfg.Emptied == nil {
		return
	}
	emptied := s.cfg.Emptied()
	select {
	case <-emptied:
		return
	default:
	}
	if s.pressed() {
		return
	}
	start := s.clk.Now()
	defer func() { s.m.SettleYield.Observe(s.clk.Now().Sub(start).Seconds()) }()
	deadline := s.clk.NewTimer(s.cfg.MaxYield)
	defer deadline.Stop()
	poll := s.clk.NewTimer(yieldPoll)
	defer poll.Stop()
	for {
		select {
		case <-emptied:
			return
		case <-deadline.C():
			return
		case <-s.stopping.Done():
			return
		case <-poll.C():
			if s.pressed() {
				return
			}
			poll.Reset(yieldPoll)
		}
	}
}

// yieldPoll is how often a yielding settler looks at the queue.
const yieldPoll = 20 * time.Millisecond

// pressed says the queue of attempts to settle is half full.
func (s *Stage) pressed() bool { return 2*len(s.in) >= cap(s.in) }

// gather appends the next group of finished attempts to batch; none when
// the executors are gone and nothing is left.
func (s *Stage) gather(batch []*fired) []*fired {
	a, ok := <-s.in
	if !ok {
		return batch
	}
	batch = append(batch, a)
	var linger <-chan time.Time // nil without a linger: take only what waits
	if s.cfg.Linger > 0 {
		t := s.clk.NewTimer(s.cfg.Linger)
		defer t.Stop()
		linger = t.C()
	}
	for len(batch) < s.cfg.Batch {
		if linger == nil {
			select {
			case a, ok := <-s.in:
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
		case a, ok := <-s.in:
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
func (s *Stage) settleBatch(batch []*fired) {
	ctx := context.WithoutCancel(s.stopping)
	group := make([]settling, 0, len(batch))
	for _, a := range batch {
		if a.Fenced {
			// Another holder fires with a larger fence; this result is
			// stale, and the new holder writes its own marker.
			a.StopRenewing()
			a.d = retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED, Attempts: retry.AttemptsMade(a.Firing),
				Reason: "lease taken over by another delivery during the attempt; this result is discarded"}
			continue
		}
		if a.CancelledBy != "" {
			a.d = retry.Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, Class: target.ClassCanceled, Attempts: retry.AttemptsMade(a.Firing),
				Reason: "cancelled by " + a.CancelledBy + " during the attempt: the request was abandoned (it may have reached the target, which is told); not retried"}
		} else {
			a.d = s.decide(a.Firing, a.Result, a.Finished)
		}
		group = append(group, settling{it: a.Item, f: a.Firing, ex: a.Execution, holder: a.Item.LeaseHolder, d: &a.d, res: a.Result, out: &a.out,
			traceparent: a.NextTraceparent})
	}
	// Settled under the leases, which are still being renewed.
	settled := s.settleGroup(ctx, group)
	marks := make([]lease.Finish, 0, len(group))
	k := 0
	for _, a := range batch {
		if a.Fenced {
			continue
		}
		if !settled[k] {
			a.dropped = true
			a.StopRenewing()
		} else {
			marks = append(marks, s.mark(a.Execution, a.Item.LeaseHolder, a.d))
		}
		k++
	}
	// Markers Redis did not take wait in s.marks; until they are written
	// the group's firings are recorded but not finished (offsets stay
	// uncommitted, so a crash redelivers them).
	var wait *markWait
	marked := false
	if s.marks != nil {
		wait = &markWait{}
		marked = s.marks.Write(ctx, marks, wait.written)
		if marked {
			wait = nil
		}
	} else {
		marked = s.finishMarks(ctx, marks)
	}
	for _, a := range batch {
		if a.dropped {
			continue
		}
		held := false
		if !a.Fenced {
			// Always stopped: a renewer left running when the markers
			// were not written would renew the lease for ever.
			renewFailed := a.StopRenewing()
			held = marked && !renewFailed
			s.notify(a.Firing, a.d, a.Result, a.Finished, a.out)
			if a.CancelledBy != "" {
				s.noticeCancel(a.Firing, a.Item.Lease.Fence, a.CancelledBy)
			}
		}
		s.record(a, held, wait)
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
func (s *Stage) record(at *fired, held bool, wait *markWait) {
	f, d, res := at.Firing, at.d, at.Result
	if at.Fenced && res.Err == nil {
		res.Err = lease.ErrFenced
	}
	s.count(at.Item, f, firing.ExecutionStatusWord(d.Status))
	a := s.attemptRecord(f, d.Status, at.Item.Lease.Fence)
	a.StartedTime = timestamppb.New(at.Started)
	a.FinishedTime = timestamppb.New(at.Finished)
	a.Lateness = durationpb.New(at.Started.Sub(at.FireAt))
	a.Duration = durationpb.New(at.Finished.Sub(at.Started))
	a.HttpStatus = int32(res.HTTPStatus)
	a.ResponseExcerpt = res.Excerpt
	a.Reason = d.Reason
	if res.Err != nil && !res.OK {
		a.Error = res.Err.Error()
	}
	if !res.OK && d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED {
		s.logger.Info("attempt failed", "execution_id", at.Execution.ExecutionID, "job_id", at.Execution.JobID, "attempt", at.Execution.Attempt,
			"http_status", res.HTTPStatus, "class", d.Class, "status", firing.ExecutionStatusWord(d.Status), "err", res.Err)
	}
	s.finalAfter(at.Item, a, held, wait)
}

// decide is retry.Decide, or SUCCEEDED/FAILED when nothing can follow a
// failure (no Postgres to stage a retry or record a dead letter in).
func (s *Stage) decide(f *sundialv1.Firing, res target.Result, now time.Time) retry.Decision {
	d := retry.Decide(f, res, now)
	if s.settler == nil && d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
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
	out    *Outcome
	// traceparent is what a retry or dead letter staged from the attempt
	// carries (work.Outcome.NextTraceparent); empty: the firing's own.
	traceparent string
}

// staged is the firing a retry or dead letter is staged from: f, or a copy
// carrying the attempt's trace context (f, the prepare stage's, is not
// changed).
func (g *settling) staged() *sundialv1.Firing {
	f := g.f
	switch g.d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		if g.traceparent != "" && g.traceparent != f.GetTraceparent() {
			f = proto.CloneOf(f)
			f.Traceparent = g.traceparent
		}
	}
	return f
}

// settle runs the settler for one firing; see settleGroup.
func (s *Stage) settle(ctx context.Context, it *work.Item, f *sundialv1.Firing, ex lease.Execution, holder string, d *retry.Decision, res target.Result) (Outcome, bool) {
	var out Outcome
	ok := s.settleGroup(ctx, []settling{{it: it, f: f, ex: ex, holder: holder, d: d, res: res, out: &out}})
	return out, ok[0]
}

// settleGroup runs the settler over attempts that ended about together
// (one statement completes all their jobs). For an attempt it gives up on
// (the pool is stopping and Postgres or Kafka does not answer), the lease
// is released and the firing left unfinished, so its redelivery makes the
// attempt again; it reports, in order, which were settled.
func (s *Stage) settleGroup(ctx context.Context, group []settling) []bool {
	ok := make([]bool, len(group))
	if s.settler == nil {
		for i, g := range group {
			if g.d.Status == sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD {
				g.d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED
				g.d.Reason += "; not dead-lettered: this worker has no Postgres (--postgres-dsn)"
			}
			ok[i] = true
		}
		return ok
	}
	as := make([]Attempt, len(group))
	spans := make([]trace.Span, len(group))
	for i, g := range group {
		as[i] = Attempt{Firing: g.staged(), Decision: *g.d, Result: g.res}
		if s.traced(g.it) {
			_, spans[i] = s.tracer.Start(trace.ContextWithSpan(s.stopping, g.it.Trace.Consume), SpanSettle,
				trace.WithAttributes(attribute.String("sundial.decision", firing.ExecutionStatusWord(g.d.Status))))
		}
	}
	res := s.settler.SettleMany(s.stopping, as)
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
			s.logger.Error("could not settle the attempt while stopping; it will be redelivered and made again", "err", r.Err, "execution_id", g.ex.ExecutionID, "attempt", g.ex.Attempt)
			rctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
			_, _ = s.leaser.Release(rctx, g.ex, g.holder)
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

// mark is the marker an attempt's decision writes: the done marker
// (success), the retry-pending marker (a retry is staged: the overlap
// marker stays through the backoff) or the attempt marker (anything else);
// each also releases the lease.
func (s *Stage) mark(ex lease.Execution, holder string, d retry.Decision) lease.Finish {
	f := lease.Finish{Execution: ex, Holder: holder, TTL: s.cfg.DoneTTL, Mark: lease.FinishAttempt}
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:
		f.Mark = lease.FinishDone
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		f.Mark, f.KeepRunning = lease.FinishRetryPending, d.Delay+s.cfg.RunningGrace
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		f.Mark = lease.FinishCancelled
	}
	return f
}

// finishMarks writes the markers in one call, retrying a little: without
// its marker a redelivery would fire again. It reports whether they were
// written (under these holders' fences).
func (s *Stage) finishMarks(ctx context.Context, marks []lease.Finish) bool {
	if len(marks) == 0 {
		return true
	}
	s.m.SettleBatch.Observe(float64(len(marks)))
	backoff := 50 * time.Millisecond
	for i := 0; ; i++ {
		mctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		err := s.leaser.FinishMany(mctx, marks)
		cancel()
		if err == nil {
			return true
		}
		if i == 3 {
			s.logger.Error("could not write the done markers; a redelivery would fire again", "err", err, "attempts", len(marks), "execution_id", marks[0].Execution.ExecutionID)
			return false
		}
		t := s.clk.NewTimer(backoff)
		<-t.C()
		backoff *= 2
	}
}

// notify queues the job's completion notification: on success, on death
// (its final failure and its entry in the DLQ, one notification), and on
// cancel.
func (s *Stage) notify(f *sundialv1.Firing, d retry.Decision, res target.Result, finished time.Time, out Outcome) {
	if s.notifier == nil || f.GetCallbackUrl() == "" {
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
	sum := notify.Summary{
		Event: event, ExecutionID: f.GetExecutionId(), JobID: f.GetJobId(), Tenant: f.GetTenant(), Status: d.Status.String(),
		Attempt: max(f.GetAttempt(), 1), Attempts: d.Attempts, ErrorClass: d.Class, HTTPStatus: res.HTTPStatus,
		Scheduled: f.GetScheduledTime().AsTime(), Finished: finished.UTC(), CatchUp: f.GetCatchUp(), DeadLetter: out.DeadLetter != nil,
	}
	if res.Err != nil && !res.OK {
		sum.Error = res.Err.Error()
	}
	s.notifier.Notify(f.GetCallbackUrl(), sum)
}

func (s *Stage) final(it *work.Item, a *sundialv1.ExecutionAttempt, held bool) {
	s.finalAfter(it, a, held, nil)
}

// finalAfter is final whose firing finishes only once wait's markers are
// written too (nil: at once).
func (s *Stage) finalAfter(it *work.Item, a *sundialv1.ExecutionAttempt, held bool, wait *markWait) {
	finish := func() { it.Owner.Finish(it) }
	if wait != nil {
		finish = wait.then(finish)
	}
	if !s.rec.Final(s.stopping, a, held, finish) {
		// Stopping: leave the firing unfinished, so its offset is not
		// committed and it is redelivered (then dropped as done).
		s.logger.Warn("recorder stopped before the attempt was recorded", "execution_id", a.GetExecutionId())
	}
}

func (s *Stage) attemptRecord(f *sundialv1.Firing, status sundialv1.ExecutionStatus, fence int64) *sundialv1.ExecutionAttempt {
	return AttemptRecord(f, status, fence, s.cfg.WorkerID)
}

// AttemptRecord is the ledger record of an attempt of f by this worker,
// before what only its stage knows (times, status code, reason).
func AttemptRecord(f *sundialv1.Firing, status sundialv1.ExecutionStatus, fence int64, workerID string) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   f.GetExecutionId(),
		JobId:         f.GetJobId(),
		Tenant:        f.GetTenant(),
		Attempt:       max(f.GetAttempt(), 1),
		Status:        status,
		ScheduledTime: f.GetScheduledTime(),
		FireTime:      f.GetFireTime(),
		FenceToken:    fence,
		Worker:        workerID,
		CatchUp:       f.GetCatchUp(),
		JobVersion:    f.GetJobVersion(),
	}
}

// Stale records a firing of a job version older than current, found at the
// instant (the job changed after the firing was leased): SKIPPED, nothing
// fired.
func (s *Stage) Stale(it *work.Item, f *sundialv1.Firing, current int64, when string) {
	s.stale(it, f, current, when)
}

// Unfired records a firing that is not to be fired, by what its lease call
// decided — Stale, Overlapping (skipped by the job's overlap policy),
// Poison (dead-lettered, its lease held) or Cancelled — settling it where
// that has consequences (a dead letter, a job completed by a skipped or
// cancelled last slot). It reports false for any other decision.
func (s *Stage) Unfired(ctx context.Context, it *work.Item, ex lease.Execution) bool {
	f := it.Firing
	switch it.Lease.Outcome {
	case lease.Stale:
		s.stale(it, f, it.Lease.CurrentVersion, "staged")
	case lease.Overlapping:
		s.overlapSkipped(ctx, it, f, ex, it.Lease.Running)
	case lease.Poison:
		s.poison(ctx, it, f, ex)
	case lease.Cancelled:
		s.cancelledBefore(ctx, it, f, ex, it.Lease.CancelledBy, false)
	default:
		return false
	}
	return true
}
