package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/store/lease"

	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// ReleaseStore is the part of lease.Store the Unstarted releaser uses.
type ReleaseStore interface {
	ReleaseMany(ctx context.Context, batch []lease.Release) ([]bool, error)
}

// Unstarted gives back, in batches, the leases of firings this worker
// leased and then let go without sending their request: a firing given
// back to its partition (work.Owner.Requeue: to be prepared again later,
// or abandoned because the worker is leaving the group). Each is released
// with lease.Release.Unstarted, so the delivery is uncounted: a rebalance,
// a restart or a lease conflict is not a delivery toward
// --max-deliveries, and the next holder need not wait for the lease or
// the liveness key to run out.
//
// Nothing here is on the firing path: Add appends under a lock and wakes
// the loop, which sends whatever gathered meanwhile in one call (up to
// batch entries). A call that fails is logged and dropped: the leases end
// with their TTL or their worker's liveness, and the deliveries stay
// counted (one each, as a crash would).
//
// It is its own service, started before the prepare stage and stopped
// after the executors (the consumer stops first, and the stages give
// firings back while they stop); Stop sends what is pending, bounded.
type Unstarted struct {
	store   ReleaseStore
	timeout time.Duration
	logger  *slog.Logger

	mu      sync.Mutex
	pending []lease.Release
	wake    chan struct{}
	runner  lifecycle.Runner
}

// unstartedBatch bounds one ReleaseMany call (one Redis script: other
// clients wait while it runs), as --prepare-batch bounds an acquisition.
const unstartedBatch = 256

// NewUnstarted returns a releaser over store; timeout bounds each call.
func NewUnstarted(store ReleaseStore, timeout time.Duration, logger *slog.Logger) *Unstarted {
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Unstarted{store: store, timeout: timeout, logger: logger, wake: make(chan struct{}, 1)}
}

// Give queues the release of it's lease if this delivery took one (the
// lease script said Acquired or Poison); anything else holds no lease and
// was never counted. Call it only for a firing whose request was not sent.
func (u *Unstarted) Give(it *work.Item) {
	if u == nil || it.LeaseHolder == "" || it.Firing == nil {
		return
	}
	if o := it.Lease.Outcome; o != lease.Acquired && o != lease.Poison {
		return
	}
	u.Add(lease.Release{Execution: prepare.Execution(it.Firing), Holder: it.LeaseHolder, Unstarted: true})
}

// Add queues one release.
func (u *Unstarted) Add(r lease.Release) {
	u.mu.Lock()
	u.pending = append(u.pending, r)
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// Start runs the loop.
func (u *Unstarted) Start(context.Context) error {
	return u.runner.Run(func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-u.wake:
			}
			u.flush(ctx)
		}
	})
}

// Stop ends the loop and sends what is still pending.
func (u *Unstarted) Stop() {
	u.runner.Stop()
	u.flush(context.Background())
}

// Pending is how many releases wait to be sent (tests, debugging).
func (u *Unstarted) Pending() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.pending)
}

func (u *Unstarted) flush(ctx context.Context) {
	for {
		u.mu.Lock()
		n := min(len(u.pending), unstartedBatch)
		batch := u.pending[:n:n]
		u.pending = u.pending[n:]
		if len(u.pending) == 0 {
			u.pending = nil
		}
		u.mu.Unlock()
		if n == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), u.timeout)
		_, err := u.store.ReleaseMany(cctx, batch)
		cancel()
		if err != nil {
			u.logger.Warn("could not give back the leases of firings not started; they end with their TTL and stay counted as deliveries", "err", err, "leases", n)
		}
	}
}
