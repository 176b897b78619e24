// Package prepare is the worker's first stage: it takes the firings due in
// the next moment, decodes them and takes their leases and fence tokens
// ahead of their instant, many in one Redis call, so that at the instant
// the fire stage only sends the request.
//
// A firing reaches the stage from the prepare holder Lead before its fire
// instant (at once when that has passed: a late arrival, a retry, a
// catch-up). The stage claims it from its partition (from then on a revoke
// waits for it rather than abandoning it: its lease is ours), decodes it,
// and puts it in a batch. Every batch — up to Batch firings, whatever
// arrived together — is one lease.AcquireMany call, with each lease's TTL
// reaching LeaseTTL past the firing's instant, so a lease taken ahead lasts
// as long as one taken at the instant would. Then, by what the script
// decided:
//
//   - Acquired: to the fire holder, which releases it at its instant;
//   - AlreadyDone (a redelivery): finished here, nothing else to do;
//   - Held by another delivery, or Waiting behind a running execution: held
//     again until that lease or marker ends;
//   - Stale, Overlapping, Poison: straight to the ready queue, where an
//     executor records the skip or dead-letters the poison;
//   - the call failed (Redis unreachable): the whole batch is held again
//     for RetryAfter.
//
// Why ahead: a herd of a thousand cron jobs due at the same second used to
// queue at the instant on a thousand lease round trips (and the Redis
// client's connection pool); now the thousand leases are four script calls
// made a second or two before, and a Redis outage shorter than Lead no
// longer delays the firings already leased.
//
// Jobs with an overlap policy (every one but ALLOW) are leased at their
// instant (a lead of zero), because whether another execution is still
// running can only be decided then. A change to a job (update, pause,
// delete) committed after a firing was leased reaches it at its instant
// through the api's version announcements (package versions).
package prepare

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/misfire"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Leaser is the part of lease.Store the stage uses.
type Leaser interface {
	AcquireMany(ctx context.Context, batch []lease.Acquisition) ([]lease.Result, error)
	// FinishMany writes the marker of an attempt found already recorded
	// (see Config.Recorded).
	FinishMany(ctx context.Context, batch []lease.Finish) error
	// UntouchedMany reports which executions no delivery ever leased,
	// finished or asked to cancel (see Config.Late).
	UntouchedMany(ctx context.Context, batch []lease.Execution) ([]bool, error)
}

// Config tunes the stage.
type Config struct {
	// Lead is how long before its instant a firing is prepared.
	Lead time.Duration
	// Grain groups prepare instants: the firings due within one grain are
	// prepared together (see Lead).
	Grain time.Duration
	// Batch bounds the firings of one lease call (one Redis script: other
	// clients wait while it runs, so it stays well under a millisecond).
	Batch int
	// WorkerID prefixes each delivery's lease holder.
	WorkerID string
	// LeaseTTL is how long a lease lasts past the firing's instant.
	LeaseTTL time.Duration
	// RedisTimeout bounds one lease call.
	RedisTimeout time.Duration
	// RetryAfter is how long a batch waits when Redis could not be asked.
	RetryAfter time.Duration
	// Unmarked, when set, reports whether an execution finished on this
	// worker but its marker still waits for Redis (settle.Marks.Pending):
	// a copy of it is not leased until the marker is written, since the
	// lease script would find no marker and let the copy fire again.
	Unmarked func(executionID string) bool
	// Recorded, when set, is asked about a firing whose lease an earlier
	// delivery took without ever writing its marker (the lease script's
	// delivery count is above 1): that delivery died before firing, or
	// after firing and before its marker was written — in a Redis outage
	// the marker can wait for seconds. It reports the outcome the ledger
	// holds for this attempt, if any: a recorded outcome is marked and the
	// firing dropped, not fired again. Jobs with an overlap policy are not
	// asked (their running marker must follow the execution's own).
	Recorded func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool)
	// DoneTTL is how long done markers and delivery counters live (the
	// marker written for a recorded attempt too). A firing staged more
	// than half of it ago may be a copy of one finished long enough ago
	// that its marker is gone (an offset reset, a redelivery after a long
	// outage), and a backfill's firing has the id of a slot that may have
	// run days ago: those are asked of the ledger (Recorded) before they
	// fire, as a dead delivery's are.
	DoneTTL time.Duration
	// HasRecord and RecordLost, when both set, keep the ledger whole when
	// a worker dies between writing an attempt's marker and its record
	// (the record waits up to the recorder's linger): a copy found done
	// by its marker is looked up in the ledger CheckAfter later, and
	// when the ledger has no final record of the attempt, RecordLost
	// writes one from what the marker says; done is called once it is
	// written. HasRecord reports an error when the ledger did not answer
	// (the copy is looked up again later).
	HasRecord  func(ctx context.Context, f *sundialv1.Firing) (bool, error)
	RecordLost func(a *sundialv1.ExecutionAttempt, done func()) bool
	// CheckAfter is how long after a copy was found done its ledger
	// record is looked for: longer than the recorder's linger.
	CheckAfter time.Duration
	// VerifyWithin bounds how long the firings an earlier delivery leased
	// and never marked wait for the ledger (Recorded) before they fire
	// anyway (at least once: the target dedupes by Idempotency-Key). A
	// worker taking over a dead one's partitions has a second or two of
	// them, all due: with a busy Cassandra, waiting for every read made
	// them seconds late.
	VerifyWithin time.Duration
	// Admission, when set, bounds the firings leased and waiting for an
	// executor (see Admission); the rest wait here, unleased, oldest
	// first.
	Admission *Admission
	// Changed, when set, reports the version a firing's job changed to
	// since it was staged (versions.Watch.Newer): such a firing goes to
	// Routes.Drop, unleased.
	Changed func(jobID string, version int64) (int64, bool)
	// Late, when set, judges a firing prepared late by its job's misfire
	// policy (misfire.Judge). It is judged before it is leased: one it
	// does not fire that no delivery ever touched (Leaser.UntouchedMany:
	// one read, no lease, no fence) goes unleased to Routes.Shed, so a
	// platform shedding a backlog by its jobs' policies spends no lease,
	// and no ledger row of its own, on what it sheds. One some delivery
	// touched is leased as any other, and judged again once its lease
	// call has said it is not done already (a copy of a fired execution
	// is a duplicate, its record perhaps still to be written from its
	// marker, not a misfire) and not stale; skipped then (Routes.Skip,
	// a row of its own), its lease is left to run out. A firing its job's
	// overlap policy held back (lease.Waiting) or a limit made wait (the
	// fire stage) is not judged again (work.Item.LateByPolicy): a
	// BUFFER_ALL slot behind a long execution is late by the job's own
	// choice, a firing over its tenant's quota is delayed, never dropped,
	// and skipping either as a misfire would break that promise.
	Late func(f *sundialv1.Firing) misfire.Verdict
}

// DefaultConfig values.
var DefaultConfig = Config{Lead: 1500 * time.Millisecond, Grain: 100 * time.Millisecond, Batch: 256, LeaseTTL: 5 * time.Second, RedisTimeout: 2 * time.Second, RetryAfter: 250 * time.Millisecond, CheckAfter: 5 * time.Second,
	VerifyWithin: 500 * time.Millisecond}

// EventLease is the event a traced firing's consume span gets when its
// lease call answered.
const EventLease = "worker.lease"

// Routes are where prepared firings go.
type Routes struct {
	// Fire holds a leased firing until its instant (the fire holder).
	Fire func(*work.Item)
	// Now hands a firing an executor must deal with at once (a skip to
	// record, a poison to dead-letter) to the ready queue.
	Now func(*work.Item)
	// Again holds a firing to be prepared again, not before notBefore
	// (the prepare holder's AddAfter).
	Again func(it *work.Item, notBefore int64)
	// Drop takes a claimed firing of a job changed since it was staged
	// (discard.Summarizer.Drop); required with Config.Changed.
	Drop func(it *work.Item, current int64)
	// Skip records a claimed firing SKIPPED for reason and finishes it;
	// required with Config.Late.
	Skip func(it *work.Item, reason string)
	// Shed takes a claimed late firing that no delivery touched and its
	// job's policy does not fire, to be recorded with the job's others in
	// one summary row (discard.Summarizer.Shed); required with
	// Config.Late.
	Shed func(it *work.Item, v misfire.Verdict)
}

// Stage is a lifecycle.Service: one goroutine takes the due firings in
// batches.
type Stage struct {
	cfg    Config
	leaser Leaser
	routes Routes
	clk    clock.Clock
	m      *metrics.Metrics
	logger *slog.Logger

	// due holds the firings whose prepare instant has come, one heap per
	// priority (readyq.Rank), earliest instant first: a batch takes
	// CRITICAL ones first, so a burst of 100,000 MEDIUM firings being
	// leased does not hold back a CRITICAL one due at the same instant, and
	// a firing sent back to be leased again (its lease ran out while it
	// waited) goes before the later ones admission holds back.
	mu   sync.Mutex
	due  [4]dueHeap
	wake chan struct{}

	seq    atomic.Uint64
	runner lifecycle.Runner
	// checking runs the ledger checks of prepared batches (verify,
	// checkRecorded) beside the stage's loop; lookups bounds their reads.
	checking sync.WaitGroup
	lookups  chan struct{}
}

// New returns a stage; clk is the worker's corrected clock.
func New(cfg Config, l Leaser, routes Routes, clk clock.Clock, m *metrics.Metrics, logger *slog.Logger) *Stage {
	d := DefaultConfig
	if cfg.Lead < 0 {
		cfg.Lead = 0
	}
	if cfg.Batch <= 0 {
		cfg.Batch = d.Batch
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = d.LeaseTTL
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = d.RedisTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = d.RetryAfter
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = lease.DefaultMarkerTTL
	}
	if cfg.CheckAfter <= 0 {
		cfg.CheckAfter = d.CheckAfter
	}
	if cfg.VerifyWithin <= 0 {
		cfg.VerifyWithin = d.VerifyWithin
	}
	return &Stage{cfg: cfg, leaser: l, routes: routes, clk: clk, m: m, logger: logger, wake: make(chan struct{}, 1), lookups: make(chan struct{}, ledgerLookups)}
}

// Lead is how long before its instant it should be prepared: Config.Lead,
// or nothing for a job whose overlap policy is decided at the instant. It
// is the prepare holder's lead (holder.WithLead). The prepare instant is
// rounded down to Config.Grain, so firings spread over time (jittered
// jobs) are still leased in batches: all those whose prepare instants fall
// in one grain go in one call, each prepared between Lead and Lead+Grain
// ahead.
func (s *Stage) Lead(it *work.Item) time.Duration {
	if it.Overlap {
		return 0
	}
	at := it.FireAt - int64(s.cfg.Lead)
	if g := int64(s.cfg.Grain); g > 0 {
		at -= ((at % g) + g) % g
	}
	return time.Duration(it.FireAt - at)
}

// Add takes a firing whose prepare instant has come. It never blocks.
func (s *Stage) Add(it *work.Item) { s.AddMany([]*work.Item{it}) }

// AddMany takes firings whose prepare instant has come, all before the
// stage looks, so they share lease calls (the prepare holder's sink: the
// firings of one grain arrive together, and handed over one by one the
// stage would wake on the first and lease it alone). It never blocks and
// keeps nothing of items but its elements.
func (s *Stage) AddMany(items []*work.Item) {
	s.mu.Lock()
	for _, it := range items {
		s.due[readyq.Rank(it.Priority)].push(it)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start runs the stage.
func (s *Stage) Start(context.Context) error {
	return s.runner.Run(func(ctx context.Context) error {
		var batch []*work.Item
		// held: admission held firings back; look again soon, as the
		// executors take from the ready queue.
		held := false
		poll := s.clk.NewTimer(admissionPoll)
		defer poll.Stop()
		for {
			var again <-chan time.Time
			if held {
				poll.Reset(admissionPoll)
				again = poll.C()
			}
			select {
			case <-ctx.Done():
				// The checks under way end with ctx (their lookups are
				// bounded by it); their firings stay where they are.
				s.checking.Wait()
				return nil
			case <-s.wake:
			case <-again:
			}
			held = false
			for {
				var allowed [4]int
				for r := range allowed {
					allowed[r] = s.cfg.Batch
					if s.cfg.Admission != nil {
						allowed[r] = min(allowed[r], s.cfg.Admission.Allow(r))
					}
				}
				batch = s.take(batch[:0], allowed)
				if len(batch) == 0 {
					held = s.waiting() > 0
					break
				}
				s.prepare(ctx, batch)
				clear(batch)
			}
		}
	})
}

// admissionPoll is how often the stage looks again while admission holds
// firings back.
const admissionPoll = 10 * time.Millisecond

// take appends up to Batch due firings to batch, the most urgent priority
// first, the earliest instant first within a priority, and at most
// allowed[r] of the priority of rank r.
func (s *Stage) take(batch []*work.Item, allowed [4]int) []*work.Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.due {
		n := min(len(batch)+allowed[r], s.cfg.Batch)
		for len(batch) < n && s.due[r].len() > 0 {
			batch = append(batch, s.due[r].pop())
		}
	}
	return batch
}

// waiting is the number of due firings not leased yet.
func (s *Stage) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for r := range s.due {
		n += s.due[r].len()
	}
	return n
}

// Waiting is the number of firings whose prepare instant has come that the
// stage has not leased yet (admission holds them back while the executors
// are behind).
func (s *Stage) Waiting() int { return s.waiting() }

// Stop ends the stage; firings it has not taken stay where they are (their
// partition's revoke or the worker's exit deals with them).
func (s *Stage) Stop() { s.runner.Stop() }

// Prepare runs one batch now, on the caller's goroutine, and waits for its
// ledger checks (tests; Start's loop prepares every batch without waiting
// for them).
func (s *Stage) Prepare(ctx context.Context, batch []*work.Item) {
	s.prepare(ctx, batch)
	s.checking.Wait()
}

func (s *Stage) prepare(ctx context.Context, batch []*work.Item) {
	acq := make([]lease.Acquisition, 0, len(batch))
	items := make([]*work.Item, 0, len(batch))
	now := s.clk.Now()
	take := func(it *work.Item) {
		// Unique per delivery, so a duplicate delivered to this same
		// worker is excluded too; kept for the delivery's life, so a
		// lease it takes again (one that ran out while it waited) is the
		// same delivery's, not another's.
		if it.LeaseHolder == "" {
			it.LeaseHolder = s.cfg.WorkerID + "/" + strconv.FormatUint(s.seq.Add(1), 36)
		}
		ttl := max(time.Duration(it.FireAt-now.UnixNano()), 0) + s.cfg.LeaseTTL
		it.LeaseUntil = now.Add(ttl).UnixNano()
		acq = append(acq, lease.Acquisition{Execution: Execution(it.Firing), Holder: it.LeaseHolder, TTL: ttl})
		items = append(items, it)
	}
	var late []lateItem
	for _, it := range batch {
		if !it.Owner.Claim(it) {
			continue // its partition went elsewhere; the new owner fires it
		}
		f := it.Firing
		if f == nil {
			var err error
			if f, err = firing.Decode(it.Envelope); err != nil {
				// Checked when the record arrived, so only a bug gets here.
				s.logger.Error("undecodable firing", "err", err)
				s.m.Firings.WithLabelValues(firing.PriorityName(it.Priority), "poison", s.m.Tenant(it.Tenant)).Inc()
				it.Owner.Finish(it)
				continue
			}
			it.Firing = f
		}
		if s.cfg.Changed != nil {
			if v, changed := s.cfg.Changed(f.GetJobId(), f.GetJobVersion()); changed {
				s.count(it, "discarded")
				s.routes.Drop(it, v)
				continue
			}
		}
		if s.cfg.Unmarked != nil && s.cfg.Unmarked(f.GetExecutionId()) {
			s.again(it, s.cfg.RetryAfter)
			continue
		}
		if s.cfg.Late != nil && !it.LateByPolicy() {
			if v := s.cfg.Late(f); !v.Fire {
				late = append(late, lateItem{it, v})
				continue
			}
		}
		take(it)
	}
	// rejudge holds the late firings some delivery touched: judged again
	// once their lease call answers (Config.Late). The others were judged
	// a moment ago and fire.
	var rejudge map[*work.Item]bool
	if len(late) > 0 {
		for _, it := range s.skipUntouched(ctx, late) {
			if rejudge == nil {
				rejudge = map[*work.Item]bool{}
			}
			rejudge[it] = true
			take(it)
		}
	}
	if len(items) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	started := s.clk.Now()
	res, err := s.leaser.AcquireMany(cctx, acq)
	cancel()
	s.m.PrepareBatch.Observe(float64(len(items)))
	s.m.PrepareCall.Observe(s.clk.Now().Sub(started).Seconds())
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.logger.Warn("lease call failed, holding the batch to try again", "err", err, "firings", len(items), "retry_in", s.cfg.RetryAfter)
		}
		for _, it := range items {
			s.count(it, "lease_error")
			s.again(it, s.cfg.RetryAfter)
		}
		return
	}
	var suspects []*work.Item
	var done []doneCopy
	for i, it := range items {
		it.Lease = res[i]
		if it.Trace != nil && it.Trace.Consume.IsRecording() {
			// One call leased the whole batch, so the lease is an event
			// on each firing's consume span rather than a span of its
			// own.
			it.Trace.Consume.AddEvent(EventLease, trace.WithAttributes(attribute.String("sundial.lease", res[i].Outcome.String()),
				attribute.Int64("sundial.fence_token", res[i].Fence), attribute.Int("sundial.lease_batch", len(items))))
		}
		switch res[i].Outcome {
		case lease.Acquired:
			if res[i].Deliveries > 0 {
				it.Acquired++
			}
			// Our own earlier leases of this item (one that ran out
			// while it waited) fired nothing; another delivery's may
			// have.
			if s.cfg.Recorded != nil && !it.Overlap && (res[i].Deliveries > int64(it.Acquired) || s.pastMarkers(it.Firing)) {
				suspects = append(suspects, it)
				continue
			}
			s.fire(it, rejudge[it])
		case lease.AlreadyDone:
			// A redelivery (relay re-publish, rebalance, crash before
			// commit).
			s.count(it, "duplicate")
			switch {
			case s.cfg.HasRecord == nil || s.cfg.RecordLost == nil:
				it.Owner.Finish(it)
			case !it.LedgerChecked:
				// The worker that finished it may still hold its
				// record: look in the ledger once that has landed.
				it.LedgerChecked = true
				s.again(it, s.cfg.CheckAfter)
			default:
				done = append(done, doneCopy{it, res[i].Finished})
			}
		case lease.Held:
			// Another delivery is firing it. Keep ours until that lease
			// ends: if its holder dies, this copy still fires; if it
			// finished, the next look finds the done marker.
			s.count(it, "lease_conflict")
			s.m.LeaseConflicts.Inc()
			it.Deliveries++
			wait := res[i].HeldFor + s.cfg.LeaseTTL/10
			if alive := res[i].HolderAliveFor; alive > 0 && alive < res[i].HeldFor {
				// The holder's worker is gone unless it says otherwise
				// within alive: look again just after, and take the lease
				// at once if it died (a killed worker's firings leased
				// ahead wait about 1.5 s, not their lease's 7).
				wait = alive + heldAgainMargin
			}
			s.again(it, wait)
		case lease.Waiting:
			// Behind the running execution (BUFFER_ONE, or a retry): look
			// again when its marker ends.
			s.count(it, "overlap_waiting")
			it.OverlapWaited = true
			s.m.OverlapWaits.WithLabelValues(Overlap(it.Firing.GetOverlap()).String()).Inc()
			s.again(it, res[i].HeldFor+s.cfg.LeaseTTL/10)
		default: // Stale, Overlapping, Poison, Cancelled: an executor records them.
			s.routes.Now(it)
		}
	}
	// The ledger is asked off the stage's goroutine: a worker taking over a
	// dead one's partitions has a second or two of its firings to verify,
	// one read each, and verified in line they held every later batch
	// (and so every firing of the worker) behind them.
	if len(suspects) > 0 {
		s.checking.Go(func() { s.verify(ctx, suspects) })
	}
	if len(done) > 0 {
		s.checking.Go(func() { s.checkRecorded(ctx, done) })
	}
}

// pastMarkers reports whether f may be a copy of an attempt finished so
// long ago that its done marker is gone (Config.DoneTTL): staged more
// than half the markers' life ago, or a backfill (a slot's own id, for a
// slot that may have run days ago).
func (s *Stage) pastMarkers(f *sundialv1.Firing) bool {
	if f.GetOrigin() == sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL {
		return true
	}
	staged := f.GetStagedTime()
	return staged != nil && s.clk.Now().Sub(staged.AsTime()) > s.cfg.DoneTTL/2
}

// fire hands a leased firing to the fire holder, unless judge is set and
// it is late and its job's misfire policy does not fire it (Config.Late):
// then it is skipped, its lease left to run out. Judged again here (see
// Config.Late) only once the lease call has said the execution is not
// done already (a copy of a fired execution is a duplicate, not a
// misfire) and not stale.
func (s *Stage) fire(it *work.Item, judge bool) {
	if judge && s.cfg.Late != nil {
		if v := s.cfg.Late(it.Firing); !v.Fire {
			s.count(it, "misfire_skipped")
			s.routes.Skip(it, v.Reason)
			return
		}
	}
	s.routes.Fire(it)
}

// lateItem is a firing its job's misfire policy does not fire, and why.
type lateItem struct {
	it *work.Item
	v  misfire.Verdict
}

// skipUntouched skips, unleased, the late firings no delivery ever
// touched (Config.Late) and returns the others, to be leased. When Redis
// cannot be asked, they all wait to be prepared again.
func (s *Stage) skipUntouched(ctx context.Context, late []lateItem) []*work.Item {
	exs := make([]lease.Execution, len(late))
	for i, l := range late {
		exs[i] = Execution(l.it.Firing)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
	untouched, err := s.leaser.UntouchedMany(cctx, exs)
	cancel()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.logger.Warn("lease call failed, holding late firings to judge again", "err", err, "firings", len(late), "retry_in", s.cfg.RetryAfter)
		}
		for _, l := range late {
			s.count(l.it, "lease_error")
			s.again(l.it, s.cfg.RetryAfter)
		}
		return nil
	}
	var touched []*work.Item
	for i, l := range late {
		if !untouched[i] {
			touched = append(touched, l.it)
			continue
		}
		s.count(l.it, "misfire_skipped")
		s.routes.Shed(l.it, l.v)
	}
	return touched
}

// doneCopy is a copy of a firing its marker says is done, and what the
// marker says.
type doneCopy struct {
	it       *work.Item
	finished lease.Finished
}

// checkRecorded looks up the final records of copies found done, a few
// at a time. Those the ledger has are dropped. For those it has not — the
// worker that finished the attempt wrote its marker and died before its
// record — a record is written from the marker: SUCCEEDED, SKIPPED or
// FAILED, fence 0, saying how it was learnt (the original record, should
// it land later, supersedes it). Those the ledger could not answer for
// are looked up again later.
func (s *Stage) checkRecorded(ctx context.Context, copies []doneCopy) {
	found := make([]bool, len(copies))
	errs := make([]error, len(copies))
	s.lookUp(ctx, len(copies), func(ctx context.Context, i int) {
		found[i], errs[i] = s.cfg.HasRecord(ctx, copies[i].it.Firing)
	})
	for i, c := range copies {
		it := c.it
		switch {
		case errs[i] != nil:
			s.count(it, "ledger_check_error")
			s.again(it, s.cfg.CheckAfter)
		case found[i]:
			it.Owner.Finish(it)
		default:
			f := it.Firing
			status, what := sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, "ended without success (a retry, if any, has its own records)"
			switch c.finished {
			case lease.FinishedSucceeded:
				status, what = sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, "succeeded"
			case lease.FinishedSkipped:
				status, what = sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, "was skipped by the job's overlap policy"
			case lease.FinishedCancelled:
				status, what = sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, "was cancelled"
			}
			s.logger.Warn("an attempt's marker was written but not its record (its worker stopped in between); recording it from the marker",
				"execution_id", f.GetExecutionId(), "attempt", max(f.GetAttempt(), 1), "status", status.String())
			s.count(it, "recorded_from_marker")
			a := &sundialv1.ExecutionAttempt{
				ExecutionId: f.GetExecutionId(), JobId: f.GetJobId(), Tenant: f.GetTenant(), Attempt: max(f.GetAttempt(), 1),
				Status: status, ScheduledTime: f.GetScheduledTime(), FireTime: f.GetFireTime(), Worker: s.cfg.WorkerID,
				CatchUp: f.GetCatchUp(), JobVersion: f.GetJobVersion(), FinishedTime: timestamppb.New(s.clk.Now()),
				Reason: "recorded from the done marker: this attempt " + what + "; the worker that ran it stopped before writing its own record, so its times, HTTP status and response are not known",
			}
			if !s.cfg.RecordLost(a, func() { it.Owner.Finish(it) }) {
				s.again(it, s.cfg.CheckAfter)
			}
		}
	}
}

// ledgerLookups bounds the ledger reads in flight for the whole stage.
const ledgerLookups = 32

// lookUp runs the ledger lookups 0..n-1, at most ledgerLookups at a time
// across the stage, each bounded by the call timeout, and returns when all
// have.
func (s *Stage) lookUp(ctx context.Context, n int, one func(ctx context.Context, i int)) {
	var wg sync.WaitGroup
	for i := range n {
		select {
		case s.lookups <- struct{}{}:
		case <-ctx.Done():
			// Out of time before a read could start: the rest are not
			// asked (their callers treat them as not answered).
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.lookups }()
			cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
			defer cancel()
			one(cctx, i)
		}()
	}
	wg.Wait()
}

// verify asks the ledger about firings an earlier delivery leased and never
// marked, a few at a time; those it recorded are marked and dropped, the
// others fire. A ledger that does not answer in time lets them fire (at
// least once: the target dedupes by Idempotency-Key).
func (s *Stage) verify(ctx context.Context, items []*work.Item) {
	status := make([]sundialv1.ExecutionStatus, len(items))
	found := make([]bool, len(items))
	// These firings are due (a dead worker had leased them ahead of their
	// instant): the ledger gets VerifyWithin to answer for all of them,
	// and those it has not answered for by then fire.
	vctx, cancel := context.WithTimeout(ctx, s.cfg.VerifyWithin)
	defer cancel()
	s.lookUp(vctx, len(items), func(ctx context.Context, i int) {
		status[i], found[i] = s.cfg.Recorded(ctx, items[i].Firing)
	})
	var marks []lease.Finish
	for i, it := range items {
		if !found[i] {
			s.fire(it, true) // the ledger's answer took time: judged again
			continue
		}
		f := it.Firing
		s.logger.Warn("the ledger has this attempt's outcome, so it is not fired again (a delivery before this one fired it and died before its marker was written, or its marker ran out: a backfill of a slot that ran, or a copy older than the markers)",
			"execution_id", f.GetExecutionId(), "attempt", max(f.GetAttempt(), 1), "origin", f.GetOrigin().String(), "recorded", status[i].String())
		mark := lease.FinishAttempt
		if status[i] == sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
			mark = lease.FinishDone
		}
		marks = append(marks, lease.Finish{Execution: Execution(f), Holder: it.LeaseHolder, TTL: s.cfg.DoneTTL, Mark: mark})
		s.count(it, "duplicate")
		it.Owner.Finish(it)
	}
	if len(marks) > 0 {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		// Without the marker the next copy asks the ledger again.
		if err := s.leaser.FinishMany(cctx, marks); err != nil {
			s.logger.Warn("could not mark attempts found recorded", "err", err, "attempts", len(marks))
		}
		cancel()
	}
}

// heldAgainMargin is how long after the holder's liveness key would end a
// firing held by another delivery looks again.
const heldAgainMargin = 50 * time.Millisecond

// again gives a claimed firing back to its partition and holds it to be
// prepared after a while, through the prepare holder's AddAfter
// (Routes.Again), the one way back; the fire stage sends a firing whose
// lease ran low there the same way. it.Lease stays: a revoke that abandons
// the firing before it is prepared again gives the lease back unstarted
// (consumer.Unstarted); LeaseUntil is set again by the next lease call,
// before anything reads it.
func (s *Stage) again(it *work.Item, after time.Duration) {
	if !it.Owner.Requeue(it) {
		return
	}
	s.routes.Again(it, s.clk.Now().Add(after).UnixNano())
}

func (s *Stage) count(it *work.Item, outcome string) {
	f := it.Firing
	s.m.Firings.WithLabelValues(firing.PriorityName(f.GetPriority()), outcome, s.m.Tenant(f.GetTenant())).Inc()
	if j := s.m.Job(f.GetJobId()); j != nil {
		j.Fired(outcome)
	}
}

// Execution is the lease script's view of a firing.
func Execution(f *sundialv1.Firing) lease.Execution {
	return lease.Execution{
		JobID: f.GetJobId(), ExecutionID: f.GetExecutionId(), Attempt: max(f.GetAttempt(), 1), Version: f.GetJobVersion(),
		Overlap: Overlap(f.GetOverlap()), FirstAttempt: f.GetFirstAttempt(),
		MaxConcurrency: f.GetMaxConcurrency(), Order: f.GetScheduledTime().AsTime().UnixMilli(),
	}
}

// Overlap maps a job's overlap policy to the lease script's.
func Overlap(o sundialv1.OverlapPolicy) lease.Overlap {
	switch o {
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
		return lease.OverlapSkip
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:
		return lease.OverlapBufferOne
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL:
		return lease.OverlapBufferAll
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_OTHER:
		return lease.OverlapCancelOther
	case sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER:
		return lease.OverlapTerminateOther
	default:
		return lease.OverlapAllow
	}
}
