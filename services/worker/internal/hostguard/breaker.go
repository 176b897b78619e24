package hostguard

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

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
// decorator: each host's Breaker, run in this process. Failures are what a host's health explains: connection
// errors, timeouts and 5xx. A 4xx, a 429 (the rate limit and Retry-After
// handle it), a refused address or a missing secret say nothing about the
// host and neither open nor close a breaker.
type Breakers struct {
	next target.Target
	cfg  BreakerConfig
	clk  clock.Clock
	m    BreakerMetrics

	mu    sync.Mutex
	hosts map[string]*Breaker
}

// NewBreakers decorates next. With cfg.Failures 0 it returns next itself.
func NewBreakers(next target.Target, cfg BreakerConfig, clk clock.Clock, m BreakerMetrics) target.Target {
	if cfg.Failures <= 0 {
		return next
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = 30 * time.Second
	}
	return &Breakers{next: next, cfg: cfg, clk: clk, m: m, hosts: map[string]*Breaker{}}
}

// Fire implements target.Target.
func (b *Breakers) Fire(ctx context.Context, req target.Request) target.Result {
	host := target.Host(req.Firing)
	if host == "" {
		return b.next.Fire(ctx, req)
	}
	attempt := Member(req.Firing)
	if err := b.allow(host, attempt); err != nil {
		if b.m.Rejected != nil {
			b.m.Rejected()
		}
		return target.Failed(target.ClassCircuitOpen, false, err)
	}
	res := b.next.Fire(ctx, req)
	b.report(host, attempt, res)
	return res
}

// Member names an attempt: its execution and attempt number (the
// breaker's probe, and the attempt's slot among its host's in Redis).
func Member(f *sundialv1.Firing) string {
	return f.GetExecutionId() + "/" + strconv.FormatInt(int64(max(f.GetAttempt(), 1)), 10)
}

// State reports host's breaker state (tests, debugging).
func (b *Breakers) State(host string) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br := b.hosts[host]; br != nil {
		return br.State
	}
	return Closed
}

// allow admits attempt to host, or says why it fails fast. A probe here
// has no deadline: the attempt reports in this process, when it ends.
func (b *Breakers) allow(host, attempt string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.hosts[host]
	if br == nil {
		return nil
	}
	a := br.Admit(b.clk.Now().UnixMicro(), attempt, b.cfg.Cooldown.Microseconds(), math.MaxInt64)
	switch {
	case a.Denied && a.Before == HalfOpen:
		return fmt.Errorf("hostguard: circuit half-open for %s, a probe is in flight", host)
	case a.Denied:
		return fmt.Errorf("hostguard: circuit open for %s after %d consecutive failures (probe at %s)",
			host, br.Failures, time.UnixMicro(a.RetryAt).UTC().Format(time.RFC3339))
	}
	b.transition(a.Before, br.State)
	return nil
}

func (b *Breakers) report(host, attempt string, res target.Result) {
	o := OutcomeOf(res)
	b.mu.Lock()
	defer b.mu.Unlock()
	br := b.hosts[host]
	if br == nil {
		if o != Failure {
			return // the common case: a healthy host needs no state
		}
		br = &Breaker{}
		b.hosts[host] = br
	}
	before := br.Report(b.clk.Now().UnixMicro(), attempt, o, int64(b.cfg.Failures))
	b.transition(before, br.State)
	if *br == (Breaker{}) {
		delete(b.hosts, host)
	}
}

// OutcomeOf is how res counts for its host's breaker.
func OutcomeOf(res target.Result) Outcome {
	switch {
	case res.OK:
		return Success
	case Unhealthy(res):
		return Failure
	}
	return Neutral
}

// Unhealthy reports whether res counts against its host's breaker: a
// connection error, a timeout or a 5xx. Any other failure is neutral; a
// success resets the count.
func Unhealthy(res target.Result) bool {
	return !res.OK && (res.Class == target.ClassConnection || res.Class == target.ClassTimeout || res.Class == target.ClassHTTP5xx)
}

func (b *Breakers) transition(from, to State) {
	if from != to && b.m.Transition != nil {
		b.m.Transition(from, to)
	}
}
