package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// ErrThrottled is returned by Throttle.Take when a write's turn is further
// off than the caller will wait: Cassandra is taking records more slowly
// than they are offered, and the caller should put them elsewhere
// (ledger_pending) rather than hold them in memory.
var ErrThrottled = errors.New("ledger: write throttled: cassandra is behind")

// ThrottleConfig tunes a Throttle. Rates are in records per second.
type ThrottleConfig struct {
	// Initial is the rate before anything has been observed.
	Initial float64
	// Min is the floor the rate is never cut below: while Cassandra is
	// failing, writes go on at this rate as probes, so its recovery is
	// noticed.
	Min float64
	// Max caps the rate however healthy the writes.
	Max float64
	// Burst is the bucket's depth: the most records one write may take at
	// once (a recorder group), and what an idle writer may send at once.
	Burst int
	// Slow: a write that takes longer than this is congestion, like an
	// error. Above the server's usual latency and below its write timeout
	// (2 s), so a node in long GC pauses is backed away from before it
	// times out.
	Slow time.Duration
	// Increase is added to the rate per Interval of healthy writes during
	// which the rate held writes back.
	Increase float64
	// Decrease multiplies the rate at congestion, in (0, 1).
	Decrease float64
	// Interval is the feedback loop's step: at most one cut and one raise
	// per Interval, so a burst of slow writes that were all sent before the
	// first cut counts once.
	Interval time.Duration
	// Clock paces the bucket and the steps; the real clock when nil.
	Clock clock.Clock
}

// DefaultThrottleConfig suits one worker on the development Cassandra: a
// healthy node takes a few thousand records a second from each worker
// without waiting (Initial is above the herd the platform holds), and a
// failing one is probed with 100 records a second.
var DefaultThrottleConfig = ThrottleConfig{
	Initial: 5000, Min: 100, Max: 50000, Burst: 1000,
	Slow: time.Second, Increase: 500, Decrease: 0.5, Interval: time.Second,
}

// Validate reports every problem, each naming its field.
func (c ThrottleConfig) Validate() error {
	var errs []error
	if c.Min <= 0 {
		errs = append(errs, fmt.Errorf("throttle Min: must be positive, got %g", c.Min))
	}
	if c.Max < c.Min {
		errs = append(errs, fmt.Errorf("throttle Max: must be at least Min (%g), got %g", c.Min, c.Max))
	}
	if c.Initial < c.Min || c.Initial > c.Max {
		errs = append(errs, fmt.Errorf("throttle Initial: must be within [Min, Max] = [%g, %g], got %g", c.Min, c.Max, c.Initial))
	}
	if c.Burst < 1 {
		errs = append(errs, fmt.Errorf("throttle Burst: must be at least 1, got %d", c.Burst))
	}
	if c.Slow <= 0 {
		errs = append(errs, fmt.Errorf("throttle Slow: must be positive, got %s", c.Slow))
	}
	if c.Increase <= 0 {
		errs = append(errs, fmt.Errorf("throttle Increase: must be positive, got %g", c.Increase))
	}
	if c.Decrease <= 0 || c.Decrease >= 1 {
		errs = append(errs, fmt.Errorf("throttle Decrease: must be in (0, 1), got %g", c.Decrease))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("throttle Interval: must be positive, got %s", c.Interval))
	}
	return errors.Join(errs...)
}

// Throttle paces ledger writes by how Cassandra answers them. The pace is a
// token bucket (golang.org/x/time/rate) whose rate is steered by additive
// increase, multiplicative decrease: an error or a write slower than Slow
// halves it (once per Interval), and each Interval of healthy writes that
// the rate held back adds Increase. So the writers send what the node
// absorbs at a healthy latency, a node in trouble (long GC pauses, full
// memtables, timeouts) gets less and less, and after it recovers the rate
// climbs back in steps instead of the whole backlog arriving at once. The
// steering is ours because it is the product: a limiter that only counted
// would let the worker's backlog push the node over, which is what it is
// for.
//
// The rate only rises while it is what holds writes back: a writer below
// its limit learns nothing about the node's capacity, and a rate grown
// during a quiet hour would let the next herd through unpaced.
type Throttle struct {
	cfg ThrottleConfig
	lim *rate.Limiter

	mu        sync.Mutex
	lastCut   time.Time
	lastRaise time.Time
	// limited: a write waited for its turn since the last raise.
	limited bool

	inFlight atomic.Int64
}

// NewThrottle returns a throttle at cfg.Initial, or cfg's problems.
func NewThrottle(cfg ThrottleConfig) (*Throttle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	t := &Throttle{cfg: cfg, lim: rate.NewLimiter(rate.Limit(cfg.Initial), cfg.Burst)}
	// The bucket starts full at the clock's now (rate's own clock is the
	// real one; every call here passes the injected clock's instant).
	t.lim.SetLimitAt(cfg.Clock.Now(), rate.Limit(cfg.Initial))
	return t, nil
}

// Take takes the turn of a write of up to n records (n is capped at
// Burst) and returns how many it may write: all n when maxWait is zero or
// less (it waits as long as ctx allows), else as many as the bucket will
// hold within maxWait, after waiting for them. The caller writes that many
// and puts the rest elsewhere, so the ledger gets its rate and no more,
// and writes go on at that rate — a throttle that refused whole groups
// would, at its floor, stop writing and never see Cassandra recover. When
// not even one record's turn comes within maxWait it takes nothing and
// returns ErrThrottled; ctx's error when ctx ends first. A grant must be
// followed by Done with the same count.
func (t *Throttle) Take(ctx context.Context, n int, maxWait time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n = max(1, min(n, t.cfg.Burst))
	now := t.cfg.Clock.Now()
	if maxWait > 0 {
		n = min(n, int(t.lim.TokensAt(now.Add(maxWait))))
		if n < 1 {
			return 0, fmt.Errorf("%w: not one record's turn within %s at %.0f records/s", ErrThrottled, maxWait, float64(t.lim.Limit()))
		}
	}
	r := t.lim.ReserveN(now, n)
	if !r.OK() {
		return 0, fmt.Errorf("ledger: throttle: %d records exceed the burst of %d", n, t.cfg.Burst)
	}
	delay := r.DelayFrom(now)
	if delay > 0 {
		t.mu.Lock()
		t.limited = true
		t.mu.Unlock()
	}
	if maxWait > 0 && delay > maxWait {
		// Another writer took the tokens between the two looks.
		r.CancelAt(now)
		return 0, fmt.Errorf("%w: %d records would wait %s at %.0f records/s", ErrThrottled, n, delay.Round(time.Millisecond), float64(t.lim.Limit()))
	}
	if delay > 0 {
		tm := t.cfg.Clock.NewTimer(delay)
		select {
		case <-tm.C():
		case <-ctx.Done():
			tm.Stop()
			r.CancelAt(t.cfg.Clock.Now())
			return 0, ctx.Err()
		}
	}
	t.inFlight.Add(int64(n))
	return n, nil
}

// Done reports a write of n records that took took: err is whether the
// ledger failed it (a record refused for good — fenced, invalid — is not a
// failure of the ledger and should be reported as nil).
func (t *Throttle) Done(n int, took time.Duration, err error) {
	n = max(1, min(n, t.cfg.Burst))
	t.inFlight.Add(-int64(n))
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := float64(t.lim.Limit())
	if err != nil || took > t.cfg.Slow {
		if now.Sub(t.lastCut) < t.cfg.Interval {
			return
		}
		t.lastCut, t.lastRaise, t.limited = now, now, false
		t.lim.SetLimitAt(now, rate.Limit(max(t.cfg.Min, cur*t.cfg.Decrease)))
		return
	}
	if !t.limited || now.Sub(t.lastRaise) < t.cfg.Interval || now.Sub(t.lastCut) < t.cfg.Interval {
		return
	}
	t.lastRaise, t.limited = now, false
	t.lim.SetLimitAt(now, rate.Limit(min(t.cfg.Max, cur+t.cfg.Increase)))
}

// Release gives back n granted records that were not written, without
// saying anything about the ledger.
func (t *Throttle) Release(n int) { t.inFlight.Add(-int64(max(1, min(n, t.cfg.Burst)))) }

// Rate is the current allowed rate, records per second.
func (t *Throttle) Rate() float64 { return float64(t.lim.Limit()) }

// InFlight is the records whose turn was taken and whose write is not
// Done.
func (t *Throttle) InFlight() int { return int(t.inFlight.Load()) }
