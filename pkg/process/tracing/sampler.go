package tracing

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

type firingKey struct{}

// ForFirings marks ctx so that root spans started from it are sampled at
// the firing ratio rather than the general one. Firing spans get it from
// Stager; the worker uses it for a firing that arrives without a context.
func ForFirings(ctx context.Context) context.Context {
	return context.WithValue(ctx, firingKey{}, true)
}

func isFiring(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	v, _ := ctx.Value(firingKey{}).(bool)
	return v
}

// NewSampler is Sundial's sampler: a span with a parent follows the
// parent's decision (so a firing is traced on every hop or on none); a
// root span is sampled by its trace id at firingRatio when its context was
// marked with ForFirings, and at ratio otherwise.
func NewSampler(ratio, firingRatio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(rootSampler{
		other:  sdktrace.TraceIDRatioBased(ratio),
		firing: sdktrace.TraceIDRatioBased(firingRatio),
	})
}

type rootSampler struct{ other, firing sdktrace.Sampler }

func (s rootSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if isFiring(p.ParentContext) {
		return s.firing.ShouldSample(p)
	}
	return s.other.ShouldSample(p)
}

func (s rootSampler) Description() string {
	return fmt.Sprintf("SundialRoot{other:%s,firings:%s}", s.other.Description(), s.firing.Description())
}
