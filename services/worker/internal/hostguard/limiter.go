// Package hostguard protects target hosts from the worker and the worker
// from broken hosts: a rate per host bounds the requests (Limiter, package
// gcra's algorithm, the one the cluster-wide limits run in Redis), and a
// circuit breaker per host stops calling a host that keeps failing
// (Breakers).
//
// The two sit at different places on the firing path. The rate limit is
// checked before the lease is taken: a firing over its host's rate is held
// again until a token is due, without occupying an executor or a lease, so
// a burst to one slow-to-accept host does not starve the others. The
// breaker is a decorator of the target: an attempt refused by an open
// breaker is an attempt like any other, failed fast with class
// circuit_open, and the job's retry policy decides what follows.
//
// Both count in this process alone. Held across the workers in Redis they
// are package limits, which falls back to these when Redis does not
// answer (and uses them alone with --cluster-limits=false).
package hostguard

import (
	"context"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/gcra"

	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Limiter is a rate per host: Rate requests a second on average, bursts
// of up to Burst. It is safe for concurrent use.
type Limiter struct {
	rate  gcra.Rate
	hosts *gcra.Limiter
}

// NewLimiter returns a limiter of rate requests per second per host with
// the given burst (at least 1). A rate of zero or less returns nil: no
// limit (a nil *Limiter allows everything).
func NewLimiter(rate float64, burst int) *Limiter {
	if rate <= 0 {
		return nil
	}
	return &Limiter{rate: gcra.PerSecond(rate, burst), hosts: gcra.New()}
}

// Reserve takes host's turn at now if it has come and returns 0;
// otherwise it takes nothing and returns how long until it comes (at
// least a millisecond).
func (l *Limiter) Reserve(host string, now time.Time) time.Duration {
	if l == nil || host == "" {
		return 0
	}
	if w := l.hosts.Allow(host, l.rate, now); w > 0 {
		return max(w, time.Millisecond)
	}
	return 0
}

// Admit is Reserve for the firing's host, as the fire stage asks it
// (executor.Limiter): how long the firing waits, and the outcome it is
// counted as meanwhile.
func (l *Limiter) Admit(_ context.Context, it *work.Item, now time.Time) (time.Duration, string) {
	if w := l.Reserve(target.Host(it.Firing), now); w > 0 {
		return w, OutcomeRateLimited
	}
	return 0, ""
}

// OutcomeRateLimited is the firing outcome counted for a firing held back
// by its host's rate.
const OutcomeRateLimited = "rate_limited"

// Len is the number of hosts tracked (tests).
func (l *Limiter) Len() int { return l.hosts.Len() }
