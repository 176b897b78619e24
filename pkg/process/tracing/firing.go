package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Attribute keys Sundial's spans share.
const (
	AttrExecutionID = attribute.Key("sundial.execution_id")
	AttrJobID       = attribute.Key("sundial.job_id")
	AttrTenant      = attribute.Key("sundial.tenant")
	AttrAttempt     = attribute.Key("sundial.attempt")
	AttrPriority    = attribute.Key("sundial.priority")
	AttrOrigin      = attribute.Key("sundial.origin")
	AttrScheduledAt = attribute.Key("sundial.scheduled_time")
	AttrFireAt      = attribute.Key("sundial.fire_time")
	AttrCatchUp     = attribute.Key("sundial.catch_up")
	AttrOutcome     = attribute.Key("sundial.outcome")
)

// FiringAttributes describe one firing on a span.
func FiringAttributes(f *sundialv1.Firing) []attribute.KeyValue {
	a := []attribute.KeyValue{
		AttrExecutionID.String(f.GetExecutionId()),
		AttrJobID.String(f.GetJobId()),
		AttrTenant.String(f.GetTenant()),
		AttrAttempt.Int(int(max(f.GetAttempt(), 1))),
		AttrPriority.String(f.GetPriority().String()),
		AttrOrigin.String(f.GetOrigin().String()),
	}
	if t := f.GetScheduledTime(); t != nil {
		a = append(a, AttrScheduledAt.String(t.AsTime().UTC().Format(time.RFC3339Nano)))
	}
	if t := f.GetFireTime(); t != nil {
		a = append(a, AttrFireAt.String(t.AsTime().UTC().Format(time.RFC3339Nano)))
	}
	if f.GetCatchUp() {
		a = append(a, AttrCatchUp.Bool(true))
	}
	return a
}

// SpanStage is the name of the span that stands for a firing being staged.
const SpanStage = "firing.stage"

// Stager starts the span of every firing one transaction stages and
// writes its context into the firing's envelope. Each firing's span is the
// root of that firing's trace (sampled at the firing ratio) linked to the
// transaction's span — or, with AsChild, a child of it, for the one firing
// a TriggerJob call stages. The spans end when the transaction does (End),
// so a rolled-back transaction marks them failed.
//
// A nil *Stager (tracing off) does nothing, so call sites need no test.
type Stager struct {
	tracer trace.Tracer
	parent context.Context
	ctx    context.Context
	opts   []trace.SpanStartOption
	open   []trace.Span
}

// StagerOption adjusts NewStager.
type StagerOption func(*Stager)

// AsChild makes each firing's span a child of the span in the context
// rather than a new root: for a request that stages one firing, so the
// request and the firing read as one trace.
func AsChild() StagerOption {
	return func(s *Stager) { s.opts = nil; s.ctx = s.parent }
}

// NewStager returns a Stager for the transaction whose span is in ctx;
// nil when tracer is nil.
func NewStager(ctx context.Context, tracer trace.Tracer, opts ...StagerOption) *Stager {
	if tracer == nil {
		return nil
	}
	s := &Stager{tracer: tracer, parent: ctx, ctx: ForFirings(ctx)}
	s.opts = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(ctx))}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Stage starts the span of f, sets f.Traceparent to its context, and
// returns it.
func (s *Stager) Stage(f *sundialv1.Firing) string {
	if s == nil {
		return ""
	}
	_, span := s.tracer.Start(s.ctx, SpanStage, s.opts...)
	f.Traceparent = Format(span.SpanContext())
	if span.IsRecording() {
		span.SetAttributes(FiringAttributes(f)...)
		s.open = append(s.open, span)
	} else {
		span.End()
	}
	return f.Traceparent
}

// Staged is how many recorded firing spans are open.
func (s *Stager) Staged() int {
	if s == nil {
		return 0
	}
	return len(s.open)
}

// End ends the firing spans: failed with err when the transaction did not
// commit.
func (s *Stager) End(err error) {
	if s == nil {
		return
	}
	for _, span := range s.open {
		if err != nil {
			span.SetStatus(codes.Error, "not staged: "+err.Error())
		}
		span.End()
	}
	s.open = nil
}
