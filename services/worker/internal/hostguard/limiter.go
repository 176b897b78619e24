// Package hostguard protects target hosts from the worker and the worker
// from broken hosts: a token bucket per host bounds the request rate
// (Limiter), and a circuit breaker per host stops calling a host that keeps
// failing (Breakers).
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
	"sync"
	"time"

	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Limiter is a token bucket per host: Rate requests a second on average,
// bursts of up to Burst. It is safe for concurrent use.
type Limiter struct {
	rate  float64 // tokens per second
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
	sweepAt time.Time
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed
}

// NewLimiter returns a limiter of rate requests per second per host with
// the given burst (at least 1). A rate of zero or less returns nil: no
// limit (a nil *Limiter allows everything).
func NewLimiter(rate float64, burst int) *Limiter {
	if rate <= 0 {
		return nil
	}
	return &Limiter{rate: rate, burst: float64(max(burst, 1)), buckets: map[string]*bucket{}}
}

// Reserve takes a token for host at now if one is available and returns
// 0; otherwise it takes nothing and returns how long until one is.
func (l *Limiter) Reserve(host string, now time.Time) time.Duration {
	if l == nil || host == "" {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[host]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[host] = b
	}
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(l.burst, b.tokens+el.Seconds()*l.rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return max(wait, time.Millisecond)
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

// sweep forgets the buckets that have been full long enough that a fresh
// bucket is the same thing, once a minute, so hosts seen once do not
// accumulate.
func (l *Limiter) sweep(now time.Time) {
	if now.Before(l.sweepAt) {
		return
	}
	l.sweepAt = now.Add(time.Minute)
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for h, b := range l.buckets {
		if now.Sub(b.at) > full {
			delete(l.buckets, h)
		}
	}
}

// Len is the number of hosts tracked (tests).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
