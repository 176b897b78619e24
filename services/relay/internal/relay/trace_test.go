package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// A record is published under a relay.publish span, the child of the
// context its envelope carries, and the span's context is the record's
// traceparent header. An unsampled firing keeps its trace id on the
// header with no span recorded; a firing without a context gets no header.
func TestPublishContinuesTheFiringsTrace(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	h := newHarness(t, clock.Real{}, nil)
	h.reg = prometheus.NewRegistry() // the untraced relay newHarness built registered on the old one
	h.relay = New(h.cfg, Deps{Outbox: h.ob, Kafka: h.kc, Logger: h.logger, Clock: clock.Real{}, Registry: h.reg, Tracer: rec.Tracer()})

	_, staged := rec.Tracer().Start(tracing.ForFirings(context.Background()), tracing.SpanStage)
	staged.End()
	sampled := tracing.Format(staged.SpanContext())
	unsampled := tracing.Format(staged.SpanContext().WithTraceFlags(0).WithSpanID(trace.SpanID{1}))
	now := time.Now()
	rows := map[string]string{ // execution id → envelope traceparent
		h.stageTraced(sundialv1.Priority_PRIORITY_HIGH, now, sampled).ExecutionID:    sampled,
		h.stageTraced(sundialv1.Priority_PRIORITY_LOW, now, unsampled).ExecutionID:   unsampled,
		h.stageTraced(sundialv1.Priority_PRIORITY_MEDIUM, now, "").ExecutionID:       "",
		h.stageTraced(sundialv1.Priority_PRIORITY_CRITICAL, now, "junk").ExecutionID: "junk",
	}
	h.start()
	h.relay.Wake()

	for _, r := range h.consume(len(rows)) {
		exec := executionOf(t, r)
		parent, hasHeader := header(r, tracing.Header)
		switch rows[exec] {
		case "":
			require.False(t, hasHeader, "a firing without a context got a traceparent header")
		case sampled:
			got, ok := tracing.Parse(parent)
			require.True(t, ok, "header %q", parent)
			require.Equal(t, staged.SpanContext().TraceID(), got.TraceID())
			require.True(t, got.IsSampled())
			spans := rec.Named(SpanPublish)
			require.Len(t, spans, 1, "only the sampled firing's publish is recorded")
			span := spans[0]
			require.Equal(t, got.SpanID(), span.SpanContext().SpanID(), "the header is the publish span")
			require.Equal(t, staged.SpanContext().SpanID(), span.Parent().SpanID(), "the publish span is the staged span's child")
			require.Equal(t, trace.SpanKindProducer, span.SpanKind())
			require.Equal(t, r.Topic, tracingtest.Attr(span, "messaging.destination.name"))
			require.Equal(t, exec, tracingtest.Attr(span, tracing.AttrExecutionID))
		case unsampled:
			got, ok := tracing.Parse(parent)
			require.True(t, ok, "header %q", parent)
			require.Equal(t, staged.SpanContext().TraceID(), got.TraceID())
			require.False(t, got.IsSampled())
		case "junk":
			require.False(t, hasHeader, "a malformed context started a trace in the relay")
		}
	}
}

func executionOf(t *testing.T, r *kgo.Record) string {
	t.Helper()
	f, err := firing.Decode(r.Value)
	require.NoError(t, err)
	return f.GetExecutionId()
}

// The failure-only series are exported at zero on a healthy relay.
func TestFailureSeriesStartAtZero(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	require.NoError(t, testutil.GatherAndCompare(h.reg, strings.NewReader(`
# HELP sundial_relay_cycle_errors_total Claim cycles that failed on Postgres, by stage (claim, delete).
# TYPE sundial_relay_cycle_errors_total counter
sundial_relay_cycle_errors_total{stage="claim"} 0
sundial_relay_cycle_errors_total{stage="delete"} 0
# HELP sundial_relay_publish_errors_total Records Kafka did not acknowledge (the rows stay for the next claim), by reason.
# TYPE sundial_relay_publish_errors_total counter
sundial_relay_publish_errors_total{reason="canceled"} 0
sundial_relay_publish_errors_total{reason="other"} 0
sundial_relay_publish_errors_total{reason="timeout"} 0
`), "sundial_relay_cycle_errors_total", "sundial_relay_publish_errors_total"))
}
