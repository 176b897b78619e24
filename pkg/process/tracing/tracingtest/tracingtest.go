// Package tracingtest gives tests a tracer whose spans are recorded in
// memory (the SDK's tracetest.SpanRecorder), sampled the way services
// sample, and helpers to find spans and read their attributes.
package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/process/tracing"
)

// Recorder is an in-memory tracer provider.
type Recorder struct {
	*tracetest.SpanRecorder
	tp *sdktrace.TracerProvider
}

// New returns a recorder sampling like a service whose --otel-sample-ratio
// and --otel-firing-sample-ratio are ratio and firingRatio; it is shut down
// when the test ends.
func New(t testing.TB, ratio, firingRatio float64) *Recorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.NewSampler(ratio, firingRatio)), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Recorder{SpanRecorder: rec, tp: tp}
}

// Tracer returns a tracer of the recorder's provider.
func (r *Recorder) Tracer() trace.Tracer { return r.tp.Tracer("test") }

// Named returns the ended spans called name, in the order they ended.
func (r *Recorder) Named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr is the value of span attribute k as a string ("" when absent).
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.String()
		}
	}
	return ""
}
