package fire

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
)

// renewals keeps the leases of attempts in flight alive: one goroutine
// looks every LeaseTTL/6 for attempts whose lease was last taken or
// renewed LeaseTTL/3 ago or more, and renews those. An attempt registers
// when its request starts and leaves once the settle stage has written its
// marker; almost every attempt leaves long before its first renewal, so a
// firing costs a map entry instead of a goroutine and a timer of its own
// (two goroutine wake-ups per firing fewer).
type renewals struct {
	p *Stage
	// tick is armed when the pool is built, so it exists before the first
	// attempt does (a fake clock fires only timers that exist when it
	// moves).
	tick clock.Timer

	mu       sync.Mutex
	renewing map[*renewal]struct{}
}

// renewal is one attempt's lease while its request and settling run.
type renewal struct {
	ex     lease.Execution
	holder string
	// cancel ends the attempt's context with lease.ErrFenced when a
	// renewal finds another holder.
	cancel context.CancelCauseFunc

	// Guarded by renewals.mu.
	next time.Time
	// busy: a renewal call is in flight; left is closed when it returns,
	// and abort cancels it.
	busy  bool
	left  chan struct{}
	abort context.CancelFunc
	// failed: a renewal failed (fenced, or not known to have succeeded).
	failed bool
	gone   bool
}

func newRenewals(p *Stage) *renewals {
	r := &renewals{p: p, tick: p.clk.NewTimer(p.cfg.LeaseTTL / 6), renewing: map[*renewal]struct{}{}}
	return r
}

// add registers an attempt that took (or renewed) its lease at now.
func (r *renewals) add(ex lease.Execution, holder string, now time.Time, cancel context.CancelCauseFunc) *renewal {
	rn := &renewal{ex: ex, holder: holder, cancel: cancel, next: now.Add(r.p.cfg.LeaseTTL / 3)}
	r.mu.Lock()
	r.renewing[rn] = struct{}{}
	r.mu.Unlock()
	return rn
}

// stop ends rn's renewal, waiting for a renewal call in flight, and
// reports whether any renewal failed.
func (r *renewals) stop(rn *renewal) (failed bool) {
	r.mu.Lock()
	delete(r.renewing, rn)
	rn.gone = true
	var wait chan struct{}
	if rn.busy {
		wait = rn.left
		rn.abort()
	}
	r.mu.Unlock()
	if wait != nil {
		<-wait
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return rn.failed
}

// run renews what is due until ctx ends; the renewal calls it starts are
// waited for before it returns.
func (r *renewals) run(ctx context.Context) {
	defer r.tick.Stop()
	var calls sync.WaitGroup
	defer calls.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.tick.C():
		}
		now := r.p.clk.Now()
		r.mu.Lock()
		for rn := range r.renewing {
			if rn.busy || now.Before(rn.next) {
				continue
			}
			cctx, abort := context.WithTimeout(context.Background(), r.p.cfg.RedisTimeout)
			rn.busy, rn.left, rn.abort = true, make(chan struct{}), abort
			calls.Add(1)
			// One call each: a slow Redis delays no other attempt's
			// renewal behind this one.
			go func() {
				defer calls.Done()
				defer abort()
				r.renew(cctx, rn)
			}()
		}
		r.mu.Unlock()
		r.tick.Reset(r.p.cfg.LeaseTTL / 6)
	}
}

func (r *renewals) renew(ctx context.Context, rn *renewal) {
	p := r.p
	err := p.leaser.Renew(ctx, rn.ex, rn.holder, p.cfg.LeaseTTL)
	r.mu.Lock()
	gone := rn.gone
	switch {
	case errors.Is(err, lease.ErrFenced):
		rn.failed = true
	case errors.Is(err, lease.ErrCancelled):
		// Renewed: the lease is still ours, to finish the attempt under.
	case err != nil && !gone:
		// Expired or Redis unreachable: nobody else holds it (or we
		// cannot tell); finishing is better than abandoning.
		rn.failed = true
	}
	rn.next = p.clk.Now().Add(p.cfg.LeaseTTL / 3)
	rn.busy = false
	close(rn.left)
	r.mu.Unlock()
	switch {
	case errors.Is(err, lease.ErrFenced):
		p.logger.Warn("lease taken over during the attempt; abandoning it", "execution_id", rn.ex.ExecutionID)
		rn.cancel(lease.ErrFenced)
	case errors.Is(err, lease.ErrCancelled):
		if !gone {
			p.logger.Info("execution cancelled during the attempt; abandoning it", "execution_id", rn.ex.ExecutionID, "err", err)
		}
		rn.cancel(err)
	case err != nil && !gone:
		p.logger.Warn("lease renewal failed", "err", err, "execution_id", rn.ex.ExecutionID)
	}
}
