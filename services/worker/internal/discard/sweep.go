package discard

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"

	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Holder is where the Sweeper looks for firings to drop (holder.Holder).
type Holder interface {
	RemoveIf(drop func(*work.Item) bool) []*work.Item
}

// Claimed is a Holder whose firings are already claimed from their
// partition (the fire holder: the prepare stage claimed and leased them):
// what the Sweeper takes out of it is dropped as it is, where a firing of
// another holder is claimed first. Its leases run out on their own; no
// copy of a changed job's firing fires.
type Claimed struct{ Holder }

// DefaultWindow is how long the Sweeper gathers announcements before a
// sweep: the announcements of a bulk delete arrive within it, so thousands
// of jobs cost one scan of each holder.
const DefaultWindow = 200 * time.Millisecond

// Sweeper is a lifecycle.Service: its goroutine takes the firings of
// changed jobs out of the holders and hands them to the Summarizer.
type Sweeper struct {
	holders []Holder
	sum     *Summarizer
	window  time.Duration
	clk     clock.Clock
	logger  *slog.Logger

	mu      sync.Mutex
	changed map[string]int64
	signal  chan struct{}

	runner lifecycle.Runner
}

// NewSweeper returns a sweeper of holders (the prepare stage's and the fire
// stage's) handing what it drops to sum; window 0 means DefaultWindow.
func NewSweeper(holders []Holder, sum *Summarizer, window time.Duration, clk clock.Clock, logger *slog.Logger) *Sweeper {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Sweeper{holders: holders, sum: sum, window: window, clk: clk, logger: logger,
		changed: map[string]int64{}, signal: make(chan struct{}, 1)}
}

// Changed notes that jobID is now at version: its held firings of older
// versions are dropped at the next sweep. It never blocks (it is the
// versions watch's WithChanged listener).
func (w *Sweeper) Changed(jobID string, version int64) {
	w.mu.Lock()
	if w.changed[jobID] < version {
		w.changed[jobID] = version
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Start runs the sweeping loop.
func (w *Sweeper) Start(context.Context) error { return w.runner.Run(w.loop) }

// Stop ends the loop; announcements not yet swept are left to the checks
// at the firings' instants.
func (w *Sweeper) Stop() { w.runner.Stop() }

func (w *Sweeper) loop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.signal:
		}
		// Gather the rest of the burst before scanning.
		t := w.clk.NewTimer(w.window)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		w.Sweep()
	}
}

// Sweep drops now every held firing of a job announced since the last
// sweep at a version older than the announced one, and reports how many.
// The loop calls it after each window; it is exported for tests and
// benchmarks.
func (w *Sweeper) Sweep() int {
	w.mu.Lock()
	changed := w.changed
	w.changed = map[string]int64{}
	w.mu.Unlock()
	if len(changed) == 0 {
		return 0
	}
	start := w.clk.Now()
	n := 0
	for _, h := range w.holders {
		_, claimed := h.(Claimed)
		out := h.RemoveIf(func(it *work.Item) bool {
			v, ok := changed[it.JobID]
			return ok && it.JobVersion < v
		})
		for _, it := range out {
			// A firing whose partition went away is not ours to finish.
			if claimed || it.Owner.Claim(it) {
				w.sum.Drop(it, changed[it.JobID])
				n++
			}
		}
	}
	w.logger.Debug("dropped the held firings of changed jobs", "jobs", len(changed), "firings", n,
		"took", w.clk.Now().Sub(start))
	return n
}
