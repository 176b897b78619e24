// Package gcra is Sundial's one rate-limit algorithm: a generic cell-rate
// algorithm, written twice with the same integer arithmetic — in Go for
// the limits one process counts alone (Limiter), and in Lua for the ones
// held across the cluster in Redis (Lua, which the worker's limits script
// embeds). The api's per-token limit, the worker's per-host and per-tenant
// rates and their fallback while Redis is away all count this way.
//
// A key holds its theoretical arrival time (TAT, Unix µs): the instant its
// rate would be back to idle. A request at now moves it to
// max(TAT, now) + interval and may go at TAT' - burst*interval, now or
// later. Two ways to ask:
//
//   - Reserve, as the cluster script does: the request keeps its turn
//     whether it goes now or later, so it is not charged again when it
//     comes back at its turn;
//   - Allow: a request that would wait is refused and charged nothing, so
//     asking again after the wait it was told goes through.
//
// A key whose TAT has passed is the same as a key never seen, so a
// Limiter forgets those (once a minute) and holds only keys in use.
package gcra

import (
	"sync"
	"time"
)

// Rate is a limit: one request every Interval µs on average, Burst at
// once after being idle.
type Rate struct {
	Interval int64 // µs between two requests; at least 1
	Burst    int64 // at least 1
}

// PerSecond is the Rate of perSecond requests a second in bursts of burst
// (a burst under 1 is 1); the interval is truncated to the µs, at least 1
// µs. A rate of zero or less is the zero Rate, which limits nothing.
func PerSecond(perSecond float64, burst int) Rate {
	if !(perSecond > 0) {
		return Rate{}
	}
	return Rate{Interval: max(int64(1e6/perSecond), 1), Burst: int64(max(burst, 1))}
}

// Limits reports whether r limits anything.
func (r Rate) Limits() bool { return r.Interval > 0 }

// Step is the algorithm: given a key's TAT and the time now (both µs),
// the TAT once the request at now is counted, and how long (µs) the
// request waits for its turn (0: it goes now). Lua is the same arithmetic.
func Step(tat, now int64, r Rate) (next, wait int64) {
	tat = max(tat, now)
	next = tat + r.Interval
	if at := next - r.Burst*r.Interval; at > now {
		return next, at - now
	}
	return next, 0
}

// Lua defines reserve(key, now, T, burst) for a Redis script: Step on the
// TAT stored at key (a decimal string of µs, expiring once idle plus a
// second), always stored back; it returns the wait in µs. Scripts that
// use it pass now, T (Rate.Interval) and burst (Rate.Burst) as numbers.
const Lua = `
local function reserve(key, now, T, burst)
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local nt = tat + T
  redis.call('SET', key, string.format('%d', nt), 'PX', math.floor((nt - now) / 1000) + 1000)
  local at = nt - burst * T
  if at <= now then return 0 end
  return at - now
end
`

// Limiter is a table of keys' TATs, counted in this process alone; each
// call names its key's Rate. It is safe for concurrent use; the zero value
// is not usable (call New).
type Limiter struct {
	mu      sync.Mutex
	tats    map[string]int64
	sweepAt int64
}

// New returns an empty Limiter.
func New() *Limiter { return &Limiter{tats: map[string]int64{}} }

// Reserve counts a request of key at now and returns how long it waits
// for its turn, which is kept either way (the cluster's way). A Rate that
// limits nothing returns 0 and counts nothing.
func (l *Limiter) Reserve(key string, r Rate, now time.Time) time.Duration {
	return l.ask(key, r, now, true)
}

// Allow counts a request of key at now when it may go now and returns 0;
// otherwise it counts nothing and returns how long until it may.
func (l *Limiter) Allow(key string, r Rate, now time.Time) time.Duration {
	return l.ask(key, r, now, false)
}

func (l *Limiter) ask(key string, r Rate, now time.Time, keep bool) time.Duration {
	if !r.Limits() {
		return 0
	}
	us := now.UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(us)
	next, wait := Step(l.tats[key], us, r)
	if wait == 0 || keep {
		l.tats[key] = next
	}
	return time.Duration(wait) * time.Microsecond
}

// sweep forgets, once a minute, the keys whose TAT has passed.
func (l *Limiter) sweep(now int64) {
	if now < l.sweepAt {
		return
	}
	l.sweepAt = now + time.Minute.Microseconds()
	for k, tat := range l.tats {
		if tat <= now {
			delete(l.tats, k)
		}
	}
}

// Len is the number of keys held (tests).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tats)
}
