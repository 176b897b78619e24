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
// renewed LeaseTTL/3 ago or more, and renews those together, in one
// lease.Store.RenewMany call (a batch of at most renewBatch). An attempt
// registers when its request starts and leaves once the settle stage has
// written its marker; almost every attempt leaves long before its first
// renewal, so a firing costs a map entry instead of a goroutine and a
// timer of its own. When many outlast a third of their lease — a backlog
// whose settling lags — they cost one Redis call per tick, not one each.
type renewals struct {
	p *Stage
	// tick is armed when the pool is built, so it exists before the first
	// attempt does (a fake clock fires only timers that exist when it
	// moves).
	tick clock.Timer

	mu       sync.Mutex
	renewing map[*renewal]struct{}
}

// renewBatch bounds one RenewMany call's entries.
const renewBatch = 512

// renewal is one attempt's lease while its request and settling run.
type renewal struct {
	ex     lease.Execution
	holder string
	// cancel ends the attempt's context with lease.ErrFenced when a
	// renewal finds another holder.
	cancel context.CancelCauseFunc

	// Guarded by renewals.mu.
	next time.Time
	// busy: a renewal call is in flight; left is closed when it returns.
	busy bool
	left chan struct{}
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

// stop ends rn's renewal, waiting for a renewal call in flight (bounded by
// RedisTimeout: the call is shared with other attempts, so it is not cut
// short), and reports whether any renewal failed.
func (r *renewals) stop(rn *renewal) (failed bool) {
	r.mu.Lock()
	delete(r.renewing, rn)
	rn.gone = true
	var wait chan struct{}
	if rn.busy {
		wait = rn.left
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
		var due []*renewal
		r.mu.Lock()
		for rn := range r.renewing {
			if rn.busy || now.Before(rn.next) {
				continue
			}
			rn.busy, rn.left = true, make(chan struct{})
			due = append(due, rn)
		}
		r.mu.Unlock()
		for len(due) > 0 {
			n := min(len(due), renewBatch)
			batch := due[:n:n]
			due = due[n:]
			calls.Add(1)
			// A call of its own per batch: a slow Redis delays no later
			// tick's look for due attempts.
			go func() {
				defer calls.Done()
				cctx, cancel := context.WithTimeout(context.Background(), r.p.cfg.RedisTimeout)
				defer cancel()
				r.renew(cctx, batch)
			}()
		}
		r.tick.Reset(r.p.cfg.LeaseTTL / 6)
	}
}

func (r *renewals) renew(ctx context.Context, batch []*renewal) {
	p := r.p
	req := make([]lease.Renewal, len(batch))
	for i, rn := range batch {
		req[i] = lease.Renewal{Execution: rn.ex, Holder: rn.holder, TTL: p.cfg.LeaseTTL}
	}
	errs, callErr := p.leaser.RenewMany(ctx, req)
	if callErr != nil {
		p.logger.Warn("lease renewal failed", "err", callErr, "attempts", len(batch))
	}
	got := make([]error, len(batch))
	gone := make([]bool, len(batch))
	next := p.clk.Now().Add(p.cfg.LeaseTTL / 3)
	r.mu.Lock()
	for i, rn := range batch {
		err := callErr
		if err == nil {
			err = errs[i]
		}
		got[i], gone[i] = err, rn.gone
		switch {
		case errors.Is(err, lease.ErrFenced):
			rn.failed = true
		case errors.Is(err, lease.ErrCancelled):
			// Renewed: the lease is still ours, to finish the attempt under.
		case err != nil && !rn.gone:
			// Expired or Redis unreachable: nobody else holds it (or we
			// cannot tell); finishing is better than abandoning.
			rn.failed = true
		}
		rn.next = next
		rn.busy = false
		close(rn.left)
	}
	r.mu.Unlock()
	for i, rn := range batch {
		switch err := got[i]; {
		case errors.Is(err, lease.ErrFenced):
			p.logger.Warn("lease taken over during the attempt; abandoning it", "execution_id", rn.ex.ExecutionID)
			rn.cancel(lease.ErrFenced)
		case errors.Is(err, lease.ErrCancelled):
			if !gone[i] {
				p.logger.Info("execution cancelled during the attempt; abandoning it", "execution_id", rn.ex.ExecutionID, "err", err)
			}
			rn.cancel(err)
		case err != nil && callErr == nil && !gone[i]:
			p.logger.Warn("lease renewal failed", "err", err, "execution_id", rn.ex.ExecutionID)
		}
	}
}
