// Package recorder writes attempt records to the ledger off the firing
// path. The executor never waits for Cassandra before calling a target:
// it hands the RUNNING record and, later, the final record to the recorder,
// and the final record's write is what finishes the firing (lets its Kafka
// offset be committed) — so a crash before the history is written
// redelivers the firing instead of losing the record silently.
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
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

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
	// Shards is the number of queues records are spread over by execution.
	Shards int
	// InFlight is how many records one shard writes at once. Shards ×
	// InFlight bounds the worker's concurrent ledger writes.
	InFlight int
	// QueueSize per shard. A full queue drops RUNNING records (the outcome
	// follows) and blocks final records (backpressure rather than loss).
	QueueSize int
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long Stop keeps writing queued records.
	DrainTimeout time.Duration
	// RunningDelay holds a RUNNING record back this long, so an attempt
	// that ends sooner is recorded by its outcome alone. Zero writes
	// RUNNING at once.
	RunningDelay time.Duration
}

// DefaultConfig suits one worker.
var DefaultConfig = Config{Shards: 16, InFlight: 8, QueueSize: 4096, WriteTimeout: 10 * time.Second, DrainTimeout: 10 * time.Second, RunningDelay: time.Second}

// Metrics observes the recorder; nil fields are skipped.
type Metrics struct {
	// Written counts writes by result: ok, retry, fenced, invalid,
	// dropped, superseded (a queued RUNNING record its outcome replaced).
	Written func(result string)
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
	quit     chan struct{}
	mu       sync.RWMutex
	closed   bool
	started  bool
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// New returns a recorder writing to l.
func New(l Ledger, cfg Config, logger *slog.Logger, m Metrics) *Recorder {
	if cfg.Shards <= 0 {
		cfg.Shards = DefaultConfig.Shards
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
	r := &Recorder{ledger: l, cfg: cfg, logger: logger, metrics: m, quit: make(chan struct{}), queued: map[attemptKey]*job{}}
	r.hard, r.cancelHard = context.WithCancel(context.Background())
	r.shards = make([]chan *job, cfg.Shards)
	for i := range r.shards {
		r.shards[i] = make(chan *job, cfg.QueueSize)
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
	for _, ch := range r.shards {
		r.wg.Add(1)
		go r.run(ch)
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

func (r *Recorder) shard(executionID string) chan *job {
	h := fnv.New32a()
	_, _ = h.Write([]byte(executionID))
	return r.shards[h.Sum32()%uint32(len(r.shards))]
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
	select {
	case r.shard(j.a.GetExecutionId()) <- j:
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
	case r.shard(a.GetExecutionId()) <- &job{a: a, done: done, held: held}:
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
		ctx, cancel := context.WithTimeout(r.hard, r.cfg.WriteTimeout)
		var err error
		if j.held {
			err = r.ledger.RecordHeld(ctx, a)
		} else {
			err = r.ledger.Record(ctx, a)
		}
		cancel()
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
