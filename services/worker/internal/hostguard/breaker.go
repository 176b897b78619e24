package hostguard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// State of one host's breaker.
type State int

const (
	// Closed: attempts go through; consecutive failures are counted.
	Closed State = iota
	// Open: attempts fail fast until the cool-down ends.
	Open
	// HalfOpen: the cool-down ended; one probe attempt goes through, the
	// others fail fast until it reports.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	default:
		return "closed"
	}
}

// BreakerConfig tunes the breakers.
type BreakerConfig struct {
	// Failures is how many consecutive failed attempts to a host open its
	// breaker; 0 disables breakers.
	Failures int
	// Cooldown is how long an open breaker refuses attempts before letting
	// a probe through.
	Cooldown time.Duration
}

// BreakerMetrics observes breakers; nil fields are skipped.
type BreakerMetrics struct {
	// Transition is called on every state change with the new state.
	Transition func(from, to State)
	// Rejected counts attempts failed fast.
	Rejected func()
}

// Breakers is a circuit breaker per target host, as a target.Target
// decorator. Failures are what a host's health explains: connection
// errors, timeouts and 5xx. A 4xx, a 429 (the rate limit and Retry-After
// handle it), a refused address or a missing secret say nothing about the
// host and neither open nor close a breaker.
type Breakers struct {
	next target.Target
	cfg  BreakerConfig
	clk  clock.Clock
	m    BreakerMetrics

	mu    sync.Mutex
	hosts map[string]*breaker
}

type breaker struct {
	state    State
	failures int
	openedAt time.Time
	probing  bool
}

// NewBreakers decorates next. With cfg.Failures 0 it returns next itself.
func NewBreakers(next target.Target, cfg BreakerConfig, clk clock.Clock, m BreakerMetrics) target.Target {
	if cfg.Failures <= 0 {
		return next
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = 30 * time.Second
	}
	return &Breakers{next: next, cfg: cfg, clk: clk, m: m, hosts: map[string]*breaker{}}
}

// Fire implements target.Target.
func (b *Breakers) Fire(ctx context.Context, req target.Request) target.Result {
	host := target.Host(req.Firing)
	if host == "" {
		return b.next.Fire(ctx, req)
	}
	if err := b.allow(host); err != nil {
		if b.m.Rejected != nil {
			b.m.Rejected()
		}
		return target.Failed(target.ClassCircuitOpen, false, err)
	}
	res := b.next.Fire(ctx, req)
	b.report(host, res)
	return res
}

// State reports host's breaker state (tests, debugging).
func (b *Breakers) State(host string) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br := b.hosts[host]; br != nil {
		return br.state
	}
	return Closed
}

func (b *Breakers) allow(host string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.hosts[host]
	if br == nil {
		return nil
	}
	switch br.state {
	case Open:
		if b.clk.Now().Sub(br.openedAt) < b.cfg.Cooldown {
			return fmt.Errorf("hostguard: circuit open for %s after %d consecutive failures (probe at %s)",
				host, br.failures, br.openedAt.Add(b.cfg.Cooldown).UTC().Format(time.RFC3339))
		}
		b.transition(br, HalfOpen)
		br.probing = true
		return nil
	case HalfOpen:
		if br.probing {
			return fmt.Errorf("hostguard: circuit half-open for %s, a probe is in flight", host)
		}
		br.probing = true
		return nil
	default:
		return nil
	}
}

func (b *Breakers) report(host string, res target.Result) {
	failed := Unhealthy(res)
	neutral := !res.OK && !failed
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.hosts[host]
	if br == nil {
		if !failed {
			return // the common case: a healthy host needs no state
		}
		br = &breaker{}
		b.hosts[host] = br
	}
	wasProbe := br.probing
	br.probing = false
	switch {
	case failed:
		br.failures++
		if br.state == HalfOpen || (br.state == Closed && br.failures >= b.cfg.Failures) {
			br.openedAt = b.clk.Now()
			b.transition(br, Open)
		}
	case neutral:
		// Says nothing about the host's health; a half-open probe that
		// ended so lets the next attempt probe.
	default:
		if br.state != Closed || wasProbe {
			b.transition(br, Closed)
		}
		delete(b.hosts, host)
	}
}

// Unhealthy reports whether res counts against its host's breaker: a
// connection error, a timeout or a 5xx. Any other failure is neutral; a
// success resets the count.
func Unhealthy(res target.Result) bool {
	return !res.OK && (res.Class == target.ClassConnection || res.Class == target.ClassTimeout || res.Class == target.ClassHTTP5xx)
}

func (b *Breakers) transition(br *breaker, to State) {
	from := br.state
	if from == to {
		return
	}
	br.state = to
	if b.m.Transition != nil {
		b.m.Transition(from, to)
	}
}
