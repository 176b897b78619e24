// Package recorder writes attempt records to the ledger off the firing
// path. The executor never waits for Cassandra before calling a target:
// it hands the RUNNING record and, later, the final record to the recorder,
// and the final record's write is what finishes the firing (lets its Kafka
// offset be committed) — so a crash before the history is written
// redelivers the firing instead of losing the record silently.
//
// Records of one execution go through one shard, so they are written in
// the order they were handed in (RUNNING before the outcome). Shards write
// concurrently with each other.
package recorder

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Ledger is the part of ledger.Writer the worker needs.
type Ledger interface {
	Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error
}

// Config tunes the recorder.
type Config struct {
	// Shards is the number of concurrent writers.
	Shards int
	// QueueSize per shard. A full queue drops RUNNING records (the outcome
	// follows) and blocks final records (backpressure rather than loss).
	QueueSize int
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long Stop keeps writing queued records.
	DrainTimeout time.Duration
}

// DefaultConfig suits one worker.
var DefaultConfig = Config{Shards: 8, QueueSize: 4096, WriteTimeout: 10 * time.Second, DrainTimeout: 10 * time.Second}

// Metrics observes the recorder; nil fields are skipped.
type Metrics struct {
	// Written counts writes by result: ok, retry, fenced, invalid, dropped.
	Written func(result string)
}

type job struct {
	a    *sundialv1.ExecutionAttempt
	done func()
}

// Recorder is a lifecycle.Service.
type Recorder struct {
	ledger  Ledger
	cfg     Config
	logger  *slog.Logger
	metrics Metrics

	shards []chan job
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
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultConfig.QueueSize
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultConfig.WriteTimeout
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultConfig.DrainTimeout
	}
	r := &Recorder{ledger: l, cfg: cfg, logger: logger, metrics: m, quit: make(chan struct{})}
	r.hard, r.cancelHard = context.WithCancel(context.Background())
	r.shards = make([]chan job, cfg.Shards)
	for i := range r.shards {
		r.shards[i] = make(chan job, cfg.QueueSize)
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

func (r *Recorder) shard(executionID string) chan job {
	h := fnv.New32a()
	_, _ = h.Write([]byte(executionID))
	return r.shards[h.Sum32()%uint32(len(r.shards))]
}

// Running hands in a RUNNING record. It never blocks: when the shard is
// full the record is dropped (and counted); the final record still comes.
func (r *Recorder) Running(a *sundialv1.ExecutionAttempt) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	select {
	case r.shard(a.GetExecutionId()) <- job{a: a}:
	default:
		r.count("dropped")
	}
}

// Final hands in a final record; done is called once it is written (or
// permanently refused). It blocks while the shard is full — a ledger that
// cannot keep up slows the worker rather than losing history. It reports
// false when the recorder is stopped (done is not called).
func (r *Recorder) Final(ctx context.Context, a *sundialv1.ExecutionAttempt, done func()) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return false
	}
	select {
	case r.shard(a.GetExecutionId()) <- job{a: a, done: done}:
		return true
	case <-ctx.Done():
		return false
	case <-r.quit:
		return false
	}
}

func (r *Recorder) run(ch chan job) {
	defer r.wg.Done()
	for j := range ch {
		if r.write(j.a) && j.done != nil {
			j.done()
		}
	}
}

// write retries transient failures until the hard stop, and reports whether
// the record is settled (written, or refused for good).
func (r *Recorder) write(a *sundialv1.ExecutionAttempt) bool {
	backoff := 50 * time.Millisecond
	for {
		if r.hard.Err() != nil {
			r.count("dropped")
			return false
		}
		ctx, cancel := context.WithTimeout(r.hard, r.cfg.WriteTimeout)
		err := r.ledger.Record(ctx, a)
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
