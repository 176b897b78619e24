package settle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"
)

// Finisher writes attempts' markers (*lease.Store).
type Finisher interface {
	FinishMany(ctx context.Context, batch []lease.Finish) error
}

// MarksConfig tunes Marks.
type MarksConfig struct {
	// Timeout bounds one marker call.
	Timeout time.Duration
	// Retry is the first wait before writing deferred markers again; it
	// doubles up to MaxRetry.
	Retry, MaxRetry time.Duration
	// Batch bounds the markers of one deferred call.
	Batch int
	// Deferred is called with the number of markers a Write could not
	// write at once (a metric); nil: nothing.
	Deferred func(n int)
}

// DefaultMarksConfig values: a Redis outage ends within about MaxRetry of
// the markers being written.
var DefaultMarksConfig = MarksConfig{Timeout: 2 * time.Second, Retry: 100 * time.Millisecond, MaxRetry: time.Second, Batch: 256}

// Marks writes the markers that end attempts — done, attempt, retry-pending
// — and never loses one to a Redis outage, without making the settle stage
// wait for Redis to come back.
//
// A marker is what stops a copy of a finished execution (a redelivery, the
// next owner's copy of a firing kept through a rebalance) from firing again
// once the lease is gone. When Redis does not answer, Write keeps the group
// and returns at once; one goroutine writes what was kept, oldest first,
// retrying with backoff until Redis answers, and then calls each group's
// written callback. The caller holds the firings unfinished until then, so
// their offsets are not committed past and a crash redelivers them. While a
// marker waits, Pending reports its execution: the prepare stage does not
// lease a copy of it on this worker meanwhile (the copy would find no
// marker and fire again).
//
// While any group waits, Write does not try Redis first (the call would
// only time out): it queues behind the others.
type Marks struct {
	fin    Finisher
	cfg    MarksConfig
	clk    clock.Clock
	logger *slog.Logger

	mu      sync.Mutex
	waiting []deferredMarks
	pending map[string]int // execution id → markers waiting
	wake    chan struct{}

	runner lifecycle.Runner
}

type deferredMarks struct {
	marks   []lease.Finish
	written func()
}

// NewMarks returns a marker writer over fin.
func NewMarks(fin Finisher, cfg MarksConfig, clk clock.Clock, logger *slog.Logger) *Marks {
	d := DefaultMarksConfig
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.Retry <= 0 {
		cfg.Retry = d.Retry
	}
	if cfg.MaxRetry < cfg.Retry {
		cfg.MaxRetry = max(d.MaxRetry, cfg.Retry)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = d.Batch
	}
	return &Marks{fin: fin, cfg: cfg, clk: clk, logger: logger, pending: map[string]int{}, wake: make(chan struct{}, 1)}
}

// Write writes marks in one call and reports true when they were written.
// Otherwise (Redis did not answer, or markers already wait) it keeps them,
// returns false at once, and calls written once they are — from the
// writer's goroutine, which must not be held up.
func (m *Marks) Write(ctx context.Context, marks []lease.Finish, written func()) bool {
	if len(marks) == 0 {
		return true
	}
	m.mu.Lock()
	queued := len(m.waiting) > 0
	m.mu.Unlock()
	if !queued {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		err := m.fin.FinishMany(cctx, marks)
		cancel()
		if err == nil {
			return true
		}
		m.logger.Warn("could not write markers; they wait for Redis and their firings stay unfinished", "err", err, "markers", len(marks))
	}
	m.mu.Lock()
	m.waiting = append(m.waiting, deferredMarks{marks: marks, written: written})
	for _, f := range marks {
		m.pending[f.Execution.ExecutionID]++
	}
	m.mu.Unlock()
	if m.cfg.Deferred != nil {
		m.cfg.Deferred(len(marks))
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return false
}

// Pending reports whether a marker of the execution waits to be written.
func (m *Marks) Pending(executionID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pending[executionID] > 0
}

// Waiting is how many markers wait.
func (m *Marks) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, d := range m.waiting {
		n += len(d.marks)
	}
	return n
}

// Start runs the writer of deferred markers.
func (m *Marks) Start(context.Context) error {
	return m.runner.Run(func(ctx context.Context) error {
		backoff := m.cfg.Retry
		for {
			select {
			case <-ctx.Done():
				m.flush(context.Background())
				return nil
			case <-m.wake:
			}
			for !m.flush(ctx) {
				t := m.clk.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					m.flush(context.Background())
					return nil
				case <-t.C():
				}
				backoff = min(2*backoff, m.cfg.MaxRetry)
			}
			backoff = m.cfg.Retry
		}
	})
}

// Stop tries once more to write what waits; markers still not written are
// given up (their firings were never finished, so they are redelivered).
func (m *Marks) Stop() {
	m.runner.Stop()
	if n := m.Waiting(); n > 0 {
		m.logger.Error("stopping with markers not written; their firings are left unfinished and will be redelivered", "markers", n)
	}
}

// flush writes waiting groups, oldest first, up to Batch markers per call;
// it reports whether nothing waits any more.
func (m *Marks) flush(ctx context.Context) bool {
	for {
		m.mu.Lock()
		n, k := 0, 0
		for k < len(m.waiting) && (k == 0 || n+len(m.waiting[k].marks) <= m.cfg.Batch) {
			n += len(m.waiting[k].marks)
			k++
		}
		take := m.waiting[:k:k]
		m.mu.Unlock()
		if k == 0 {
			return true
		}
		marks := make([]lease.Finish, 0, n)
		for _, d := range take {
			marks = append(marks, d.marks...)
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		err := m.fin.FinishMany(cctx, marks)
		cancel()
		if err != nil {
			return false
		}
		m.mu.Lock()
		m.waiting = m.waiting[k:]
		for _, f := range marks {
			if m.pending[f.Execution.ExecutionID]--; m.pending[f.Execution.ExecutionID] <= 0 {
				delete(m.pending, f.Execution.ExecutionID)
			}
		}
		left := len(m.waiting)
		m.mu.Unlock()
		m.logger.Info("deferred markers written", "markers", len(marks), "groups_left", left)
		for _, d := range take {
			if d.written != nil {
				d.written()
			}
		}
	}
}
