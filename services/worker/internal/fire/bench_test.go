package fire

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

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// doneOwner claims everything and says when a firing is finished.
type doneOwner struct{ done chan struct{} }

func (doneOwner) Claim(*work.Item) bool   { return true }
func (o doneOwner) Finish(*work.Item)     { o.done <- struct{}{} }
func (doneOwner) Requeue(*work.Item) bool { return true }
func (doneOwner) Release(*work.Item)      {}

// nopLeaser grants every lease and writes every marker at once.
type nopLeaser struct{ Leaser }

func (nopLeaser) Release(context.Context, lease.Execution, string) (bool, error) { return true, nil }

func (nopLeaser) AcquireMany(_ context.Context, batch []lease.Acquisition) ([]lease.Result, error) {
	out := make([]lease.Result, len(batch))
	for i := range out {
		out[i] = lease.Result{Outcome: lease.Acquired, Fence: 1}
	}
	return out, nil
}
func (nopLeaser) FinishMany(context.Context, []lease.Finish) error { return nil }
func (nopLeaser) UntouchedMany(_ context.Context, batch []lease.Execution) ([]bool, error) {
	out := make([]bool, len(batch))
	for i := range out {
		out[i] = true
	}
	return out, nil
}

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

// BenchmarkProcess is one firing through the three stages with everything
// around them instant: prepare (decode, a lease call of one), fire
// (lateness, the attempt with its renewal timer and goroutine) and settle
// (the hand-over to a settler, the marker call and the final record). What
// is left is the worker's own cost per firing.
//
// off is tracing off (the default): what every firing pays. unsampled and
// sampled trace the firing (its consume and hold spans are opened in the
// loop, as the consumer would) with a tracer exporting to nowhere through
// the batch processor, sampled out or in upstream.
// dropHolder is a holder that lets go of what it is given.
type dropHolder struct{}

func (dropHolder) AddAfter(*work.Item, int64) {}

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
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			var prepared *work.Item
			stage := prepare.New(prepare.Config{WorkerID: "w1", LeaseTTL: time.Minute}, nopLeaser{},
				prepare.Routes{Fire: func(it *work.Item) { prepared = it }}, clock.Real{}, m, logger)
			st := settle.NewStage(settle.StageConfig{Settlers: 1, WorkerID: "w1"},
				settle.StageDeps{Leaser: nopLeaser{}, Recorder: nopRecorder{}, Clock: clock.Real{}, Metrics: m, Logger: logger})
			if err := st.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer st.Stop()
			d := Deps{Queue: readyq.New(), Leaser: nopLeaser{}, Prepare: dropHolder{}, Settle: st, Target: fire, Recorder: nopRecorder{}, Clock: clock.Real{}, Metrics: m, Logger: logger}
			var tr trace.Tracer
			if mode.traced {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.NewSampler(1, 1)), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tr = tp.Tracer("bench")
				d.Tracer = tr
			}
			p := New(Config{Executors: 1, WorkerID: "w1", LeaseTTL: time.Minute}, d)
			env := benchEnvelope(b, mode.tp)
			ctx := context.Background()
			own := doneOwner{make(chan struct{}, 1)}
			b.ReportAllocs()
			for b.Loop() {
				it := &work.Item{Facts: work.Facts{FireAt: t0.UnixNano(), Priority: sundialv1.Priority_PRIORITY_HIGH, Tenant: "acme",
					Envelope: env, Owner: own}, Hold: work.Hold{Ready: t0.UnixNano(), HeapIndex: -1}}
				if tr != nil {
					cctx, consume := tr.Start(tracing.Context(ctx, mode.tp), "worker.consume")
					_, hold := tr.Start(cctx, SpanHold)
					it.Trace = &work.Trace{Consume: consume, Hold: hold}
				}
				stage.Prepare(ctx, []*work.Item{it})
				p.process(ctx, prepared)
				<-own.done
				it.Trace.End("")
			}
		})
	}
}
