package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// aliver is lease.Store's Alive.
type aliver interface {
	Alive(ctx context.Context, worker string, ttl time.Duration) error
}

// liveness keeps this worker's liveness key in Redis (lease.WithLiveness)
// while it runs: refreshed every quarter of its TTL, so a killed worker's
// leases are free for the worker that takes its partitions within the TTL,
// instead of after the leases' own TTL. It is started before the prepare
// stage takes a lease and stopped after the executors: a worker draining
// for shutdown still owns its leases. On Stop the key is left to expire.
type liveness struct {
	store  aliver
	worker string
	ttl    time.Duration
	clk    clock.Clock
	logger *slog.Logger
	runner lifecycle.Runner
}

func (l *liveness) Start(ctx context.Context) error {
	// Once before anything is leased; a failure is not fatal (Redis may
	// be down at start, as it may be later).
	l.refresh(ctx, true)
	return l.runner.Run(func(ctx context.Context) error {
		ok := true
		for {
			t := l.clk.NewTimer(l.ttl / 4)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
			ok = l.refresh(ctx, ok)
		}
	})
}

// refresh sets the key; it logs when refreshing starts or stops working,
// not on every failure.
func (l *liveness) refresh(ctx context.Context, wasOK bool) bool {
	cctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	err := l.store.Alive(cctx, l.worker, l.ttl)
	cancel()
	switch {
	case err != nil && wasOK && ctx.Err() == nil:
		l.logger.Warn("could not refresh this worker's liveness key; past its TTL other workers may take its leases", "err", err, "ttl", l.ttl)
	case err == nil && !wasOK:
		l.logger.Info("liveness key refreshed again")
	}
	return err == nil
}

func (l *liveness) Stop() { l.runner.Stop() }
