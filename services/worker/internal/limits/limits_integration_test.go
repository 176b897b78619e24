//go:build integration

package limits_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/testkit/testinfra"

	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/limits"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// pairFunc makes two guards on two Redis clients under one prefix: two
// workers of one cluster.
type pairFunc func(t *testing.T, cfg limits.Config, clk clock.Clock, next target.Target) (*limits.Guard, *limits.Guard)

// redisWorkers are two workers on the single Redis.
func redisWorkers(t *testing.T, cfg limits.Config, clk clock.Clock, next target.Target) (*limits.Guard, *limits.Guard) {
	t.Helper()
	rdb, prefix := testinfra.Redis(t)
	other := redis.NewClient(&redis.Options{Addr: testinfra.RedisAddr(t)})
	t.Cleanup(func() { _ = other.Close() })
	cfg.Prefix = prefix
	logger := slog.New(slog.DiscardHandler)
	return limits.New(rdb, next, cfg, clk, limits.Metrics{}, logger), limits.New(other, next, cfg, clk, limits.Metrics{}, logger)
}

// clusterWorkers are two workers on the local Redis Cluster
// (deploy/local/cluster/redis.sh): every limit key carries the {limits}
// tag, so each admit and report script runs on one slot.
func clusterWorkers(t *testing.T, cfg limits.Config, clk clock.Clock, next target.Target) (*limits.Guard, *limits.Guard) {
	t.Helper()
	rdb, prefix := testinfra.RedisCluster(t)
	other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testinfra.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = other.Close() })
	cfg.Prefix = prefix
	logger := slog.New(slog.DiscardHandler)
	return limits.New(rdb, next, cfg, clk, limits.Metrics{}, logger), limits.New(other, next, cfg, clk, limits.Metrics{}, logger)
}

// onEachRedis runs check with workers on the single Redis and on the
// Redis Cluster.
func onEachRedis(t *testing.T, check func(t *testing.T, workers pairFunc)) {
	t.Run("redis", func(t *testing.T) { check(t, redisWorkers) })
	t.Run("redis-cluster", func(t *testing.T) { check(t, clusterWorkers) })
}

// Two workers share a host's rate: 200 firings due at once, split between
// them, get turns 50 ms apart (20/s) in one sequence, not two; a firing
// that waited for its turn is not charged again when it comes back.
func TestHostRateHoldsAcrossWorkers(t *testing.T) { onEachRedis(t, checkHostRateHoldsAcrossWorkers) }

func checkHostRateHoldsAcrossWorkers(t *testing.T, workers pairFunc) {
	ctx := context.Background()
	a, b := workers(t, limits.Config{HostRate: 20, HostBurst: 1}, clock.NewFake(t0), &counting{})
	var turns []time.Duration
	var its []*work.Item
	for i := range 200 {
		g := a
		if i%2 == 1 {
			g = b
		}
		it := item("acme", "hooks.example:443", i)
		wait, outcome := g.Admit(ctx, it, t0)
		if wait > 0 && outcome != limits.OutcomeRateLimited {
			t.Fatalf("firing %d waits %s as %q", i, wait, outcome)
		}
		turns = append(turns, wait)
		its = append(its, it)
	}
	slices.Sort(turns)
	for i := 1; i < len(turns); i++ {
		if d := turns[i] - turns[i-1]; d != 50*time.Millisecond {
			t.Fatalf("turns %d and %d are %s apart, want 50ms (one rate for both workers)", i-1, i, d)
		}
	}
	if last := turns[len(turns)-1]; last != 199*50*time.Millisecond {
		t.Fatalf("the 200th turn is %s away, want 9.95s: the two workers together stay at 20/s", last)
	}
	// Back at its turn, a firing goes at once, and is not charged again:
	// the first turn after the 200 reserved ones is still free.
	if wait, _ := b.Admit(ctx, its[100], t0.Add(5*time.Second)); wait != 0 {
		t.Fatalf("a firing back at its turn waits %s more", wait)
	}
	if wait, _ := a.Admit(ctx, item("acme", "hooks.example:443", 200), t0); wait != 200*50*time.Millisecond {
		t.Fatalf("the next firing waits %s, want 10s (the firing that came back took no second turn)", wait)
	}
	// Another host has its own rate.
	if wait, _ := a.Admit(ctx, item("acme", "other.example", 0), t0); wait != 0 {
		t.Fatalf("another host waits %s", wait)
	}
}

// The concurrency cap holds across workers: with a cap of 3, three of ten
// attempts are admitted whichever worker asks; an attempt that ends frees
// its slot for another, and a slot whose worker died comes back once its
// attempt timeout and grace have passed.
func TestHostConcurrencyHoldsAcrossWorkers(t *testing.T) {
	onEachRedis(t, checkHostConcurrencyHoldsAcrossWorkers)
}

func checkHostConcurrencyHoldsAcrossWorkers(t *testing.T, workers pairFunc) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	next := &counting{}
	a, b := workers(t, limits.Config{HostConcurrency: 3, AttemptTimeout: time.Second, SlotGrace: time.Second}, clk, next)
	var admitted []*work.Item
	var waiting []*work.Item
	for i := range 10 {
		g := a
		if i%2 == 1 {
			g = b
		}
		it := item("acme", "slow.example", i)
		switch wait, outcome := g.Admit(ctx, it, t0); {
		case wait == 0:
			admitted = append(admitted, it)
		case outcome == limits.OutcomeConcurrencyLimited:
			waiting = append(waiting, it)
		default:
			t.Fatalf("firing %d: wait %s outcome %q", i, wait, outcome)
		}
	}
	if len(admitted) != 3 {
		t.Fatalf("%d admitted across two workers, want the cap of 3", len(admitted))
	}
	// The first admitted (by a) ends on a's target: its slot is free.
	if res := a.Target().Fire(ctx, target.Request{Firing: admitted[0].Firing}); !res.OK {
		t.Fatalf("fire: %+v", res)
	}
	if wait, _ := b.Admit(ctx, waiting[0], t0); wait != 0 {
		t.Fatalf("after one attempt ended, a waiting firing still waits %s", wait)
	}
	if wait, _ := b.Admit(ctx, waiting[1], t0); wait == 0 {
		t.Fatal("a fourth attempt was admitted")
	}
	// The waits back off: 10 ms, 20 ms, 40 ms…
	fresh := item("acme", "slow.example", 99)
	for i, want := range []time.Duration{10, 20, 40, 80, 160, 320, 320} {
		if w, _ := b.Admit(ctx, fresh, t0); w != want*time.Millisecond {
			t.Fatalf("wait %d for a slot %s, want %dms", i+1, w, want)
		}
	}
	// Nobody frees the three slots (their worker died): they expire with
	// the attempt timeout (1 s) and the grace (1 s).
	later := t0.Add(2*time.Second + time.Millisecond)
	n := 0
	for _, it := range waiting[1:] {
		if wait, _ := a.Admit(ctx, it, later); wait == 0 {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d admitted after the dead worker's slots expired, want 3", n)
	}
}

// The breaker is shared: failures counted by one worker open it for both;
// after the cool-down one probe goes, from either, and its success closes
// the breaker everywhere.
func TestBreakerOpenedByOneWorkerStopsTheOther(t *testing.T) {
	onEachRedis(t, checkBreakerOpenedByOneWorkerStopsTheOther)
}

func checkBreakerOpenedByOneWorkerStopsTheOther(t *testing.T, workers pairFunc) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	next := &counting{}
	next.status.Store(503)
	// BreakerSync 1ns: every admission asks Redis (the cache is tested
	// below).
	a, b := workers(t, limits.Config{Breaker: hostguard.BreakerConfig{Failures: 3, Cooldown: 5 * time.Second}, BreakerSync: time.Nanosecond}, clk, next)
	fire := func(g *limits.Guard, it *work.Item) target.Result {
		t.Helper()
		if wait, outcome := g.Admit(ctx, it, clk.Now()); wait != 0 {
			t.Fatalf("breaker-only admission waits %s (%s)", wait, outcome)
		}
		return g.Target().Fire(ctx, target.Request{Firing: it.Firing})
	}
	host := "down.example"
	for i := range 3 {
		g := a
		if i == 1 {
			g = b
		}
		if res := fire(g, item("acme", host, i)); res.Class != target.ClassHTTP5xx {
			t.Fatalf("attempt %d: %+v", i, res)
		}
	}
	if s, err := a.State(ctx, host); err != nil || s != hostguard.Open {
		t.Fatalf("after 3 failures across two workers the breaker is %v (%v)", s, err)
	}
	calls := next.calls.Load()
	clk.Advance(time.Second)
	res := fire(b, item("acme", host, 10))
	if res.Class != target.ClassCircuitOpen || next.calls.Load() != calls {
		t.Fatalf("the other worker called an open host: %+v", res)
	}
	// After the cool-down: one probe, from b; a fails fast meanwhile.
	clk.Advance(5 * time.Second)
	next.status.Store(200)
	probe := item("acme", host, 11)
	if wait, _ := b.Admit(ctx, probe, clk.Now()); wait != 0 {
		t.Fatal("probe waits")
	}
	if s, _ := a.State(ctx, host); s != hostguard.HalfOpen {
		t.Fatalf("state %v during the probe, want half_open", s)
	}
	if res := fire(a, item("acme", host, 12)); res.Class != target.ClassCircuitOpen {
		t.Fatalf("a second probe went: %+v", res)
	}
	if res := b.Target().Fire(ctx, target.Request{Firing: probe.Firing}); !res.OK {
		t.Fatalf("probe: %+v", res)
	}
	if s, _ := a.State(ctx, host); s != hostguard.Closed {
		t.Fatalf("state %v after the probe succeeded", s)
	}
	clk.Advance(time.Millisecond) // past a's view of the probe
	if res := fire(a, item("acme", host, 13)); !res.OK {
		t.Fatalf("after the probe closed the breaker: %+v", res)
	}
}

// With the default --breaker-sync, a host's breaker read from Redis is
// trusted for a while: a worker sees another's opening within it, and
// admits healthy hosts' firings without a call.
func TestBreakerStateSeenWithinTheSync(t *testing.T) {
	onEachRedis(t, checkBreakerStateSeenWithinTheSync)
}

func checkBreakerStateSeenWithinTheSync(t *testing.T, workers pairFunc) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	next := &counting{}
	a, b := workers(t, limits.Config{Breaker: hostguard.BreakerConfig{Failures: 1, Cooldown: time.Minute}, BreakerSync: 250 * time.Millisecond}, clk, next)
	host := "flaky.example"
	it := item("acme", host, 0)
	b.Admit(ctx, it, clk.Now()) // b reads: closed
	b.Target().Fire(ctx, target.Request{Firing: it.Firing})
	next.status.Store(503)
	it = item("acme", host, 1)
	a.Admit(ctx, it, clk.Now())
	if res := a.Target().Fire(ctx, target.Request{Firing: it.Firing}); res.Class != target.ClassHTTP5xx {
		t.Fatalf("%+v", res)
	}
	clk.Advance(300 * time.Millisecond)
	it = item("acme", host, 2)
	b.Admit(ctx, it, clk.Now())
	if res := b.Target().Fire(ctx, target.Request{Firing: it.Firing}); res.Class != target.ClassCircuitOpen {
		t.Fatalf("past the sync, b still calls the host a opened the breaker of: %+v", res)
	}
}

// A tenant's quota is shared by the workers, and a tenant over it is
// delayed in order while another tenant is not charged for it.
func TestTenantQuotaAcrossWorkers(t *testing.T) { onEachRedis(t, checkTenantQuotaAcrossWorkers) }

func checkTenantQuotaAcrossWorkers(t *testing.T, workers pairFunc) {
	ctx := context.Background()
	rates, err := quotas.Resolve(quotas.Limits{}, quotas.File{Tenants: map[string]quotas.Overrides{
		"flood": {FiringRate: ptr(100.0), FiringBurst: ptr(10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := workers(t, limits.Config{Tenants: rates}, clock.NewFake(t0), &counting{})
	var last time.Duration
	for i := range 1000 {
		g := a
		if i%2 == 1 {
			g = b
		}
		wait, outcome := g.Admit(ctx, item("flood", "x.example", i), t0)
		if i < 10 && wait != 0 {
			t.Fatalf("firing %d of the burst waits %s", i, wait)
		}
		if i >= 10 && (wait != time.Duration(i-9)*10*time.Millisecond || outcome != limits.OutcomeTenantLimited) {
			t.Fatalf("firing %d waits %s (%s), want its turn %s", i, wait, outcome, time.Duration(i-9)*10*time.Millisecond)
		}
		last = wait
	}
	if last != 9900*time.Millisecond {
		t.Fatalf("last turn %s", last)
	}
	for i := range 50 {
		if wait, _ := b.Admit(ctx, item("quiet", "x.example", i), t0); wait != 0 {
			t.Fatalf("another tenant's firing %d waits %s behind the flood", i, wait)
		}
	}
}

// Redis unreachable: the limits fall back to this process's, at once
// after the first failed call, and nothing is lost or held for Redis.
func TestRedisDownFallsBackToPerProcessLimits(t *testing.T) {
	ctx := context.Background()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	fallbacks := 0
	next := &counting{}
	g := limits.New(dead, next, limits.Config{HostRate: 10, HostBurst: 2, HostConcurrency: 1, Breaker: hostguard.BreakerConfig{Failures: 2, Cooldown: time.Minute}},
		clock.NewFake(t0), limits.Metrics{Fallback: func() { fallbacks++ }}, slog.New(slog.DiscardHandler))
	it := item("acme", "h.example", 0)
	if wait, _ := g.Admit(ctx, it, t0); wait != 0 {
		t.Fatalf("first firing waits %s with Redis down", wait)
	}
	// The per-process cap of one holds.
	second := item("acme", "h.example", 1)
	if wait, outcome := g.Admit(ctx, second, t0); outcome != limits.OutcomeConcurrencyLimited || wait == 0 {
		t.Fatalf("second firing: %s %q", wait, outcome)
	}
	if res := g.Target().Fire(ctx, target.Request{Firing: it.Firing}); !res.OK {
		t.Fatalf("%+v", res)
	}
	if wait, _ := g.Admit(ctx, second, t0); wait != 0 {
		t.Fatal("slot not freed locally")
	}
	// The per-process breaker opens after two failures.
	next.status.Store(503)
	for i := 2; i < 5; i++ {
		x := item("acme", "b.example", i)
		g.Admit(ctx, x, t0)
		g.Target().Fire(ctx, target.Request{Firing: x.Firing})
	}
	if next.calls.Load() != 3 {
		t.Fatalf("%d calls, want 1 + 2 before the local breaker opened", next.calls.Load())
	}
	if fallbacks != 1 {
		t.Fatalf("%d Redis calls tried, want 1 (then the fallback serves for --limits-fallback)", fallbacks)
	}
}

// BenchmarkAdmit is the cost of the limits' calls against the test
// Redis: "admit" is one admission at the instant with every limit but the
// concurrency cap (tenant quota, host rate, breaker: one script call; a
// healthy attempt then needs no report), "admit+release" adds the cap
// (the slot is freed after the attempt: a second call), "ping" is a bare
// round trip for comparison.
func BenchmarkAdmit(b *testing.B) {
	rates, _ := quotas.Resolve(quotas.Limits{Firing: quotas.FiringRate{Rate: 1e9, Burst: 1}}, quotas.File{})
	rdb, prefix := testinfra.Redis(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		cap  int
	}{{"admit", 0}, {"admit+release", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			g := limits.New(rdb, &counting{}, limits.Config{Prefix: prefix, Tenants: rates, HostRate: 1e9, HostBurst: 1, HostConcurrency: bc.cap,
				Breaker: hostguard.BreakerConfig{Failures: 5, Cooldown: time.Second}}, clock.Real{}, limits.Metrics{}, slog.New(slog.DiscardHandler))
			for i := range b.N {
				it := item("acme", "bench.example", i)
				if wait, outcome := g.Admit(ctx, it, time.Now()); wait != 0 {
					b.Fatalf("waits %s (%s)", wait, outcome)
				}
				g.Target().Fire(ctx, target.Request{Firing: it.Firing})
			}
		})
	}
	b.Run("ping", func(b *testing.B) {
		for range b.N {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// After an outage the limits go back to Redis: an attempt made once
// Fallback has passed pings it (after its request) and, Redis answering,
// the next admission is counted in Redis again.
func TestLimitsBackToRedisAfterAnOutage(t *testing.T) {
	ctx := context.Background()
	_, prefix := testinfra.Redis(t)
	var cut atomic.Bool
	cut.Store(true)
	rdb := redis.NewClient(&redis.Options{Addr: testinfra.RedisAddr(t), MaxRetries: -1, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if cut.Load() {
			return nil, errors.New("cut off (test)")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := clock.NewFake(t0)
	g := limits.New(rdb, &counting{}, limits.Config{Prefix: prefix, HostConcurrency: 5, Fallback: time.Second}, clk, limits.Metrics{}, slog.New(slog.DiscardHandler))
	slots := prefix + "{limits}:slots:h.example"
	fire := func(i int) {
		t.Helper()
		it := item("acme", "h.example", i)
		if wait, _ := g.Admit(ctx, it, clk.Now()); wait != 0 {
			t.Fatalf("firing %d waits %s", i, wait)
		}
		g.Target().Fire(ctx, target.Request{Firing: it.Firing})
	}
	fire(0) // Redis cut: the per-process limits
	cut.Store(false)
	fire(1) // within Fallback: still per process, and no ping yet
	if n, _ := rdb.Exists(ctx, slots).Result(); n != 0 {
		t.Fatal("a slot was taken in Redis within the fallback")
	}
	clk.Advance(time.Second)
	fire(2) // its attempt pings Redis, which answers
	it := item("acme", "h.example", 3)
	if wait, _ := g.Admit(ctx, it, clk.Now()); wait != 0 {
		t.Fatal("waits")
	}
	if n, _ := rdb.ZCard(ctx, slots).Result(); n != 1 {
		t.Fatalf("%d slots in Redis after the outage, want the new attempt's", n)
	}
	g.Target().Fire(ctx, target.Request{Firing: it.Firing})
	if n, _ := rdb.ZCard(ctx, slots).Result(); n != 0 {
		t.Fatalf("%d slots left in Redis after the attempt", n)
	}
}

// countingRedis counts the scripts run through it.
type countingRedis struct {
	redis.Cmdable
	scripts atomic.Int64
}

func (c *countingRedis) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	c.scripts.Add(1)
	return c.Cmdable.EvalSha(ctx, sha1, keys, args...)
}

// Breakers alone (the default) cost a call per host per BreakerSync, not
// one per firing: healthy hosts' firings are admitted from the state read
// last.
func TestBreakersAloneCostACallPerHostPerSync(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testinfra.Redis(t)
	c := &countingRedis{Cmdable: rdb}
	clk := clock.NewFake(t0)
	g := limits.New(c, &counting{}, limits.Config{Prefix: prefix, Breaker: hostguard.BreakerConfig{Failures: 3, Cooldown: time.Second}, BreakerSync: time.Second},
		clk, limits.Metrics{}, slog.New(slog.DiscardHandler))
	for i := range 100 {
		for _, host := range []string{"a.example", "b.example"} {
			it := item("acme", host, i)
			g.Admit(ctx, it, clk.Now())
			if res := g.Target().Fire(ctx, target.Request{Firing: it.Firing}); !res.OK {
				t.Fatalf("%+v", res)
			}
		}
		clk.Advance(5 * time.Millisecond) // 100 firings a host over 0.5 s
	}
	if n := c.scripts.Load(); n != 2 {
		t.Fatalf("%d script calls for 200 healthy firings to two hosts within the sync, want 2", n)
	}
}

// slowRedis holds every script call a while, as a busy Redis does.
type slowRedis struct {
	countingRedis
	delay time.Duration
}

func (c *slowRedis) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	time.Sleep(c.delay)
	return c.countingRedis.EvalSha(ctx, sha1, keys, args...)
}

// When a host's breaker state is old, one firing reads it again while the
// others due at the same moment go by the closed state last read: 128
// executors admitting firings to one host at once make one call, not 128
// (which a busy Redis answered with timeouts, sending the worker to its
// per-process limits).
func TestOneReadOfAnOldBreakerStateWhateverTheConcurrency(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testinfra.Redis(t)
	c := &slowRedis{countingRedis: countingRedis{Cmdable: rdb}, delay: 50 * time.Millisecond}
	clk := clock.NewFake(t0)
	g := limits.New(c, &counting{}, limits.Config{Prefix: prefix, Breaker: hostguard.BreakerConfig{Failures: 3, Cooldown: time.Second}, BreakerSync: time.Second, Timeout: time.Second},
		clk, limits.Metrics{}, slog.New(slog.DiscardHandler))
	if wait, _ := g.Admit(ctx, item("acme", "a.example", -1), clk.Now()); wait != 0 {
		t.Fatalf("first firing waits %s", wait)
	}
	if n := c.scripts.Load(); n != 1 {
		t.Fatalf("%d calls for the first firing, want 1", n)
	}
	clk.Advance(2 * time.Second) // the state read is old now
	var wg sync.WaitGroup
	var waited atomic.Int64
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if wait, _ := g.Admit(ctx, item("acme", "a.example", i), clk.Now()); wait != 0 {
				waited.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := c.scripts.Load(); n != 2 {
		t.Fatalf("%d calls for 128 firings admitted at once with an old state, want 2 (the first read and one refresh)", n)
	}
	if waited.Load() != 0 {
		t.Fatalf("%d firings held back by a closed breaker", waited.Load())
	}
}
