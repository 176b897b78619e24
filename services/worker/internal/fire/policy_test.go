package fire

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/notify"
	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// memSettler records decisions; err makes every Settle fail.
type memSettler struct {
	mu        sync.Mutex
	decisions map[string]retry.Decision
	err       error
}

func (s *memSettler) SettleMany(ctx context.Context, as []settle.Attempt) []settle.Settled {
	return settleEach(ctx, as, s.Settle)
}

// settleEach is SettleMany over a one-at-a-time settle.
func settleEach(ctx context.Context, as []settle.Attempt, one func(context.Context, *sundialv1.Firing, retry.Decision, target.Result) (settle.Outcome, error)) []settle.Settled {
	out := make([]settle.Settled, len(as))
	for i, a := range as {
		out[i].Outcome, out[i].Err = one(ctx, a.Firing, a.Decision, a.Result)
	}
	return out
}

func (s *memSettler) Settle(_ context.Context, f *sundialv1.Firing, d retry.Decision, _ target.Result) (settle.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return settle.Outcome{}, s.err
	}
	if s.decisions == nil {
		s.decisions = map[string]retry.Decision{}
	}
	s.decisions[f.GetExecutionId()] = d
	var out settle.Outcome
	switch d.Status {
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED:
		out.Next = firing.NextAttempt(f, d.NextFire, d.NextFire)
	case sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD:
		out.DeadLetter = &sundialv1.DeadLetter{Firing: f, ErrorClass: d.Class}
	}
	return out, nil
}

type memNotifier struct {
	mu  sync.Mutex
	got []notify.Summary
	url []string
}

func (n *memNotifier) Notify(u string, s notify.Summary) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, s)
	n.url = append(n.url, u)
	return true
}

type fixedLimiter struct{ wait map[string]time.Duration }

func (l fixedLimiter) Admit(_ context.Context, it *work.Item, _ time.Time) (time.Duration, string) {
	return l.wait[target.Host(it.Firing)], "rate_limited"
}

func (r *rig) pushFiring(t *testing.T, f *sundialv1.Firing) {
	t.Helper()
	b, err := firing.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	r.enqueue(&work.Item{Facts: work.Facts{FireAt: t0.UnixNano(), Priority: firing.Normalize(f.GetPriority()), Tenant: f.GetTenant(), Envelope: b, Owner: r.own}, Hold: work.Hold{Ready: t0.UnixNano(), HeapIndex: -1}})
}

func policyFiring(exec string, maxAttempts int32) *sundialv1.Firing {
	return &sundialv1.Firing{
		ExecutionId: exec, JobId: "job", Tenant: "acme", Attempt: 1, FirstAttempt: 1, JobVersion: 4,
		ScheduledTime: timestamppb.New(t0), FireTime: timestamppb.New(t0), CallbackUrl: "http://cb.example/hook",
		Retry:  &sundialv1.RetryPolicy{MaxAttempts: maxAttempts, Backoff: sundialv1.Backoff_BACKOFF_FIXED, InitialDelay: durationpb.New(5 * time.Second)},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x.example/"}}},
	}
}

func fail503(context.Context, target.Request) target.Result {
	return target.Result{HTTPStatus: 503, Class: target.ClassHTTP5xx, Excerpt: "busy", Err: errors.New("status 503")}
}

// A retryable failure with attempts left is settled as RETRY_SCHEDULED
// before the attempt marker (which keeps the overlap marker through the
// backoff), recorded with the error, status and excerpt; no notification.
func TestRetryScheduled(t *testing.T) {
	r := newRig(t, 1, fail503)
	st, nt := &memSettler{}, &memNotifier{}
	r.deps.Settler = st
	r.deps.Notifier = nt
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 3))
	<-r.own.events
	d := st.decisions["e1"]
	if d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED || d.Delay != 5*time.Second || d.Class != "http_5xx" {
		t.Fatalf("decision %+v", d)
	}
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED || a.GetHttpStatus() != 503 || a.GetResponseExcerpt() != "busy" ||
		a.GetError() != "status 503" || !strings.Contains(a.GetReason(), "attempt 2 of 3") || !strings.Contains(a.GetReason(), "staged as attempt 2") {
		t.Fatalf("final record %v", a)
	}
	if len(r.leaser.marks) != 1 || r.leaser.marks[0] != "retry e1 keep 3m5s" {
		t.Fatalf("marks %v (keep = backoff 5s + a grace of three lease TTLs)", r.leaser.marks)
	}
	if len(nt.got) != 0 {
		t.Fatalf("notified %v for a retry", nt.got)
	}
	if testutil.ToFloat64(r.m.Firings.WithLabelValues("medium", "retry_scheduled", "acme")) != 1 {
		t.Fatal("not counted")
	}
}

// The last attempt dies: DEAD row, attempt marker, one "dead" notification.
func TestLastAttemptDies(t *testing.T) {
	r := newRig(t, 1, fail503)
	st, nt := &memSettler{}, &memNotifier{}
	r.deps.Settler = st
	r.deps.Notifier = nt
	r.start(t)
	f := policyFiring("e1", 2)
	f.Attempt = 2
	r.pushFiring(t, f)
	<-r.own.events
	if a := r.rec.finalOf("e1"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD || !strings.Contains(a.GetReason(), "exhausted (2 of 2)") {
		t.Fatalf("final record %v", a)
	}
	if r.leaser.marks[0] != "attempt e1" {
		t.Fatalf("marks %v", r.leaser.marks)
	}
	if len(nt.got) != 1 || nt.got[0].Event != notify.EventDead || !nt.got[0].DeadLetter || nt.got[0].Attempts != 2 ||
		nt.got[0].HTTPStatus != 503 || nt.got[0].ErrorClass != "http_5xx" || nt.url[0] != "http://cb.example/hook" {
		t.Fatalf("notifications %+v", nt.got)
	}
}

// Success notifies "succeeded" and writes the done marker.
func TestSuccessNotifies(t *testing.T) {
	r := newRig(t, 1, ok)
	nt := &memNotifier{}
	r.deps.Settler = &memSettler{}
	r.deps.Notifier = nt
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 1))
	<-r.own.events
	if len(nt.got) != 1 || nt.got[0].Event != notify.EventSucceeded || nt.got[0].Status != "EXECUTION_STATUS_SUCCEEDED" || nt.got[0].Error != "" {
		t.Fatalf("notifications %+v", nt.got)
	}
	if r.leaser.marks[0] != "done e1" {
		t.Fatalf("marks %v", r.leaser.marks)
	}
}

// When settling gives up (stopping, Postgres down), nothing is marked or
// recorded as final, the lease is released and the firing stays
// unfinished, so its redelivery makes the attempt again.
func TestUnsettledAttemptIsLeftForRedelivery(t *testing.T) {
	fired := make(chan struct{}, 1)
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		fired <- struct{}{}
		return fail503(ctx, req)
	})
	r.deps.Settler = &memSettler{err: errors.New("postgres down; stopping")}
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 3))
	<-fired
	r.stop() // waits for the attempt to end
	r.own.mu.Lock()
	defer r.own.mu.Unlock()
	if len(r.own.finished) != 0 || r.rec.finalOf("e1") != nil {
		t.Fatalf("finished %v, final %v", r.own.finished, r.rec.finalOf("e1"))
	}
	if len(r.leaser.marks) != 1 || r.leaser.marks[0] != "release e1" {
		t.Fatalf("marks %v", r.leaser.marks)
	}
}

// Overlap and poison outcomes of the lease call.
func TestOverlapAndPoisonOutcomes(t *testing.T) {
	calls := 0
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { calls++; return ok(ctx, req) })
	st := &memSettler{}
	r.deps.Settler = st
	r.leaser.acquire["skipped"] = lease.Result{Outcome: lease.Overlapping, Running: "other"}
	r.leaser.acquire["waiting"] = lease.Result{Outcome: lease.Waiting, Running: "other", HeldFor: 4 * time.Second}
	r.leaser.acquire["poison"] = lease.Result{Outcome: lease.Poison, Fence: 7, Deliveries: 6}
	r.start(t)
	for _, e := range []string{"skipped", "waiting", "poison"} {
		f := policyFiring(e, 3)
		f.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP
		r.pushFiring(t, f)
		<-r.own.events
	}
	if calls != 0 {
		t.Fatalf("target called %d times", calls)
	}
	if a := r.rec.finalOf("skipped"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED || !strings.Contains(a.GetReason(), "overlap SKIP: execution other") {
		t.Fatalf("skipped record %v", a)
	}
	if r.rec.finalOf("waiting") != nil {
		t.Fatal("a waiting firing was recorded")
	}
	r.held.mu.Lock()
	if len(r.held.items) != 1 || time.Duration(r.held.items[0].NotBefore-t0.UnixNano()) != 3*time.Millisecond+4*time.Second+6*time.Second {
		t.Fatalf("waiting firing held until %v", r.held.items)
	}
	r.held.mu.Unlock()
	a := r.rec.finalOf("poison")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD || a.GetFenceToken() != 7 || !strings.Contains(a.GetError(), "delivered 6 times") {
		t.Fatalf("poison record %v", a)
	}
	if d := st.decisions["poison"]; d.Class != target.ClassPoison || d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD {
		t.Fatalf("poison decision %+v", d)
	}
	if testutil.ToFloat64(r.m.OverlapSkips.WithLabelValues("SKIP")) != 1 || testutil.ToFloat64(r.m.OverlapWaits.WithLabelValues("SKIP")) != 1 {
		t.Fatal("overlap metrics")
	}
}

// A firing over its host's rate limit waits in the fire holder, keeping
// the lease taken ahead, and no marker is written.
func TestRateLimitedWaitsInTheFireHolder(t *testing.T) {
	r := newRig(t, 1, ok)
	r.deps.Limiter = fixedLimiter{wait: map[string]time.Duration{"x.example": 300 * time.Millisecond}}
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 1))
	ev := <-r.own.events
	if ev != "held e1" {
		t.Fatalf("event %q", ev)
	}
	r.held.mu.Lock()
	defer r.held.mu.Unlock()
	if time.Duration(r.held.items[0].NotBefore-t0.UnixNano()) != 303*time.Millisecond || r.held.items[0].Lease.Fence != 99 {
		t.Fatalf("held until %v with fence %d", time.Unix(0, r.held.items[0].NotBefore), r.held.items[0].Lease.Fence)
	}
	if len(r.leaser.marks) != 0 || testutil.ToFloat64(r.m.RateLimited) != 1 {
		t.Fatal("lease touched or not counted")
	}
}

type fixedVersions map[string]int64

func (v fixedVersions) Newer(job string, version int64) (int64, bool) {
	cur, ok := v[job]
	return cur, ok && cur > version
}

// A job changed after its firing was leased ahead: at the instant the
// firing is skipped and the target never called.
func TestChangedAfterTheLeaseIsSkipped(t *testing.T) {
	calls := 0
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { calls++; return ok(ctx, req) })
	r.deps.Versions = fixedVersions{"job": 5}
	r.start(t)
	r.push(t, "e1", 0) // version 4
	if ev := <-r.own.events; ev != "finish e1" {
		t.Fatalf("event %q", ev)
	}
	if calls != 0 {
		t.Fatal("the target was called for a firing of a changed job")
	}
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED || !strings.Contains(a.GetReason(), "stale job version 4 (current 5)") {
		t.Fatalf("record %v", a)
	}
	// No Redis call at the instant: the lease of a job without an
	// overlap policy simply runs out (no copy of a stale firing fires).
	r.leaser.mu.Lock()
	defer r.leaser.mu.Unlock()
	if len(r.leaser.marks) != 0 {
		t.Fatalf("marks %v, want none", r.leaser.marks)
	}
}
