package fire

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/retry"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// pushTraced pushes f with the spans the consumer would have opened, as
// children of the relay's context parent.
func (r *rig) pushTraced(t *testing.T, tr trace.Tracer, f *sundialv1.Firing, parent string) *work.Item {
	t.Helper()
	b, err := firing.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, consume := tr.Start(tracing.Context(context.Background(), parent), "worker.consume")
	_, hold := tr.Start(ctx, SpanHold)
	it := &work.Item{
		Facts: work.Facts{FireAt: t0.UnixNano(), Priority: firing.Normalize(f.GetPriority()), Tenant: f.GetTenant(), Envelope: b, Owner: r.own},
		Hold:  work.Hold{Ready: t0.UnixNano(), HeapIndex: -1},
		Trace: &work.Trace{Consume: consume, Hold: hold},
	}
	r.enqueue(it)
	return it
}

// captureSettler is memSettler that also keeps the envelopes it was given.
type captureSettler struct {
	memSettler
	mu  sync.Mutex
	got []*sundialv1.Firing
	out []settle.Outcome
}

func (s *captureSettler) SettleMany(ctx context.Context, as []settle.Attempt) []settle.Settled {
	return settleEach(ctx, as, s.Settle)
}

func (s *captureSettler) Settle(ctx context.Context, f *sundialv1.Firing, d retry.Decision, res target.Result) (settle.Outcome, error) {
	out, err := s.memSettler.Settle(ctx, f, d, res)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got, s.out = append(s.got, f), append(s.out, out)
	return out, err
}

const relayTP = "00-11111111111111111111111111111111-2222222222222222-01"

// A traced firing's lease and target calls are children of its consume
// span; the target receives the target span's context; the outcome lands
// on the consume span. A failed attempt's retry is staged with the consume
// span's context, and its settling is a span too.
func TestTracedAttempt(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	var got []target.Request
	var mu sync.Mutex
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		mu.Lock()
		got = append(got, req)
		n := len(got)
		mu.Unlock()
		if n == 1 {
			return ok(ctx, req)
		}
		return fail503(ctx, req)
	})
	st := &captureSettler{}
	r.deps.Settler = st
	r.deps.Tracer = rec.Tracer()
	r.start(t)

	ok1 := r.pushTraced(t, rec.Tracer(), policyFiring("ok", 3), relayTP)
	<-r.own.events
	bad := r.pushTraced(t, rec.Tracer(), policyFiring("bad", 3), relayTP)
	<-r.own.events
	// The owner (the consumer's partition) ends the consume span on Finish.
	for _, it := range []*work.Item{ok1, bad} {
		it.Trace.End("")
	}

	consume := rec.Named("worker.consume")
	targets, settles := rec.Named(SpanTarget), rec.Named(settle.SpanSettle)
	if len(consume) != 2 || len(targets) != 2 || len(settles) != 2 {
		t.Fatalf("spans: consume %d target %d settle %d", len(consume), len(targets), len(settles))
	}
	relay, _ := tracing.Parse(relayTP)
	for i, c := range consume {
		if c.SpanContext().TraceID() != relay.TraceID() {
			t.Fatalf("consume span %d left the firing's trace", i)
		}
		for _, child := range []string{SpanTarget, settle.SpanSettle} {
			s := rec.Named(child)[i]
			if s.Parent().SpanID() != c.SpanContext().SpanID() {
				t.Fatalf("%s span %d is not a child of its consume span", child, i)
			}
		}
		if sent := got[i].Traceparent; sent != tracing.Format(targets[i].SpanContext()) {
			t.Fatalf("target %d got traceparent %q, want the target span's %q", i, sent, tracing.Format(targets[i].SpanContext()))
		}
	}
	if o := tracingtest.Attr(consume[0], tracing.AttrOutcome); o != "succeeded" {
		t.Fatalf("first outcome %q", o)
	}
	if o := tracingtest.Attr(consume[1], tracing.AttrOutcome); o != "retry_scheduled" {
		t.Fatalf("second outcome %q", o)
	}
	if s := tracingtest.Attr(targets[1], "http.response.status_code"); s != "503" {
		t.Fatalf("failed target span status code %q", s)
	}
	// The batched lease call is an event on each consume span.
	for i, c := range consume {
		var leased string
		for _, e := range c.Events() {
			if e.Name == prepare.EventLease {
				for _, kv := range e.Attributes {
					if kv.Key == "sundial.lease" {
						leased = kv.Value.AsString()
					}
				}
			}
		}
		if leased != "acquired" {
			t.Fatalf("consume span %d: lease event outcome %q, want acquired", i, leased)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	next := st.out[1].Next
	if next == nil || next.GetTraceparent() != tracing.Format(consume[1].SpanContext()) {
		t.Fatalf("retry staged with traceparent %q, want the failed attempt's consume span %q", next.GetTraceparent(), tracing.Format(consume[1].SpanContext()))
	}
}

// Untraced firings (tracing off, or a tracer but no trace on the item)
// send no traceparent and record no span.
func TestUntracedAttempt(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	var got target.Request
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { got = req; return ok(ctx, req) })
	r.deps.Tracer = rec.Tracer()
	r.start(t)
	r.push(t, "e1", 0)
	<-r.own.events
	if got.Traceparent != "" || len(rec.Ended()) != 0 {
		t.Fatalf("untraced firing sent %q and recorded %d spans", got.Traceparent, len(rec.Ended()))
	}
}
