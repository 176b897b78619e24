// Package recorder writes attempt records to the ledger off the firing
// path. The executor never waits for Cassandra before calling a target:
// it hands the RUNNING record and, later, the final record to the recorder,
// and the final record's write is what finishes the firing (lets its Kafka
// offset be committed) — so a crash before the history is written
// redelivers the firing instead of losing the record silently.
//
// Grouped writes. When the ledger writes groups (GroupLedger:
// *ledger.Writer's RecordMany), records are sharded by their ledger
// partition (ledger.PartitionKey: the job's bucket and the slot's day), and
// each shard collects what arrives within Linger of its first record (up
// to GroupSize) and writes it with one RecordMany, which puts each
// partition's records in one single-partition batch: a herd of firings due
// together costs Cassandra a few mutations instead of one per record. A
// group's failed records are retried (everything the ledger writes is
// idempotent); nothing is settled (its Kafka offset committed) before it
// is written or spilled.
//
// Back-pressure. Cassandra is never sent more than it takes at a healthy
// latency: every write takes its turn at a ledger.Throttle, whose rate is
// cut when writes fail or slow down and raised while they are healthy, and
// a shard has at most GroupsInFlight groups out. With Spill (Postgres's
// ledger_pending, drained into the ledger by the prefetcher), what is
// beyond that — the part of a group the throttle does not grant within
// SpillAfter, a group that finds every slot taken, a group that has kept
// failing for SpillAfter — is spilled at once, so a slow or absent
// Cassandra holds neither memory nor firing up. Without Spill the queues
// fill and Final blocks. Either way the recorder holds at most QueueSize
// records plus, per shard, the group it is gathering and GroupsInFlight
// groups being written.
// The rest of this comment describes the per-record path, used for a
// Ledger without RecordMany.
//
// Records of one execution go through one shard, so they are written in
// the order they were handed in (RUNNING before the outcome). Shards write
// concurrently with each other, and each shard keeps up to InFlight writes
// in flight at once: it takes what is queued (up to InFlight records, never
// two of the same execution) and writes them together, so a shard's
// throughput is InFlight records per ledger round trip rather than one. A
// record of an execution already in the group waits for the next group,
// which starts only once the whole group is written, so the per-execution
// order holds.
//
// Two things keep the ledger's cost per firing down:
//   - A record handed in as held (the attempt kept its lease to the end) is
//     written without the ledger's fence-check read, which costs Cassandra
//     more than the write itself.
//   - A RUNNING record is held back for RunningDelay and not written at
//     all when its attempt's outcome arrives first (or while it is still
//     queued): both are the same ledger row (same execution, attempt and
//     fence), and the outcome overwrites every field RUNNING sets, so the
//     row ends the same with one write instead of two. Most attempts take
//     milliseconds, so most firings cost the ledger one write; an attempt
//     still running after the delay shows in the history as RUNNING. What
//     is given up: an attempt whose worker dies within the delay leaves no
//     row of its own (its redelivery's attempt is recorded).
package recorder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// GroupLedger is a Ledger that writes many records at once
// (*ledger.Writer): a ledger that implements it gets the recorder's records
// in groups (see Config.Linger and Config.GroupSize).
type GroupLedger interface {
	Ledger
	// RecordMany writes recs, grouped by partition; nil when all are
	// written, else one error per record (see ledger.Writer.RecordMany).
	RecordMany(ctx context.Context, recs []ledger.Rec) []error
}

// Ledger is the part of ledger.Writer the worker needs.
type Ledger interface {
	// Record writes a record, reporting ledger.ErrFenced when the attempt
	// is already recorded under a higher fence.
	Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error
	// RecordHeld writes a record whose fence is known to be current,
	// without the check.
	RecordHeld(ctx context.Context, a *sundialv1.ExecutionAttempt) error
}

// Config tunes the recorder.
type Config struct {
	// Shards is the number of queues records are spread over (zero:
	// DefaultShards for a per-record Ledger, DefaultGroupShards for a
	// GroupLedger).
	Shards int
	// InFlight is how many records one shard writes at once. Shards ×
	// InFlight bounds the worker's concurrent ledger writes.
	InFlight int
	// QueueSize bounds the records queued in all shards together (split
	// evenly); the default's 262,144 hold a 100,000-firing burst's records
	// held back (see Emptied) in half of it. A full queue drops RUNNING records (the outcome follows) and
	// blocks final records (backpressure rather than loss).
	QueueSize int
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long Stop keeps writing queued records.
	DrainTimeout time.Duration
	// RunningDelay holds a RUNNING record back this long, so an attempt
	// that ends sooner is recorded by its outcome alone. Zero writes
	// RUNNING at once.
	RunningDelay time.Duration
	// Linger is how long a shard of a GroupLedger waits after its first
	// queued record for more before writing them as one group (zero:
	// DefaultConfig's). A group is written sooner when it reaches
	// GroupSize, or when no record has come for Quiet; while a group is
	// being written the next one queues.
	Linger time.Duration
	// Quiet ends a group early when no record arrives for this long: the
	// records of a herd are written just after the herd, not at the next
	// one's instant, while a steady stream (jittered jobs) fills groups
	// for the whole Linger — bigger per-partition batches, fewer Cassandra
	// mutations (zero: DefaultConfig's; at least Linger: never early).
	Quiet time.Duration
	// GroupSize caps the records of one group (one RecordMany call).
	GroupSize int
	// Clock times Linger and retry backoff; the real clock when nil.
	Clock clock.Clock
	// Spill, when set, parks records a GroupLedger has failed to take for
	// SpillAfter (ledger_pending in Postgres, drained into the ledger by
	// the prefetcher once Cassandra answers), so an outage of the ledger
	// fills neither the queues nor, through them, the executors. A
	// spilled record counts as written.
	Spill func(ctx context.Context, as []*sundialv1.ExecutionAttempt) error
	// SpillAfter is how long a group keeps failing, or would wait for its
	// turn at the throttle, before it is spilled (zero: DefaultConfig's).
	SpillAfter time.Duration
	// Throttle paces the writes by Cassandra's latency and errors (nil: one
	// with ledger.DefaultThrottleConfig, its burst at least GroupSize).
	Throttle *ledger.Throttle
	// GroupsInFlight bounds the groups one shard of a GroupLedger has
	// being written (or retried) at once (zero: DefaultConfig's). A slow
	// write does not stop the shard from taking the next group; when all
	// are out, the next group is spilled at once (with Spill) or waits.
	GroupsInFlight int
	// Emptied, when set, returns a channel closed once no due firing waits
	// for an executor (the ready queue's Emptied). While one is open, a
	// shard of a GroupLedger holds its gathered group back — taking more
	// records into it, up to GroupSize — so the cores go to the requests
	// that are due and the ledger's writes (Cassandra's work and the
	// worker's) come after them: a burst fires first and is recorded
	// after. The hold ends when the firings have gone out, when the
	// group's first record has waited MaxYield, when the shard's queue is
	// half full (the executors never wait for a held-back record), or when
	// the recorder stops. What a shard held back is then written with
	// its groups waiting for a free write slot rather than spilled, unless
	// the ledger is failing or the queue is half full.
	Emptied func() <-chan struct{}
	// MaxYield bounds how long a record is held back while firings wait
	// (zero: records are never held back). A firing is finished (its
	// Kafka offset may be committed) only once its record is written, so
	// this also bounds how much more a crashed worker's successor is
	// redelivered: the attempts it finds done are recorded from their
	// done markers, as any attempt whose worker stopped before its record.
	MaxYield time.Duration
}

// DefaultConfig suits one worker.
var DefaultConfig = Config{
	InFlight: 8, QueueSize: 1 << 18, WriteTimeout: 10 * time.Second, DrainTimeout: 10 * time.Second,
	RunningDelay: time.Second, Linger: 2 * time.Second, Quiet: 100 * time.Millisecond, GroupSize: 1000, SpillAfter: 5 * time.Second,
	GroupsInFlight: 4, MaxYield: 15 * time.Second,
}

// yieldPoll is how often a held-back group, or one waiting for a write
// slot, looks at its shard's queue (whether it is half full).
const yieldPoll = 20 * time.Millisecond

// DefaultShards and DefaultGroupShards are the shard counts when
// Config.Shards is zero. A GroupLedger's records are sharded by their
// partition, but each record also has an index entry in a partition of
// its execution's: a group gathered by one of few shards shares far more
// index partitions than one of many (at 1,000 records/s over 16 shards, a
// 2 s group averaged two records per Cassandra batch; over 2 shards, about
// ten times that), and a group's batches are written in parallel anyway.
const (
	DefaultShards      = 16
	DefaultGroupShards = 2
)

// Metrics observes the recorder; nil fields are skipped.
type Metrics struct {
	// Written counts writes by result: ok, retry, fenced, invalid,
	// dropped, superseded (a queued RUNNING record its outcome replaced).
	Written func(result string)
	// Yielded observes how long a group was held back while due firings
	// waited (Config.Emptied).
	Yielded func(time.Duration)
}

type job struct {
	a    *sundialv1.ExecutionAttempt
	done func()
	// held: written without the fence check (Ledger.RecordHeld).
	held bool
	// running: a RUNNING record (no done; may be superseded).
	running bool
	// superseded is set on a queued RUNNING record when its attempt's
	// outcome is handed in; the shard then skips it.
	superseded atomic.Bool
	// delay holds a RUNNING record back (Config.RunningDelay); set and
	// stopped under queuedMu.
	delay *time.Timer
	// at is when the record was queued: a held-back group's wait is
	// counted from its oldest record's (Config.MaxYield).
	at time.Time
}

// attemptKey names one ledger row: an attempt under one fence.
type attemptKey struct {
	execution string
	attempt   int32
	fence     int64
}

func keyOf(a *sundialv1.ExecutionAttempt) attemptKey {
	return attemptKey{a.GetExecutionId(), a.GetAttempt(), a.GetFenceToken()}
}

// Recorder is a lifecycle.Service.
type Recorder struct {
	ledger  Ledger
	cfg     Config
	logger  *slog.Logger
	metrics Metrics

	shards []chan *job
	// queued holds the RUNNING records handed in and not yet taken by
	// their shard, so an outcome can supersede its RUNNING record.
	queuedMu sync.Mutex
	queued   map[attemptKey]*job
	// hard ends in-progress retries when the drain time is up.
	hard       context.Context
	cancelHard context.CancelFunc
	// quit is closed first thing in Stop, so a Final blocked on a full
	// shard gives up before Stop takes the lock.
	quit    chan struct{}
	mu      sync.RWMutex
	closed  bool
	started bool
	// spilling: a group was spilled and no write has succeeded since.
	spilling atomic.Bool
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// New returns a recorder writing to l.
func New(l Ledger, cfg Config, logger *slog.Logger, m Metrics) *Recorder {
	if cfg.Shards <= 0 {
		cfg.Shards = DefaultShards
		if _, grouped := l.(GroupLedger); grouped {
			cfg.Shards = DefaultGroupShards
		}
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = DefaultConfig.InFlight
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultConfig.QueueSize
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultConfig.WriteTimeout
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultConfig.DrainTimeout
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultConfig.Linger
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultConfig.Quiet
	}
	if cfg.GroupSize <= 0 {
		cfg.GroupSize = DefaultConfig.GroupSize
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.SpillAfter <= 0 {
		cfg.SpillAfter = DefaultConfig.SpillAfter
	}
	if cfg.GroupsInFlight <= 0 {
		cfg.GroupsInFlight = DefaultConfig.GroupsInFlight
	}
	if cfg.Throttle == nil {
		tc := ledger.DefaultThrottleConfig
		tc.Burst, tc.Clock = max(tc.Burst, cfg.GroupSize), cfg.Clock
		cfg.Throttle, _ = ledger.NewThrottle(tc) // the defaults are valid
	}
	r := &Recorder{ledger: l, cfg: cfg, logger: logger, metrics: m, quit: make(chan struct{}), queued: map[attemptKey]*job{}}
	r.hard, r.cancelHard = context.WithCancel(context.Background())
	r.shards = make([]chan *job, cfg.Shards)
	for i := range r.shards {
		r.shards[i] = make(chan *job, max(1, cfg.QueueSize/cfg.Shards))
	}
	return r
}

// Start starts one goroutine per shard.
func (r *Recorder) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.started {
		return errors.New("recorder: already started or stopped")
	}
	r.started = true
	gl, grouped := r.ledger.(GroupLedger)
	for _, ch := range r.shards {
		r.wg.Add(1)
		if grouped {
			go r.runGrouped(ch, gl)
		} else {
			go r.run(ch)
		}
	}
	return nil
}

// Stop stops accepting records, writes what is queued for up to the drain
// timeout, then abandons the rest (their firings stay unfinished and are
// redelivered).
func (r *Recorder) Stop() {
	r.stopOnce.Do(func() {
		close(r.quit)
		r.mu.Lock()
		r.closed = true
		for _, ch := range r.shards {
			close(ch)
		}
		r.queuedMu.Lock()
		for k, j := range r.queued {
			if j.delay != nil && j.delay.Stop() {
				delete(r.queued, k)
			}
		}
		r.queuedMu.Unlock()
		started := r.started
		r.mu.Unlock()
		if !started {
			r.cancelHard()
			return
		}
		done := make(chan struct{})
		go func() { r.wg.Wait(); close(done) }()
		t := time.NewTimer(r.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			r.logger.Warn("recorder: drain timed out, abandoning queued records")
			r.cancelHard()
			<-done
		}
		r.cancelHard()
	})
}

// shard is where a record queues: by its ledger partition (job bucket and
// slot day), so one shard's group maps onto few partitions — few batches —
// and every record of an execution (same job, same slot) goes through the
// same shard.
func (r *Recorder) shard(a *sundialv1.ExecutionAttempt) chan *job {
	return r.shards[ledger.PartitionKey(a)%uint64(len(r.shards))]
}

// Running hands in the RUNNING record of an attempt that has just taken
// its lease (so it is written without the fence check), to be queued after
// RunningDelay unless the outcome comes first. It never blocks: when the
// shard is full the record is dropped (and counted); the final record
// still comes.
func (r *Recorder) Running(a *sundialv1.ExecutionAttempt) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	j := &job{a: a, held: true, running: true}
	k := keyOf(a)
	r.queuedMu.Lock()
	r.queued[k] = j
	if r.cfg.RunningDelay > 0 {
		j.delay = time.AfterFunc(r.cfg.RunningDelay, func() { r.delayed(k, j) })
		r.queuedMu.Unlock()
		return
	}
	r.queuedMu.Unlock()
	r.enqueueRunning(k, j)
}

// delayed queues a held-back RUNNING record whose attempt is still going.
func (r *Recorder) delayed(k attemptKey, j *job) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed || j.superseded.Load() {
		r.dequeued(k, j)
		return
	}
	r.enqueueRunning(k, j)
}

// enqueueRunning queues j without waiting; the caller holds r.mu (read)
// and has seen the recorder open.
func (r *Recorder) enqueueRunning(k attemptKey, j *job) {
	j.at = r.cfg.Clock.Now()
	select {
	case r.shard(j.a) <- j:
	default:
		r.dequeued(k, j)
		r.count("dropped")
	}
}

// Final hands in a final record; done is called once it is written (or
// permanently refused). held says the attempt kept its lease to the end,
// so the record skips the fence check. A RUNNING record of the same
// attempt still waiting in the queue is superseded (not written). Final
// blocks while the shard is full — a ledger that cannot keep up slows the
// worker rather than losing history. It reports false when the recorder
// is stopped (done is not called).
func (r *Recorder) Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return false
	}
	k := keyOf(a)
	r.queuedMu.Lock()
	if running, ok := r.queued[k]; ok {
		running.superseded.Store(true)
		if running.delay != nil && running.delay.Stop() {
			// Still held back: it never reaches a queue.
			delete(r.queued, k)
			r.count("superseded")
		}
	}
	r.queuedMu.Unlock()
	select {
	case r.shard(a) <- &job{a: a, done: done, held: held, at: r.cfg.Clock.Now()}:
		return true
	case <-ctx.Done():
		return false
	case <-r.quit:
		return false
	}
}

// dequeued forgets a RUNNING record taken off (or never put on) its queue.
func (r *Recorder) dequeued(k attemptKey, j *job) {
	r.queuedMu.Lock()
	if r.queued[k] == j {
		delete(r.queued, k)
	}
	r.queuedMu.Unlock()
}

func (r *Recorder) run(ch chan *job) {
	defer r.wg.Done()
	group := make([]*job, 0, r.cfg.InFlight)
	// next is a record taken off the queue that belongs to an execution
	// already in the group: it starts the next group.
	var next *job
	for {
		group = group[:0]
		if next != nil {
			group, next = append(group, next), nil
		} else {
			j, ok := <-ch
			if !ok {
				return
			}
			if j = r.take(j); j == nil {
				continue
			}
			group = append(group, j)
		}
	fill:
		for len(group) < r.cfg.InFlight {
			select {
			case j, ok := <-ch:
				if !ok {
					break fill
				}
				if j = r.take(j); j == nil {
					continue
				}
				if sameExecution(group, j) {
					next = j
					break fill
				}
				group = append(group, j)
			default:
				break fill
			}
		}
		r.writeGroup(group)
	}
}

// runGrouped is a shard's loop over a GroupLedger: it waits for a record,
// collects more for up to Linger (or until GroupSize, or until none has
// come for Quiet), and writes them with
// one RecordMany, retrying the failed ones until they are written. Records
// of one execution may share a group: the ledger orders an attempt's
// records by their write timestamps (status rank), not by arrival.
func (r *Recorder) runGrouped(ch chan *job, gl GroupLedger) {
	defer r.wg.Done()
	slots := make(chan struct{}, r.cfg.GroupsInFlight)
	var writes sync.WaitGroup
	defer writes.Wait()
	// draining: the shard held records back while firings waited and has
	// not yet emptied its queue since.
	draining := false
	for {
		j, ok := <-ch
		if !ok {
			return
		}
		if j = r.take(j); j == nil {
			continue
		}
		// The queue is first in, first out: the group's first record is
		// the oldest of those it or the queue holds.
		first := j.at
		group := []*job{j}
		t := r.cfg.Clock.NewTimer(r.cfg.Linger)
		var quiet clock.Timer
		var quietC <-chan time.Time // nil: Quiet is no shorter than Linger
		if r.cfg.Quiet < r.cfg.Linger {
			quiet = r.cfg.Clock.NewTimer(r.cfg.Quiet)
			quietC = quiet.C()
		}
	fill:
		for len(group) < r.cfg.GroupSize {
			select {
			case j, ok := <-ch:
				if !ok {
					break fill
				}
				if j = r.take(j); j != nil {
					group = append(group, j)
				}
				if quiet != nil {
					quiet.Reset(r.cfg.Quiet)
				}
			case <-t.C():
				break fill
			case <-quietC:
				break fill
			}
		}
		t.Stop()
		if quiet != nil {
			quiet.Stop()
		}
		var held bool
		group, held = r.yield(ch, group, first)
		draining = draining || held
		// The backlog is drained once a group finds a free slot at once
		// with nothing queued behind it.
		if r.dispatch(gl, group, slots, &writes, ch, draining) && !held && len(ch) == 0 {
			draining = false
		}
	}
}

// yield holds a gathered group back while due firings wait for an
// executor (Config.Emptied), taking more records into it up to
// GroupSize, until they have gone out, the group's first record (taken at
// first) has waited MaxYield since it was queued, the shard's queue is half full, or the
// recorder stops. It reports whether it held the group at all.
func (r *Recorder) yield(ch chan *job, group []*job, first time.Time) ([]*job, bool) {
	if r.cfg.Emptied == nil || r.cfg.MaxYield <= 0 {
		return group, false
	}
	emptied := r.cfg.Emptied()
	select {
	case <-emptied:
		return group, false
	default:
	}
	start := r.cfg.Clock.Now()
	left := r.cfg.MaxYield - start.Sub(first)
	if left <= 0 || r.pressed(ch) {
		return group, false
	}
	if r.metrics.Yielded != nil {
		defer func() { r.metrics.Yielded(r.cfg.Clock.Now().Sub(start)) }()
	}
	deadline := r.cfg.Clock.NewTimer(left)
	defer deadline.Stop()
	poll := r.cfg.Clock.NewTimer(yieldPoll)
	defer poll.Stop()
	for {
		in := ch
		if len(group) >= r.cfg.GroupSize {
			in = nil // full: only wait
		}
		select {
		case j, ok := <-in:
			if !ok {
				return group, true // stopping: the shard's loop ends after this group
			}
			if j = r.take(j); j != nil {
				group = append(group, j)
			}
		case <-poll.C():
			if r.pressed(ch) {
				return group, true
			}
			poll.Reset(yieldPoll)
		case <-emptied:
			return group, true
		case <-deadline.C():
			return group, true
		case <-r.quit:
			return group, true
		}
	}
}

// pressed says a shard's queue is half full: records are no longer held
// back, nor kept from spilling by a wait for a write slot, so the queue
// never fills on their account and Final never blocks the executors.
func (r *Recorder) pressed(ch chan *job) bool { return 2*len(ch) >= cap(ch) }

// dispatch writes a group in a goroutine of the shard's (writes, waited for
// before the shard ends) once one of its slots is free. With every slot
// taken — the ledger already has this shard's share and is not answering
// it quickly — the group is spilled at once when it can be, so a slow node
// neither holds the shard up nor, through the queue, the executors;
// otherwise it waits for a slot (back-pressure).
//
// A shard draining what it held back while firings waited (draining) has
// a full queue by its own choice, not because the ledger is slow: its
// groups wait for a slot instead, for as long as the ledger is not
// failing and the queue is less than half full.
//
// It reports whether a slot was free at once.
func (r *Recorder) dispatch(gl GroupLedger, group []*job, slots chan struct{}, writes *sync.WaitGroup, ch chan *job, draining bool) (free bool) {
	select {
	case slots <- struct{}{}:
		free = true
	default:
		if draining && r.awaitSlot(slots, ch) {
			break
		}
		if r.cfg.Spill != nil && r.spill(group, fmt.Errorf("%w: %d groups of this shard being written", ledger.ErrThrottled, cap(slots))) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-r.hard.Done():
			for range group {
				r.count("dropped")
			}
			return
		}
	}
	writes.Go(func() {
		defer func() { <-slots }()
		r.writeMany(gl, group)
	})
	return free
}

// awaitSlot takes one of slots, waiting while the ledger is not failing
// and ch is less than half full; false when it gave up.
func (r *Recorder) awaitSlot(slots chan struct{}, ch chan *job) bool {
	poll := r.cfg.Clock.NewTimer(yieldPoll)
	defer poll.Stop()
	for {
		select {
		case slots <- struct{}{}:
			return true
		case <-poll.C():
			if r.spilling.Load() || r.pressed(ch) {
				return false
			}
			poll.Reset(yieldPoll)
		case <-r.hard.Done():
			return false
		}
	}
}

// writeMany writes a group, retrying the records that failed with a capped
// backoff until they are written or the hard stop abandons them (their
// firings stay unsettled and are redelivered). While it retries it holds
// one of the shard's GroupsInFlight slots; once all are held the shard
// spills (or, with nowhere to spill, takes nothing new: its queue fills,
// RUNNING records are dropped and Final blocks — back-pressure on the
// executor instead of unbounded memory).
//
// Each write first takes its turn at the throttle, whose rate follows
// Cassandra's latency and errors. With somewhere to spill, a group waits
// at most SpillAfter for its turn: what the throttle grants within it is
// written and the rest goes to Postgres at once — the ledger is taking less
// than the worker records, and waiting would only fill the queues and then
// hold up firing — so Cassandra gets its rate and no more, and keeps
// getting it (which is how its recovery is seen). A ledger that is not
// connected yet (ledger.ErrUnavailable) is spilled around at the first
// failure.
func (r *Recorder) writeMany(gl GroupLedger, group []*job) {
	backoff := 50 * time.Millisecond
	var failingSince time.Time
	for len(group) > 0 {
		if r.hard.Err() != nil {
			for range group {
				r.count("dropped")
			}
			return
		}
		var maxWait time.Duration // zero: wait for the turn, however far
		if r.cfg.Spill != nil {
			maxWait = r.cfg.SpillAfter
		}
		granted, err := r.cfg.Throttle.Take(r.hard, len(group), maxWait)
		if err == nil && granted < len(group) {
			// The rest of the group is beyond the ledger's rate.
			if !r.spill(group[granted:], fmt.Errorf("%w: %d of %d records granted within %s", ledger.ErrThrottled, granted, len(group), maxWait)) {
				r.cfg.Throttle.Release(granted)
				err = errSpillFailed
			} else {
				group = group[:granted]
			}
		}
		if err != nil {
			if errors.Is(err, ledger.ErrThrottled) && r.spill(group, err) {
				return
			}
			if r.hard.Err() == nil {
				// Spilling failed too: pace the next try.
				r.pause(backoff)
				backoff = min(2*backoff, 5*time.Second)
			}
			continue
		}
		recs := make([]ledger.Rec, len(group))
		for i, j := range group {
			recs[i] = ledger.Rec{Attempt: j.a, Held: j.held}
		}
		ctx, cancel := context.WithTimeout(r.hard, r.cfg.WriteTimeout)
		start := r.cfg.Clock.Now()
		errs := gl.RecordMany(ctx, recs)
		took := r.cfg.Clock.Now().Sub(start)
		cancel()
		// The throttle hears how the write went before any firing is
		// finished by it.
		var failed error
		for _, err := range errs {
			if ledgerFailed(err) {
				failed = err
			}
		}
		r.cfg.Throttle.Done(len(group), took, failed)
		var retry []*job
		var lastErr error
		if errs == nil {
			r.spilling.Store(false)
		}
		for i, j := range group {
			var err error
			if errs != nil {
				err = errs[i]
			}
			if r.settled(j, err) {
				if j.done != nil {
					j.done()
				}
				continue
			}
			retry, lastErr = append(retry, j), err
		}
		if len(retry) == 0 {
			return
		}
		now := r.cfg.Clock.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		// Once a group has been spilled, the ledger is taken to be down
		// until a write succeeds: later groups are spilled at their first
		// failure instead of each waiting SpillAfter, which would let the
		// queues fill at any rate above GroupSize per SpillAfter.
		spillNow := r.spilling.Load() || now.Sub(failingSince) >= r.cfg.SpillAfter || errors.Is(lastErr, ledger.ErrUnavailable)
		if r.cfg.Spill != nil && spillNow && r.spill(retry, lastErr) {
			r.spilling.Store(true)
			return
		}
		for range retry {
			r.count("retry")
		}
		r.logger.Warn("recorder: ledger write failed, retrying", "err", lastErr, "records", len(retry), "backoff", backoff)
		r.pause(backoff)
		backoff = min(2*backoff, 5*time.Second)
		group = retry
	}
}

// pause waits d on the recorder's clock, or until the hard stop.
func (r *Recorder) pause(d time.Duration) {
	t := r.cfg.Clock.NewTimer(d)
	select {
	case <-t.C():
	case <-r.hard.Done():
		t.Stop()
	}
}

// errSpillFailed: records beyond the throttle's grant could not be spilled;
// the group is tried again whole.
var errSpillFailed = errors.New("recorder: spilling failed")

// spill parks records the ledger has kept refusing; it reports whether they
// are parked (and so done with).
func (r *Recorder) spill(group []*job, cause error) bool {
	as := make([]*sundialv1.ExecutionAttempt, len(group))
	for i, j := range group {
		as[i] = j.a
	}
	ctx, cancel := context.WithTimeout(r.hard, r.cfg.WriteTimeout)
	err := r.cfg.Spill(ctx, as)
	cancel()
	if err != nil {
		r.logger.Warn("recorder: the ledger is failing and spilling failed too; retrying both", "ledger_err", cause, "spill_err", err, "records", len(group))
		return false
	}
	r.logger.Warn("recorder: the ledger is failing or behind; records spilled to Postgres for the drainer", "ledger_err", cause, "records", len(group), "after", r.cfg.SpillAfter)
	for _, j := range group {
		r.count("spilled")
		if j.done != nil {
			j.done()
		}
	}
	return true
}

// settled counts a write's result and reports whether the record is done
// with (written, or refused for good) rather than to be retried.
func (r *Recorder) settled(j *job, err error) bool {
	switch {
	case err == nil:
		r.count("ok")
	case errors.Is(err, ledger.ErrFenced):
		// Stored under its own fence; readers show it as FENCED.
		r.count("fenced")
	case errors.Is(err, ledger.ErrInvalidAttempt):
		r.count("invalid")
		r.logger.Error("recorder: ledger refused a record", "err", err, "execution_id", j.a.GetExecutionId())
	default:
		return false
	}
	return true
}

// ledgerFailed reports whether err is the ledger failing a write (to be
// retried), not a record refused for good.
func ledgerFailed(err error) bool {
	return err != nil && !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, ledger.ErrInvalidAttempt)
}

// take returns the job to write, or nil for a RUNNING record its outcome
// has superseded.
func (r *Recorder) take(j *job) *job {
	if j.running {
		r.dequeued(keyOf(j.a), j)
		if j.superseded.Load() {
			r.count("superseded")
			return nil
		}
	}
	return j
}

func sameExecution(group []*job, j *job) bool {
	for _, g := range group {
		if g.a.GetExecutionId() == j.a.GetExecutionId() {
			return true
		}
	}
	return false
}

// writeGroup writes the group's records concurrently and returns once all
// are settled (or abandoned at the hard stop).
func (r *Recorder) writeGroup(group []*job) {
	one := func(j *job) {
		if r.write(j) && j.done != nil {
			j.done()
		}
	}
	if len(group) == 1 {
		one(group[0])
		return
	}
	var wg sync.WaitGroup
	for _, j := range group[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(j)
		}()
	}
	one(group[0])
	wg.Wait()
}

// write retries transient failures until the hard stop, and reports whether
// the record is settled (written, or refused for good).
func (r *Recorder) write(j *job) bool {
	a := j.a
	backoff := 50 * time.Millisecond
	for {
		if r.hard.Err() != nil {
			r.count("dropped")
			return false
		}
		if _, err := r.cfg.Throttle.Take(r.hard, 1, 0); err != nil {
			continue // the hard stop: dropped above
		}
		ctx, cancel := context.WithTimeout(r.hard, r.cfg.WriteTimeout)
		start := r.cfg.Clock.Now()
		var err error
		if j.held {
			err = r.ledger.RecordHeld(ctx, a)
		} else {
			err = r.ledger.Record(ctx, a)
		}
		cancel()
		var failed error
		if ledgerFailed(err) {
			failed = err
		}
		r.cfg.Throttle.Done(1, r.cfg.Clock.Now().Sub(start), failed)
		switch {
		case err == nil:
			r.count("ok")
			return true
		case errors.Is(err, ledger.ErrFenced):
			// Stored under its own fence; readers show it as FENCED.
			r.count("fenced")
			return true
		case errors.Is(err, ledger.ErrInvalidAttempt):
			r.count("invalid")
			r.logger.Error("recorder: ledger refused a record", "err", err, "execution_id", a.GetExecutionId())
			return true
		}
		r.count("retry")
		r.logger.Warn("recorder: ledger write failed, retrying", "err", err, "execution_id", a.GetExecutionId(), "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.hard.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (r *Recorder) count(result string) {
	if r.metrics.Written != nil {
		r.metrics.Written(result)
	}
}
