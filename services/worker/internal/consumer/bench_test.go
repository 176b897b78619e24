package consumer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// lastHolder keeps only the last item it was given.
type lastHolder struct{ it *work.Item }

func (h *lastHolder) AddAfter(it *work.Item, _ int64) { h.it = it }
func (h *lastHolder) Remove(*work.Item) bool          { return true }
func (h *lastHolder) Len() int                        { return 0 }
func benchRecord(b testing.TB, tp string) *kgo.Record {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	v, err := firing.Encode(&sundialv1.Firing{
		ExecutionId: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", JobId: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e80", Tenant: "acme",
		Attempt: 1, Priority: sundialv1.Priority_PRIORITY_HIGH, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at),
		Target:      &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://target.example/hook"}}},
		Payload:     make([]byte, 256),
		Traceparent: tp,
	})
	if err != nil {
		b.Fatal(err)
	}
	return &kgo.Record{Topic: "sundial.fire.high", Value: v}
}

// BenchmarkArrival is a firing's arrival in the worker: decode, track,
// hold, and later finish (claim and finish, as the executor does). off is
// tracing off (the default), the cost every firing pays; unsampled and
// sampled have a tracer exporting to nowhere through the batch processor,
// with a firing sampled out or in upstream.
func BenchmarkArrival(b *testing.B) {
	const sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	for _, mode := range []struct {
		name   string
		traced bool
		tp     string
	}{{"off", false, ""}, {"unsampled", true, unsampled}, {"sampled", true, sampled}} {
		b.Run(mode.name, func(b *testing.B) {
			var tr trace.Tracer
			if mode.traced {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.NewSampler(1, 1)), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tr = tp.Tracer("bench")
			}
			h := &lastHolder{}
			c := New(Config{Tracer: tr}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), slog.New(slog.NewTextHandler(io.Discard, nil)))
			p := newPartition(c, "sundial.fire.high", 0)
			rec := benchRecord(b, mode.tp)
			recs := []*kgo.Record{rec}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rec.Offset = int64(i)
				p.add(recs)
				p.Claim(h.it)
				h.it.Trace.End("")
				p.Finish(h.it)
			}
		})
	}
}
