package stage

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/slots"
)

// Each staged row's envelope carries the context of its own firing span,
// a root linked to the transaction's span; without a tracer it carries
// none.
func TestAddPutsTheFiringSpanInTheEnvelope(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	tr := rec.Tracer()

	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	j := claimed{id: uuid.Must(uuid.NewV7()), tenant: "acme", version: 3, next: now, created: now.Add(-time.Hour)}
	job := &sundialv1.Job{Id: j.id.String(), Tenant: "acme", Version: 3, Priority: sundialv1.Priority_PRIORITY_HIGH,
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://example.test/hook"}}}}
	pace := newPacer(now, time.Time{}, 0)

	ctx, batch := tr.Start(context.Background(), SpanBatch)
	st := tracing.NewStager(ctx, tr)
	var out rows
	for i := range 3 {
		sl := slots.Slot{At: now.Add(time.Duration(i+1) * time.Second)}
		require.NoError(t, out.add(j, sl, job, false, &pace, now, 2*time.Minute, st))
	}
	st.End(nil)
	batch.End()

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Named(tracing.SpanStage) {
		spans[s.SpanContext().TraceID().String()] = s
	}
	require.Len(t, spans, 3, "one trace per firing")
	for i, r := range out {
		f, err := firing.Decode(r.Envelope)
		require.NoError(t, err)
		sc, ok := tracing.Parse(f.GetTraceparent())
		require.True(t, ok, "envelope %d traceparent %q", i, f.GetTraceparent())
		s := spans[sc.TraceID().String()]
		require.NotNil(t, s, "envelope %d names a trace no firing span started", i)
		require.Equal(t, s.SpanContext().SpanID(), sc.SpanID())
		require.Equal(t, r.ExecutionID.String(), tracingtest.Attr(s, tracing.AttrExecutionID))
		require.Len(t, s.Links(), 1)
		require.Equal(t, batch.SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())
	}

	var plain rows
	require.NoError(t, plain.add(j, slots.Slot{At: now.Add(time.Second)}, job, false, &pace, now, 2*time.Minute, nil))
	f, err := firing.Decode(plain[0].Envelope)
	require.NoError(t, err)
	require.Empty(t, f.GetTraceparent(), "tracing off wrote a traceparent")
}
