package fire

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// A renewal that finds the execution cancelled abandons the request: the
// attempt is CANCELLED (not retried, whatever its retry budget) under its
// lease, naming who cancelled, its marker is the cancelled one, and the
// target then gets a cancel notice for the execution.
func TestCancelledDuringAttempt(t *testing.T) {
	started := make(chan struct{})
	var mu sync.Mutex
	var notices []target.Request
	noticed := make(chan struct{})
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		if req.Event != "" {
			mu.Lock()
			notices = append(notices, req)
			mu.Unlock()
			close(noticed)
			return target.Result{OK: true, HTTPStatus: 200}
		}
		close(started)
		<-ctx.Done()
		return target.Failed(target.ClassCanceled, false, ctx.Err())
	})
	st := &memSettler{}
	r.deps.Settler = st
	r.leaser.renewErr = &lease.CancelledError{By: "user:alice"}
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 3))
	<-started
	r.clk.Advance(30 * time.Second)
	<-r.own.events
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED || !strings.Contains(a.GetReason(), "cancelled by user:alice during the attempt") {
		t.Fatalf("final %v", a)
	}
	if !r.rec.held["e1"] {
		t.Fatal("a cancelled attempt keeps its lease to the end; its record is held")
	}
	if d := st.decisions["e1"]; d.Status != sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
		t.Fatalf("settled as %v, want CANCELLED (no retry)", d.Status)
	}
	r.leaser.mu.Lock()
	marks := append([]string(nil), r.leaser.marks...)
	r.leaser.mu.Unlock()
	if len(marks) != 1 || marks[0] != "cancelled e1" {
		t.Fatalf("marks %v", marks)
	}
	<-noticed
	mu.Lock()
	defer mu.Unlock()
	n := notices[0]
	if n.Event != firing.EventCancelled || n.Firing.GetExecutionId() != "e1" || n.Fence != 99 {
		t.Fatalf("notice %+v", n)
	}
	var body target.CancelBody
	if err := json.Unmarshal(n.Firing.GetPayload(), &body); err != nil || body.ExecutionID != "e1" || body.CancelledBy != "user:alice" || body.Event != "cancelled" {
		t.Fatalf("notice body %s: %v", n.Firing.GetPayload(), err)
	}
	if h := target.SignedHeaders(target.Secret("s"), n); h[0].Value != "e1:cancelled" {
		t.Fatalf("notice idempotency key %q", h[0].Value)
	}
}

// An execution the lease script found cancelled is recorded CANCELLED
// without calling the target (nothing was sent, so nothing is noticed).
func TestCancelledBeforeTheAttempt(t *testing.T) {
	calls := 0
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { calls++; return ok(ctx, req) })
	r.leaser.acquire["e1"] = lease.Result{Outcome: lease.Cancelled, CancelledBy: "overlap:terminate_other for e2"}
	n := &memNotifier{}
	r.deps.Notifier = n
	r.start(t)
	r.pushFiring(t, policyFiring("e1", 3))
	<-r.own.events
	if calls != 0 {
		t.Fatalf("target called %d times", calls)
	}
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED || !strings.Contains(a.GetReason(), "cancelled by overlap:terminate_other for e2 before this attempt was sent") {
		t.Fatalf("final %v", a)
	}
	// The job's completion callback is told too.
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.got) != 1 || n.got[0].Event != "cancelled" || n.got[0].Status != "EXECUTION_STATUS_CANCELLED" || n.url[0] != "http://cb.example/hook" {
		t.Fatalf("notifications %+v to %v", n.got, n.url)
	}
}

// The cancel notice goes where the target subscribed: an HTTP target's
// cancel_url (POST, JSON), else its url; the original firing is untouched.
func TestCancelNoticeGoesToTheCancelURL(t *testing.T) {
	f := policyFiring("e1", 1)
	f.Target = &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/run", Method: "PUT",
		CancelUrl: "https://x.example/cancel", Headers: map[string]string{"content-type": "text/plain", "Authorization": "Bearer t"}}}}
	n := target.CancelNotice(f, "user:alice", t0)
	h := n.GetTarget().GetHttp()
	if h.GetUrl() != "https://x.example/cancel" || h.GetMethod() != "POST" || h.GetHeaders()["Content-Type"] != "application/json" ||
		h.GetHeaders()["content-type"] != "" || h.GetHeaders()["Authorization"] != "Bearer t" {
		t.Fatalf("notice target %v", h)
	}
	if f.GetTarget().GetHttp().GetUrl() != "https://x.example/run" || len(f.GetPayload()) != 0 {
		t.Fatal("the original firing changed")
	}
	f.GetTarget().GetHttp().CancelUrl = ""
	if u := target.CancelNotice(f, "x", t0).GetTarget().GetHttp(); u.GetUrl() != "https://x.example/run" || u.GetMethod() != "PUT" {
		t.Fatalf("without cancel_url: %v", u)
	}
}

// A slot skipped by BUFFER_ALL's full queue, or by SKIP beyond
// max_concurrency, says so.
func TestOverlapSkipReasons(t *testing.T) {
	r := newRig(t, 1, ok)
	r.leaser.acquire["full"] = lease.Result{Outcome: lease.Overlapping, Running: "other"}
	r.leaser.acquire["two"] = lease.Result{Outcome: lease.Overlapping, Running: "other"}
	r.start(t)
	full := policyFiring("full", 1)
	full.Overlap = sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL
	two := policyFiring("two", 1)
	two.Overlap, two.MaxConcurrency = sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP, 2
	for _, f := range []*sundialv1.Firing{full, two} {
		r.pushFiring(t, f)
		<-r.own.events
	}
	if got := r.rec.finalOf("full").GetReason(); got != "overlap BUFFER_ALL: execution other of this job is running and the queue is full (100 waiting)" {
		t.Errorf("BUFFER_ALL reason %q", got)
	}
	if got := r.rec.finalOf("two").GetReason(); got != "overlap SKIP: 2 executions of this job (its max_concurrency), among them other, are still running" {
		t.Errorf("SKIP beyond 2 reason %q", got)
	}
}
