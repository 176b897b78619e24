// Package limits holds the fire stage's limits across the whole cluster,
// in Redis, so that a second worker does not double them: each tenant's
// firing rate (its quota), each target host's request rate and its
// attempts in flight, and each host's circuit breaker.
//
// At the instant, a firing that has passed its other checks is admitted
// by one script call (Guard.Admit, the executor's Limiter), which in this
// order
//
//  1. reserves the firing's turn in its tenant's rate: a firing over the
//     quota gets the next free turn, waits for it in the fire holder (not
//     in an executor) and comes back — delayed, never dropped, and in
//     order, while other tenants' firings keep their timing;
//  2. reserves its turn in its host's rate the same way (the host's turn
//     is taken only once the tenant's has come, so a tenant waiting for
//     minutes does not hold the host's turns and delay other tenants);
//  3. takes a slot among the host's attempts in flight (a sorted set of
//     attempts, each expiring with its attempt timeout plus a grace, so a
//     crashed worker's slots come back); with none free the firing waits
//     a little and asks again;
//  4. reads the host's breaker: open, the attempt fails fast with class
//     circuit_open; after the cool-down one attempt, anywhere in the
//     cluster, is the probe.
//
// Turns are reservations in a generic cell-rate algorithm (a theoretical
// arrival time per key), so a firing that waits is not charged again when
// it comes back (work.Item.Admitted), and waiting firings do not retry in
// a herd. After the attempt, the target decorator (Guard.Target) frees the
// slot and reports the attempt's health to the shared breaker, in one
// call, made only when there is something to say (a slot, a failure, a
// success after failures, a probe's end).
//
// Firings limited by nothing here cost nothing. Breakers alone (the
// default) cost a call per host every BreakerSync at most: a host's state
// read from Redis is trusted that long, so one worker's opening a breaker
// reaches the others within it; failures are reported as they happen.
//
// When Redis does not answer (a call fails or takes over Timeout), the
// worker falls back to per-process limits: the same rates and caps,
// counted in this process alone (so N workers may together exceed them
// N-fold while Redis is away), and its own breakers. Every Fallback one
// attempt, after its request, pings Redis; the limits go back to Redis
// once it answers. Only the firings admitted as the outage began wait (up
// to Timeout) on Redis, and no firing is lost.
package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/domain/gcra"
	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Outcomes a held-back firing is counted as (the worker's firings
// counter).
const (
	OutcomeTenantLimited      = "tenant_limited"
	OutcomeRateLimited        = hostguard.OutcomeRateLimited
	OutcomeConcurrencyLimited = "concurrency_limited"
)

// Bits of work.Item.Admitted.
const (
	admittedTenant uint8 = 1 << iota
	admittedHost
)

// Config tunes the limits. A zero rate, cap or failure count turns that
// limit off.
type Config struct {
	// Prefix starts every key (the worker's --redis-key-prefix).
	Prefix string
	// HostRate is requests a second per target host, in bursts of up to
	// HostBurst.
	HostRate  float64
	HostBurst int
	// HostConcurrency bounds one host's attempts in flight.
	HostConcurrency int
	// Breaker opens a host's breaker after Failures consecutive failed
	// attempts (connection, timeout, 5xx) anywhere in the cluster.
	Breaker hostguard.BreakerConfig
	// Tenants are the tenants' quotas; their Firing rates are enforced.
	Tenants *quotas.Tenants
	// Timeout bounds one Redis call (default 100 ms).
	Timeout time.Duration
	// Fallback is how long the per-process limits serve after a Redis
	// call failed, before Redis is asked again (default 1 s).
	Fallback time.Duration
	// BreakerSync is how long a host's breaker state read from Redis is
	// trusted when nothing else needs a call (default 250 ms).
	BreakerSync time.Duration
	// AttemptTimeout is a firing's attempt timeout when its envelope has
	// none (the HTTP target's default, 30 s); SlotGrace is added to it:
	// a slot not freed by then (its worker died) comes back (default
	// 10 s).
	AttemptTimeout time.Duration
	SlotGrace      time.Duration
}

// Metrics observes the limits; nil fields are skipped.
type Metrics struct {
	// Transition is called on each breaker state change this worker
	// made (in Redis, or in its per-process breakers during an outage).
	Transition func(from, to hostguard.State)
	// Rejected counts attempts failed fast by an open breaker.
	Rejected func()
	// Fallback counts Redis calls that failed (the per-process limits
	// serve for a while).
	Fallback func()
}

// Guard is the limits: Admit for the executor, Target for the target.
type Guard struct {
	rdb    redis.Cmdable
	cfg    Config
	clk    clock.Clock
	m      Metrics
	logger *slog.Logger

	hostRate  gcra.Rate // the host rate (zero: none)
	breakerOn bool

	// wasDown: a call failed; the per-process limits serve until a probe
	// (made after an attempt, off the firing path, once downUntil has
	// passed: Unix ns) finds Redis answering.
	downUntil atomic.Int64
	wasDown   atomic.Bool
	probing   atomic.Bool

	mu       sync.Mutex
	verdicts map[string]verdict  // by attempt (member): what Admit decided, for Fire
	states   map[string]seenHost // by host: the breaker last read
	// refreshing: a firing of the host is reading its breaker again.
	refreshing map[string]bool
	tenants    *gcra.Limiter  // per-process tenant rates (fallback)
	slots      map[string]int // per-process slots in flight, by host (fallback)
	sweepAt    time.Time

	// The per-process limits, for a Redis outage.
	hostLocal *hostguard.Limiter
	next      target.Target
	local     target.Target // next behind this process's breakers
}

// verdict is what Admit decided for one attempt.
type verdict struct {
	host  string
	local bool  // decided by the per-process limits
	slot  bool  // holds a slot (in Redis, or this process's when local)
	probe bool  // the shared breaker's probe
	dirty bool  // the shared breaker counts failures: a success resets them
	deny  error // circuit open: fail fast
	at    time.Time
}

// seenHost is a host's breaker as last read from Redis.
type seenHost struct {
	open    bool
	dirty   bool
	retryAt time.Time // open: when a probe may go
	fails   int64
	until   time.Time // trusted until
}

// New returns the limits; next is the target attempts go to (Target
// decorates it). rdb is the lease store's Redis; nil: every limit is
// this process's alone.
func New(rdb redis.Cmdable, next target.Target, cfg Config, clk clock.Clock, m Metrics, logger *slog.Logger) *Guard {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.Fallback <= 0 {
		cfg.Fallback = time.Second
	}
	if cfg.BreakerSync <= 0 {
		cfg.BreakerSync = 250 * time.Millisecond
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 30 * time.Second
	}
	if cfg.SlotGrace <= 0 {
		cfg.SlotGrace = 10 * time.Second
	}
	if cfg.Breaker.Failures > 0 && cfg.Breaker.Cooldown <= 0 {
		cfg.Breaker.Cooldown = 30 * time.Second
	}
	g := &Guard{rdb: rdb, cfg: cfg, clk: clk, m: m, logger: logger, next: next,
		verdicts: map[string]verdict{}, states: map[string]seenHost{}, refreshing: map[string]bool{}, tenants: gcra.New(), slots: map[string]int{},
		hostLocal: hostguard.NewLimiter(cfg.HostRate, cfg.HostBurst), breakerOn: cfg.Breaker.Failures > 0}
	g.hostRate = gcra.PerSecond(cfg.HostRate, cfg.HostBurst)
	g.local = hostguard.NewBreakers(next, cfg.Breaker, clk, hostguard.BreakerMetrics{Transition: m.Transition, Rejected: m.Rejected})
	return g
}

// Keys of the limits, all under one hash tag, so every call is one
// Redis Cluster slot (tested on the local cluster: the *AcrossWorkers
// tests' redis-cluster cases). That puts every limit on one shard: a
// limited firing's admit and report are that shard's load, however many
// shards the cluster has (docs/capacity.md).
func (g *Guard) tenantKey(t string) string  { return g.cfg.Prefix + "{limits}:tenant:" + t }
func (g *Guard) hostKey(h string) string    { return g.cfg.Prefix + "{limits}:host:" + h }
func (g *Guard) breakerKey(h string) string { return g.cfg.Prefix + "{limits}:breaker:" + h }
func (g *Guard) slotsKey(h string) string   { return g.cfg.Prefix + "{limits}:slots:" + h }

// Admit decides whether the firing may go to its target now: 0 and no
// outcome when it may (an open breaker then fails it fast, in Fire), or
// how long it waits first and the outcome it counts as.
func (g *Guard) Admit(ctx context.Context, it *work.Item, now time.Time) (time.Duration, string) {
	wait, outcome := g.admit(ctx, it, now)
	if wait > 0 {
		// Held back: it fires late rather than failing, so the misfire
		// judge leaves it alone from now on (work.Item.LateByPolicy).
		it.LimitWaited = true
	}
	return wait, outcome
}

func (g *Guard) admit(ctx context.Context, it *work.Item, now time.Time) (time.Duration, string) {
	f := it.Firing
	host := target.Host(f)
	tq := g.cfg.Tenants.For(f.GetTenant()).Firing
	needTenant := tq.Rate > 0 && it.Admitted&admittedTenant == 0
	needHost := host != "" && g.hostRate.Limits() && it.Admitted&admittedHost == 0
	needSlot := host != "" && g.cfg.HostConcurrency > 0
	needBreaker := host != "" && g.breakerOn
	if !needTenant && !needHost && !needSlot && !needBreaker {
		return 0, ""
	}
	m := hostguard.Member(f)
	if !needTenant && !needHost && !needSlot {
		// The breaker alone: its state read lately will do; once that is
		// old, one firing of the host reads it again while the others go
		// by the closed state last read, so a host costs one call per
		// BreakerSync whatever the executors' concurrency.
		if v, ok := g.seen(host, now); ok {
			g.keep(m, v, now)
			return 0, ""
		}
		v, ok, refresh := g.lastClosed(host)
		if ok {
			g.keep(m, v, now)
			return 0, ""
		}
		if refresh {
			defer g.refreshed(host)
		}
	}
	if g.rdb == nil || g.wasDown.Load() {
		return g.admitLocal(it, m, host, tq, needTenant, needHost, needSlot, now)
	}
	args := []any{now.UnixMicro(), 0, 0, 0, 0, 0, 0, m, 0, g.breakerTTL().Milliseconds()}
	if needTenant {
		r := gcra.PerSecond(tq.Rate, tq.Burst)
		args[1], args[2] = r.Interval, r.Burst
	}
	if needHost {
		args[3], args[4] = g.hostRate.Interval, g.hostRate.Burst
	}
	if needBreaker {
		args[5] = g.cfg.Breaker.Cooldown.Microseconds()
	}
	if needSlot {
		args[6] = g.cfg.HostConcurrency
	}
	args[8] = now.Add(g.slotTTL(f)).UnixMicro()
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	res, err := admitScript.Run(cctx, g.rdb, []string{g.tenantKey(f.GetTenant()), g.hostKey(host), g.breakerKey(host), g.slotsKey(host)}, args...).Int64Slice()
	cancel()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("limits: admit script answered %d values", len(res))
	}
	if err != nil {
		g.failed(now, err)
		return g.admitLocal(it, m, host, tq, needTenant, needHost, needSlot, now)
	}
	g.answered()
	// A turn reserved is the firing's, whether it is now or later: it
	// is not charged again when it comes back.
	code := res[0]
	if needTenant {
		it.Admitted |= admittedTenant
	}
	if needHost && code != 1 {
		it.Admitted |= admittedHost
	}
	switch code {
	case 1:
		return time.Duration(res[1]) * time.Microsecond, OutcomeTenantLimited
	case 2:
		return time.Duration(res[1]) * time.Microsecond, OutcomeRateLimited
	case 3:
		return g.slotWait(it), OutcomeConcurrencyLimited
	case 4:
		retryAt := time.UnixMicro(res[2])
		g.mu.Lock()
		g.states[host] = seenHost{open: true, retryAt: retryAt, fails: res[1], until: now.Add(g.cfg.BreakerSync)}
		g.mu.Unlock()
		g.keep(m, verdict{host: host, deny: openError(host, res[1], res[3] == int64(hostguard.HalfOpen), retryAt)}, now)
		return 0, ""
	}
	it.AdmitWaits = 0
	v := verdict{host: host, slot: needSlot, probe: res[1] == 2, dirty: res[1] == 1}
	if needBreaker {
		if v.probe && res[3] == int64(hostguard.Open) {
			g.transition(hostguard.Open, hostguard.HalfOpen)
		}
		g.mu.Lock()
		if v.probe {
			delete(g.states, host) // half-open: ask again
		} else {
			g.states[host] = seenHost{dirty: v.dirty, until: now.Add(g.cfg.BreakerSync)}
		}
		g.mu.Unlock()
	}
	g.keep(m, v, now)
	return 0, ""
}

func openError(host string, fails int64, halfOpen bool, retryAt time.Time) error {
	if halfOpen {
		return fmt.Errorf("limits: circuit half-open for %s, a probe is in flight (cluster-wide)", host)
	}
	return fmt.Errorf("limits: circuit open for %s after %d consecutive failures across the cluster (probe at %s)",
		host, fails, retryAt.UTC().Format(time.RFC3339))
}

// seen is the verdict a host's breaker state read lately gives, when it is
// recent enough.
func (g *Guard) seen(host string, now time.Time) (verdict, bool) {
	g.mu.Lock()
	s, ok := g.states[host]
	g.mu.Unlock()
	if !ok || !now.Before(s.until) {
		return verdict{}, false
	}
	if s.open {
		if !now.Before(s.retryAt) {
			return verdict{}, false // a probe may go: Redis decides who
		}
		return verdict{host: host, deny: openError(host, s.fails, false, s.retryAt)}, true
	}
	return verdict{host: host, dirty: s.dirty}, true
}

// lastClosed is the verdict of a host's closed breaker as last read, for a
// firing whose read is old while another firing of the host reads it
// again (ok). Otherwise the caller reads it; refresh says the caller is
// the one firing of the host doing so, and must call refreshed after.
func (g *Guard) lastClosed(host string) (v verdict, ok, refresh bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, known := g.states[host]
	if g.refreshing[host] {
		if known && !s.open {
			return verdict{host: host, dirty: s.dirty}, true, false
		}
		return verdict{}, false, false
	}
	g.refreshing[host] = true
	return verdict{}, false, true
}

// refreshed ends a host's read begun by lastClosed.
func (g *Guard) refreshed(host string) {
	g.mu.Lock()
	delete(g.refreshing, host)
	g.mu.Unlock()
}

// slotWait is how long a firing waits for a slot: 10 ms, doubling with each
// wait up to 320 ms, so many waiting firings do not poll Redis in a herd.
func (g *Guard) slotWait(it *work.Item) time.Duration {
	w := 10 * time.Millisecond << min(it.AdmitWaits, 5)
	if it.AdmitWaits < 255 {
		it.AdmitWaits++
	}
	return w
}

func (g *Guard) slotTTL(f *sundialv1.Firing) time.Duration {
	t := g.cfg.AttemptTimeout
	if d := f.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		t = d.AsDuration()
	}
	return t + g.cfg.SlotGrace
}

// breakerTTL is how long an idle host's breaker state is kept.
func (g *Guard) breakerTTL() time.Duration { return max(10*g.cfg.Breaker.Cooldown, 10*time.Minute) }

// admitLocal is Admit by the per-process limits (Redis did not answer).
func (g *Guard) admitLocal(it *work.Item, m, host string, tq quotas.FiringRate, needTenant, needHost, needSlot bool, now time.Time) (time.Duration, string) {
	if needTenant {
		if w := g.tenants.Allow(it.Firing.GetTenant(), gcra.PerSecond(tq.Rate, tq.Burst), now); w > 0 {
			return max(w, time.Millisecond), OutcomeTenantLimited
		}
		it.Admitted |= admittedTenant
	}
	if needHost {
		if w := g.hostLocal.Reserve(host, now); w > 0 {
			return w, OutcomeRateLimited
		}
		it.Admitted |= admittedHost
	}
	if needSlot {
		g.mu.Lock()
		prev, had := g.verdicts[m]
		held := had && prev.local && prev.slot
		full := !held && g.slots[host] >= g.cfg.HostConcurrency
		switch {
		case held:
			delete(g.verdicts, m) // admitted before and never fired: its slot passes on
		case !full:
			g.slots[host]++
		}
		g.mu.Unlock()
		if full {
			return g.slotWait(it), OutcomeConcurrencyLimited
		}
	}
	it.AdmitWaits = 0
	g.keep(m, verdict{host: host, local: true, slot: needSlot}, now)
	return 0, ""
}

// keep stores an attempt's verdict for Fire, forgetting, once a minute,
// those older than ten minutes (attempts that never reached Fire: their
// lease was lost after they were admitted).
func (g *Guard) keep(m string, v verdict, now time.Time) {
	v.at = now
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev, ok := g.verdicts[m]; ok && prev.local && prev.slot {
		g.slots[prev.host]-- // admitted locally before and never fired: the new admission holds its own
	}
	g.verdicts[m] = v
	if now.Before(g.sweepAt) {
		return
	}
	g.sweepAt = now.Add(time.Minute)
	for k, old := range g.verdicts {
		if now.Sub(old.at) > 10*time.Minute {
			if old.local && old.slot {
				g.slots[old.host]--
			}
			delete(g.verdicts, k)
		}
	}
	for h, s := range g.states {
		if !now.Before(s.until) {
			delete(g.states, h)
		}
	}
}

func (g *Guard) take(m string) (verdict, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.verdicts[m]
	if ok {
		delete(g.verdicts, m)
	}
	return v, ok
}

// probe asks Redis whether it answers again, when the per-process limits
// have served for Fallback; one caller at a time, after its attempt, so no
// firing waits for it.
func (g *Guard) probe(ctx context.Context) {
	if !g.wasDown.Load() || g.clk.Now().UnixNano() < g.downUntil.Load() || !g.probing.CompareAndSwap(false, true) {
		return
	}
	defer g.probing.Store(false)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
	err := g.rdb.Ping(cctx).Err()
	cancel()
	if err != nil {
		g.failed(g.clk.Now(), err)
		return
	}
	g.answered()
}

// failed notes a Redis call that failed: the per-process limits serve
// until a probe, Fallback later at the earliest, finds Redis answering.
func (g *Guard) failed(now time.Time, err error) {
	g.downUntil.Store(now.Add(g.cfg.Fallback).UnixNano())
	if g.m.Fallback != nil {
		g.m.Fallback()
	}
	if !g.wasDown.Swap(true) {
		g.logger.Warn("Redis did not answer the limits; per-process limits serve until it does (the cluster's rates may be exceeded meanwhile)",
			"err", err, "retry_in", g.cfg.Fallback)
	}
}

func (g *Guard) answered() {
	if g.wasDown.Swap(false) {
		g.logger.Info("Redis answers the limits again; they hold across the cluster")
	}
}

func (g *Guard) transition(from, to hostguard.State) {
	if g.m.Transition != nil {
		g.m.Transition(from, to)
	}
	g.logger.Info("circuit breaker state changed (cluster-wide)", "from", from.String(), "to", to.String())
}

// Target is the target behind the limits: an attempt whose host's breaker
// is open fails fast, and after each attempt its slot is freed and its
// health reported.
func (g *Guard) Target() target.Target { return guarded{g} }

type guarded struct{ g *Guard }

// Fire implements target.Target.
func (t guarded) Fire(ctx context.Context, req target.Request) target.Result {
	g := t.g
	if g.rdb != nil {
		defer g.probe(ctx)
	}
	host := target.Host(req.Firing)
	if host == "" {
		return g.next.Fire(ctx, req)
	}
	m := hostguard.Member(req.Firing)
	v, ok := g.take(m)
	if !ok || v.local {
		// Not admitted here, or admitted while Redis was away: this
		// process's breakers.
		res := g.local.Fire(ctx, req)
		if ok && v.slot {
			g.mu.Lock()
			g.slots[host]--
			g.mu.Unlock()
		}
		return res
	}
	if v.deny != nil {
		if g.m.Rejected != nil {
			g.m.Rejected()
		}
		return target.Failed(target.ClassCircuitOpen, false, v.deny)
	}
	res := g.next.Fire(ctx, req)
	g.report(ctx, host, m, v, res)
	return res
}

// report frees the attempt's slot and tells the shared breaker how the
// host did, in one call, when there is anything to say.
func (g *Guard) report(ctx context.Context, host, m string, v verdict, res target.Result) {
	outcome := hostguard.OutcomeOf(res)
	breaker := g.breakerOn && (outcome == hostguard.Failure || v.probe || (outcome == hostguard.Success && v.dirty))
	if !v.slot && !breaker {
		return
	}
	rel, br := 0, 0
	if v.slot {
		rel = 1
	}
	if breaker {
		br = 1
	}
	now := g.clk.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
	out, err := reportScript.Run(cctx, g.rdb, []string{g.breakerKey(host), g.slotsKey(host)},
		now.UnixMicro(), int(outcome), m, g.cfg.Breaker.Failures, g.breakerTTL().Milliseconds(), rel, br).Int64Slice()
	cancel()
	if err == nil && len(out) != 3 {
		err = errors.New("limits: report script answered badly")
	}
	if err != nil {
		// The slot comes back with its expiry; the breaker misses one
		// report.
		g.failed(now, err)
		return
	}
	g.answered()
	if !breaker {
		return
	}
	from, to := hostguard.State(out[0]), hostguard.State(out[1])
	if from != to {
		g.transition(from, to)
	}
	g.mu.Lock()
	switch to {
	case hostguard.Open:
		g.states[host] = seenHost{open: true, retryAt: now.Add(g.cfg.Breaker.Cooldown), fails: out[2], until: now.Add(g.cfg.BreakerSync)}
	case hostguard.Closed:
		g.states[host] = seenHost{dirty: outcome == hostguard.Failure, until: now.Add(g.cfg.BreakerSync)}
	default:
		delete(g.states, host)
	}
	g.mu.Unlock()
}

// State is host's shared breaker state as Redis holds it (tests, debugging).
func (g *Guard) State(ctx context.Context, host string) (hostguard.State, error) {
	s, err := g.rdb.HGet(ctx, g.breakerKey(host), "s").Int()
	if errors.Is(err, redis.Nil) {
		return hostguard.Closed, nil
	}
	return hostguard.State(s), err
}
