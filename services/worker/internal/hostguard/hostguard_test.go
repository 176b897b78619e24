package hostguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestLimiterTokenBucket(t *testing.T) {
	l := NewLimiter(10, 3) // 10/s, bursts of 3
	for i := range 3 {
		if w := l.Reserve("a:80", t0); w != 0 {
			t.Fatalf("burst request %d waits %s", i, w)
		}
	}
	if w := l.Reserve("a:80", t0); w != 100*time.Millisecond {
		t.Fatalf("over the burst: wait %s, want 100ms", w)
	}
	// Nothing was taken by the refused reservation: after 100 ms one token.
	if w := l.Reserve("a:80", t0.Add(100*time.Millisecond)); w != 0 {
		t.Fatalf("after refill: wait %s", w)
	}
	if w := l.Reserve("a:80", t0.Add(150*time.Millisecond)); w != 50*time.Millisecond {
		t.Fatalf("half a token: wait %s, want 50ms", w)
	}
	// Hosts are independent.
	if w := l.Reserve("b:80", t0); w != 0 {
		t.Fatalf("another host waits %s", w)
	}
	// Idle full buckets are forgotten.
	l.Reserve("c:80", t0.Add(2*time.Minute))
	if l.Len() != 1 {
		t.Fatalf("%d buckets after a sweep, want 1", l.Len())
	}
	if NewLimiter(0, 10) != nil {
		t.Fatal("rate 0 should mean no limiter")
	}
	var none *Limiter
	if none.Reserve("x", t0) != 0 {
		t.Fatal("nil limiter limits")
	}
}

type scripted struct {
	results []target.Result
	calls   int
}

func (s *scripted) Fire(context.Context, target.Request) target.Result {
	r := s.results[min(s.calls, len(s.results)-1)]
	s.calls++
	return r
}

func req(url string) target.Request {
	return target.Request{Firing: &sundialv1.Firing{Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}}}}
}

var (
	down = target.Failed(target.ClassConnection, false, errors.New("refused"))
	up   = target.Result{OK: true, HTTPStatus: 200}
	bad  = target.Result{HTTPStatus: 404, Class: target.ClassHTTP4xx, Permanent: true, Err: errors.New("404")}
)

// closed → (3 failures) open → fail fast → (cool-down) half-open, one
// probe → failure reopens → (cool-down) probe succeeds → closed.
func TestBreakerLifecycle(t *testing.T) {
	clk := clock.NewFake(t0)
	next := &scripted{results: []target.Result{down, down, down, down, up}}
	var transitions []string
	rejected := 0
	bt := NewBreakers(next, BreakerConfig{Failures: 3, Cooldown: 10 * time.Second}, clk, BreakerMetrics{
		Transition: func(from, to State) { transitions = append(transitions, from.String()+">"+to.String()) },
		Rejected:   func() { rejected++ },
	})
	b := bt.(*Breakers)
	ctx := context.Background()
	for range 3 {
		bt.Fire(ctx, req("http://h.example:8080/x"))
	}
	if b.State("h.example:8080") != Open {
		t.Fatalf("state %v after 3 failures", b.State("h.example:8080"))
	}
	r := bt.Fire(ctx, req("http://h.example:8080/y"))
	if r.Class != target.ClassCircuitOpen || r.Permanent || next.calls != 3 {
		t.Fatalf("open breaker: %+v, %d calls", r, next.calls)
	}
	// Other hosts are unaffected.
	if b.State("other:80") != Closed {
		t.Fatal("other host")
	}
	clk.Advance(10 * time.Second)
	// Half-open: the probe (4th call) fails and reopens.
	if r := bt.Fire(ctx, req("http://h.example:8080/")); r.Class != target.ClassConnection {
		t.Fatalf("probe: %+v", r)
	}
	if b.State("h.example:8080") != Open {
		t.Fatal("failed probe did not reopen")
	}
	clk.Advance(10 * time.Second)
	if r := bt.Fire(ctx, req("http://h.example:8080/")); !r.OK {
		t.Fatalf("second probe: %+v", r)
	}
	if b.State("h.example:8080") != Closed || len(b.hosts) != 0 {
		t.Fatal("successful probe did not close")
	}
	want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
	if len(transitions) != len(want) {
		t.Fatalf("transitions %v, want %v", transitions, want)
	}
	for i := range want {
		if transitions[i] != want[i] {
			t.Fatalf("transitions %v, want %v", transitions, want)
		}
	}
	if rejected != 1 {
		t.Fatalf("rejected %d", rejected)
	}
}

// While a half-open probe is in flight, other attempts fail fast.
func TestBreakerOneProbeAtATime(t *testing.T) {
	clk := clock.NewFake(t0)
	b := NewBreakers(&scripted{results: []target.Result{down}}, BreakerConfig{Failures: 1, Cooldown: time.Second}, clk, BreakerMetrics{}).(*Breakers)
	b.Fire(context.Background(), req("http://h/"))
	clk.Advance(time.Second)
	if err := b.allow("h", "probe/1"); err != nil {
		t.Fatalf("probe refused: %v", err)
	}
	if err := b.allow("h", "other/1"); err == nil {
		t.Fatal("a second probe was let through")
	}
}

// A 4xx neither counts as a failure nor resets the count; a success does.
func TestBreakerIgnoresClientErrors(t *testing.T) {
	next := &scripted{results: []target.Result{down, bad, down, up, down, down}}
	b := NewBreakers(next, BreakerConfig{Failures: 3, Cooldown: time.Second}, clock.NewFake(t0), BreakerMetrics{}).(*Breakers)
	for range 6 {
		b.Fire(context.Background(), req("http://h/"))
	}
	if b.State("h") != Closed {
		t.Fatalf("state %v: down, 404, down, up, down, down is two in a row", b.State("h"))
	}
	if next.calls != 6 {
		t.Fatalf("%d calls", next.calls)
	}
	// Kafka targets (no host) pass straight through.
	if NewBreakers(next, BreakerConfig{}, nil, BreakerMetrics{}) != target.Target(next) {
		t.Fatal("disabled breakers should be the target itself")
	}
}
