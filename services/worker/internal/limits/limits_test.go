package limits_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/hostguard"
	"github.com/sundialhq/sundial/services/worker/internal/limits"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// counting is a target that answers with status and counts its calls.
type counting struct {
	status atomic.Int64
	calls  atomic.Int64
}

func (c *counting) Fire(_ context.Context, _ target.Request) target.Result {
	c.calls.Add(1)
	switch s := int(c.status.Load()); {
	case s == 0 || s < 300:
		return target.Result{OK: true, HTTPStatus: http.StatusOK}
	default:
		return target.Result{HTTPStatus: s, Class: target.ClassHTTP5xx, Err: errors.New("503")}
	}
}

func item(tenant, host string, n int) *work.Item {
	f := &sundialv1.Firing{ExecutionId: tenant + "-" + strconv.Itoa(n), JobId: "job-" + strconv.Itoa(n), Tenant: tenant, Attempt: 1,
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://" + host + "/hook"}}}}
	return &work.Item{Facts: work.Facts{Tenant: tenant}, Prepared: work.Prepared{Firing: f}}
}

func ptr[T any](v T) *T { return &v }

// Without Redis (--cluster-limits=false) every limit is this process's: a
// tenant over its quota waits (the other tenant does not), the host's cap
// and rate hold, the breaker opens after its failures, and a firing that
// waited is not charged again.
func TestPerProcessLimits(t *testing.T) {
	ctx := context.Background()
	rates, err := quotas.Resolve(quotas.Limits{}, quotas.File{Tenants: map[string]quotas.Overrides{"flood": {FiringRate: ptr(10.0), FiringBurst: ptr(2)}}})
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	g := limits.New(nil, next, limits.Config{Tenants: rates, HostConcurrency: 2, Breaker: hostguard.BreakerConfig{Failures: 2, Cooldown: time.Minute}},
		clock.NewFake(t0), limits.Metrics{Fallback: func() { t.Fatal("no Redis to fall back from") }}, slog.New(slog.DiscardHandler))
	for i := range 2 {
		if wait, _ := g.Admit(ctx, item("flood", "a.example", i), t0); wait != 0 {
			t.Fatalf("burst firing %d waits %s", i, wait)
		}
	}
	third := item("flood", "b.example", 2)
	if wait, outcome := g.Admit(ctx, third, t0); wait != 100*time.Millisecond || outcome != limits.OutcomeTenantLimited {
		t.Fatalf("third firing: %s %q, want 100ms tenant_limited", wait, outcome)
	}
	// Held back, it fires late rather than failing: the misfire judge is
	// to leave it alone when its lease is taken again.
	if !third.LateByPolicy() {
		t.Fatal("the firing over its tenant's quota is not marked as held back by a limit")
	}
	quiet := item("quiet", "b.example", 0)
	if wait, _ := g.Admit(ctx, quiet, t0); wait != 0 {
		t.Fatalf("another tenant waits %s", wait)
	}
	if quiet.LateByPolicy() {
		t.Fatal("a firing admitted at once is marked as held back")
	}
	// a.example has its two slots taken.
	if wait, outcome := g.Admit(ctx, item("quiet", "a.example", 1), t0); wait == 0 || outcome != limits.OutcomeConcurrencyLimited {
		t.Fatalf("a third attempt to a.example: %s %q", wait, outcome)
	}
	if wait, _ := g.Admit(ctx, third, t0.Add(100*time.Millisecond)); wait != 0 {
		t.Fatalf("back at its turn the third waits %s", wait)
	}
	// The breaker: two failures to b.example open it.
	next.status.Store(503)
	g.Target().Fire(ctx, target.Request{Firing: third.Firing})
	x := item("quiet", "b.example", 0)
	g.Target().Fire(ctx, target.Request{Firing: x.Firing})
	y := item("quiet", "b.example", 9)
	g.Admit(ctx, y, t0)
	if res := g.Target().Fire(ctx, target.Request{Firing: y.Firing}); res.Class != target.ClassCircuitOpen || next.calls.Load() != 2 {
		t.Fatalf("after two failures: %+v, %d calls", res, next.calls.Load())
	}
}

// Firings no limit covers (no quota, no host limit, a Kafka target under
// breakers alone) are admitted without a look.
func TestUnlimitedFiringsAreAdmitted(t *testing.T) {
	g := limits.New(nil, &counting{}, limits.Config{Breaker: hostguard.BreakerConfig{Failures: 1}}, clock.NewFake(t0), limits.Metrics{}, slog.New(slog.DiscardHandler))
	kafka := &work.Item{Prepared: work.Prepared{Firing: &sundialv1.Firing{ExecutionId: "k", Tenant: "acme", Target: &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}}}}}
	if wait, outcome := g.Admit(context.Background(), kafka, t0); wait != 0 || outcome != "" {
		t.Fatalf("%s %q", wait, outcome)
	}
}

// A firing admitted by the per-process limits that comes back before its
// attempt (its lease was lost) is admitted again without holding two
// slots.
func TestReadmittedFiringHoldsOneLocalSlot(t *testing.T) {
	ctx := context.Background()
	g := limits.New(nil, &counting{}, limits.Config{HostConcurrency: 1}, clock.NewFake(t0), limits.Metrics{}, slog.New(slog.DiscardHandler))
	it := item("acme", "h.example", 0)
	for range 3 {
		if wait, _ := g.Admit(ctx, it, t0); wait != 0 {
			t.Fatalf("re-admission waits %s: its own earlier slot counted against it", wait)
		}
	}
	g.Target().Fire(ctx, target.Request{Firing: it.Firing})
	if wait, _ := g.Admit(ctx, item("acme", "h.example", 1), t0); wait != 0 {
		t.Fatalf("after the attempt the host's one slot is still taken (%s)", wait)
	}
}
