package executor

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/lease"
	"github.com/sundialhq/sundial/pkg/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// nopOwner claims everything and keeps nothing.
type nopOwner struct{}

func (nopOwner) Claim(*work.Item) bool   { return true }
func (nopOwner) Finish(*work.Item)       {}
func (nopOwner) Requeue(*work.Item) bool { return true }

// nopLeaser grants every lease and writes every marker at once.
type nopLeaser struct{ Leaser }

func (nopLeaser) Acquire(context.Context, lease.Execution, string, time.Duration) (lease.Result, error) {
	return lease.Result{Outcome: lease.Acquired, Fence: 1}, nil
}
func (nopLeaser) MarkDone(context.Context, lease.Execution, string, time.Duration) error { return nil }

// nopRecorder finishes every final record at once.
type nopRecorder struct{}

func (nopRecorder) Running(*sundialv1.ExecutionAttempt) {}
func (nopRecorder) Final(_ context.Context, _ *sundialv1.ExecutionAttempt, _ bool, done func()) bool {
	done()
	return true
}

func benchEnvelope(b *testing.B, tp string) []byte {
	v, err := firing.Encode(&sundialv1.Firing{
		ExecutionId: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", JobId: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e80", Tenant: "acme",
		Attempt: 1, Priority: sundialv1.Priority_PRIORITY_HIGH, ScheduledTime: timestamppb.New(t0), FireTime: timestamppb.New(t0),
		Target:      &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://target.example/hook"}}},
		Payload:     make([]byte, 256),
		Traceparent: tp,
	})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkProcess is one firing through an executor with everything
// around it instant: decode, lateness, lease, the attempt (its renewal
// timer and goroutine), the done marker and the final record. What is
// left is the executor's own cost per firing.
//
// off is tracing off (the default): what every firing pays. unsampled and
// sampled trace the firing (its consume and hold spans are opened in the
// loop, as the consumer would) with a tracer exporting to nowhere through
// the batch processor, sampled out or in upstream.
func BenchmarkProcess(b *testing.B) {
	const sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	for _, mode := range []struct {
		name   string
		traced bool
		tp     string
	}{{"off", false, ""}, {"unsampled", true, unsampled}, {"sampled", true, sampled}} {
		b.Run(mode.name, func(b *testing.B) {
			m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
			fire := fakeTarget{func(context.Context, target.Request) target.Result { return target.Result{OK: true, HTTPStatus: 204} }}
			p := New(Config{Executors: 1, WorkerID: "w1", LeaseTTL: time.Minute}, readyq.New(), nil, nopLeaser{}, fire, nopRecorder{},
				clock.Real{}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
			var tr trace.Tracer
			if mode.traced {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.NewSampler(1, 1)), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tr = tp.Tracer("bench")
				p.SetTracer(tr)
			}
			env := benchEnvelope(b, mode.tp)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				it := &work.Item{FireAt: t0.UnixNano(), Ready: t0.UnixNano(), Priority: sundialv1.Priority_PRIORITY_HIGH, Tenant: "acme",
					Envelope: env, Owner: nopOwner{}, HeapIndex: -1}
				if tr != nil {
					cctx, consume := tr.Start(tracing.Context(ctx, mode.tp), "worker.consume")
					_, hold := tr.Start(cctx, SpanHold)
					it.Trace = &work.Trace{Consume: consume, Hold: hold}
				}
				p.process(ctx, it)
				it.Trace.End("")
			}
		})
	}
}
