// Package clockoffset estimates how far this host's clock is from the
// database clock, which decides every scheduling instant, so the worker can
// fire by database time.
//
// Each round takes several samples, NTP style: read the local clock (t0),
// ask Postgres for clock_timestamp() (s), read the local clock again (t1).
// Assuming the request and the reply took equally long, the server read its
// clock at local time (t0+t1)/2, so offset = s - (t0+t1)/2, wrong by at most
// half the round trip (t1-t0). The sample with the smallest round trip has
// the smallest error bound, so each round keeps that one; a round's first
// sample (which may pay for a connection) is thereby discarded too.
//
// The estimate is used only to correct timers: Postgres is never on a
// firing's path. If Postgres is unreachable the last estimate stays in
// force (clocks drift by microseconds per second, so a stale estimate is
// still good for a long time).
package clockoffset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// Sampler reads the reference clock once.
type Sampler interface {
	ServerTime(ctx context.Context) (time.Time, error)
}

// Estimate is one round's result.
type Estimate struct {
	// Offset is reference minus local: add it to the local clock.
	Offset time.Duration
	// RTT is the round trip of the sample used; the offset is within RTT/2.
	RTT time.Duration
}

// Config tunes the estimator.
type Config struct {
	// Samples per round; the one with the smallest round trip wins.
	Samples int
	// Interval between rounds.
	Interval time.Duration
	// Timeout bounds one sample.
	Timeout time.Duration
}

// DefaultConfig: a round of 8 samples every 30 s costs Postgres nothing and
// follows drift far more closely than a firing needs.
var DefaultConfig = Config{Samples: 8, Interval: 30 * time.Second, Timeout: 2 * time.Second}

// Estimator is a lifecycle.Service that keeps the offset current.
type Estimator struct {
	local   clock.Clock
	sampler Sampler
	cfg     Config
	logger  *slog.Logger
	// OnEstimate, when set, is called after each successful round (metrics,
	// and the holder's Wake so timers follow the new offset).
	onEstimate func(Estimate)

	offset atomic.Int64
	runner lifecycle.Runner
}

// New returns an estimator that measures local against sampler.
func New(local clock.Clock, sampler Sampler, cfg Config, logger *slog.Logger, onEstimate func(Estimate)) *Estimator {
	if cfg.Samples <= 0 {
		cfg.Samples = DefaultConfig.Samples
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultConfig.Interval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultConfig.Timeout
	}
	return &Estimator{local: local, sampler: sampler, cfg: cfg, logger: logger, onEstimate: onEstimate}
}

// Offset is the current estimate (zero before the first successful round).
func (e *Estimator) Offset() time.Duration { return time.Duration(e.offset.Load()) }

// Clock is the corrected clock: local time plus the current estimate.
func (e *Estimator) Clock() clock.Clock { return clock.Offset{Base: e.local, Offset: e.Offset} }

// Round takes one round of samples and returns the best, without applying
// it.
func (e *Estimator) Round(ctx context.Context) (Estimate, error) {
	best := Estimate{RTT: -1}
	var errs []error
	for range e.cfg.Samples {
		sctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		t0 := e.local.Now()
		s, err := e.sampler.ServerTime(sctx)
		t1 := e.local.Now()
		cancel()
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		rtt := t1.Sub(t0)
		mid := t0.Add(rtt / 2)
		if best.RTT < 0 || rtt < best.RTT {
			best = Estimate{Offset: s.Sub(mid), RTT: rtt}
		}
	}
	if best.RTT < 0 {
		return Estimate{}, fmt.Errorf("clockoffset: no sample succeeded: %w", errors.Join(errs...))
	}
	return best, nil
}

// Update runs a round and applies it.
func (e *Estimator) Update(ctx context.Context) (Estimate, error) {
	est, err := e.Round(ctx)
	if err != nil {
		return est, err
	}
	e.offset.Store(int64(est.Offset))
	if e.onEstimate != nil {
		e.onEstimate(est)
	}
	return est, nil
}

// Start takes a first round within ctx, so the worker does not fire by an
// uncorrected clock when Postgres is up; if it fails the worker starts
// anyway (offset 0, a warning) and later rounds catch up.
func (e *Estimator) Start(ctx context.Context) error {
	if est, err := e.Update(ctx); err != nil {
		e.logger.Warn("clock offset: first estimate failed, firing by the local clock until one succeeds", "err", err)
	} else {
		e.logger.Info("clock offset estimated", "offset", est.Offset, "rtt", est.RTT)
	}
	// The timer is armed before Start returns, so a test's fake clock can
	// move past it right away.
	t := e.local.NewTimer(e.cfg.Interval)
	return e.runner.Run(func(ctx context.Context) error { return e.loop(ctx, t) })
}

// Stop ends the periodic rounds.
func (e *Estimator) Stop() { e.runner.Stop() }

func (e *Estimator) loop(ctx context.Context, t clock.Timer) error {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		prev := e.Offset()
		est, err := e.Update(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.logger.Warn("clock offset: estimate failed, keeping the last one", "err", err, "offset", prev)
		case err == nil && (est.Offset-prev > 5*time.Millisecond || prev-est.Offset > 5*time.Millisecond):
			e.logger.Info("clock offset changed", "offset", est.Offset, "previous", prev, "rtt", est.RTT)
		}
		t.Reset(e.cfg.Interval)
	}
}
