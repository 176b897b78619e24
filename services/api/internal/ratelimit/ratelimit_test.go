package ratelimit

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{DefaultConfig, {}, {PerSecond: 0.5, Burst: 1}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, c := range []Config{{PerSecond: -1, Burst: 1}, {PerSecond: 10}, {Burst: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// A caller spends its burst at once, then gets one call per 1/rate; a
// refused call spends nothing, so waiting the delay it was told is enough;
// other callers have buckets of their own.
func TestAllowBurstThenRate(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC))
	l, err := New(Config{PerSecond: 4, Burst: 3}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, ok := l.Allow("acme/ops"); !ok {
			t.Fatalf("call %d of the burst refused", i)
		}
	}
	wait, ok := l.Allow("acme/ops")
	if ok || wait != 250*time.Millisecond {
		t.Fatalf("past the burst: ok=%v wait=%s, want refused for 250ms", ok, wait)
	}
	// Refusals do not queue: asking again at once gets the same wait.
	if w, ok := l.Allow("acme/ops"); ok || w != wait {
		t.Fatalf("asked again: ok=%v wait=%s", ok, w)
	}
	if _, ok := l.Allow("globex/token:0123456789ab"); !ok {
		t.Fatal("another caller was refused")
	}
	clk.Advance(wait)
	if _, ok := l.Allow("acme/ops"); !ok {
		t.Fatal("refused after waiting the retry delay")
	}
	if _, ok := l.Allow("acme/ops"); ok {
		t.Fatal("a second call in the same instant went through")
	}
}

func TestDisabledAllowsEverything(t *testing.T) {
	l, err := New(Config{}, clock.NewFake(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	for range 10_000 {
		if _, ok := l.Allow("acme/ops"); !ok {
			t.Fatal("refused with the limit off")
		}
	}
}

// The interceptor charges the caller the authentication interceptor
// resolved, refuses with ResourceExhausted carrying RetryInfo and a
// QuotaFailure naming the caller, and lets public methods (no caller)
// through.
func TestUnaryInterceptor(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC))
	var limited []string
	l, err := New(Config{PerSecond: 1, Burst: 1}, clk, OnLimited(func(tenant string) { limited = append(limited, tenant) }))
	if err != nil {
		t.Fatal(err)
	}
	icpt := l.UnaryServerInterceptor()
	handled := 0
	handler := func(context.Context, any) (any, error) { handled++; return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/sundial.v1.JobService/ListJobs"}
	ctx := auth.WithActor(auth.WithTenant(context.Background(), "acme"), "acme/ops")

	if _, err := icpt(ctx, nil, info, handler); err != nil {
		t.Fatal(err)
	}
	_, err = icpt(ctx, nil, info, handler)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || handled != 1 {
		t.Fatalf("second call: %v (handled %d)", err, handled)
	}
	if d, ok := RetryDelay(err); !ok || d != time.Second {
		t.Fatalf("retry delay %s %v, want 1s", d, ok)
	}
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok {
			qf = q
		}
	}
	if qf == nil || qf.GetViolations()[0].GetSubject() != "caller:acme/ops" {
		t.Fatalf("quota failure %v", qf)
	}
	if len(limited) != 1 || limited[0] != "acme" {
		t.Fatalf("OnLimited saw %v", limited)
	}
	// Health checks carry no caller and are never charged.
	for range 5 {
		if _, err := icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}, handler); err != nil {
			t.Fatalf("health check refused: %v", err)
		}
	}
}

// A sub-millisecond wait is rounded up, never down to a RetryInfo of 0
// that would tell a client to retry at once.
func TestExhaustedRoundsUp(t *testing.T) {
	err := Exhausted("acme/ops", Config{PerSecond: 5000, Burst: 1}, 200*time.Microsecond)
	if d, ok := RetryDelay(err); !ok || d != time.Millisecond {
		t.Fatalf("retry delay %s %v, want 1ms", d, ok)
	}
}
