package consumer

import (
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func tracedPartition(t *testing.T, tr trace.Tracer) (*partition, *lastHolder) {
	h := &lastHolder{}
	c := New(Config{Tracer: tr, Group: "g"}, h, metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return newPartition(c, "sundial.fire.high", 3), h
}

const (
	relayTP    = "00-11111111111111111111111111111111-2222222222222222-01"
	envelopeTP = "00-33333333333333333333333333333333-4444444444444444-01"
)

// An arriving firing continues the relay's context from the record header,
// else its envelope's; its consume span ends when it is finished, and its
// hold span (a child) when an executor takes it.
func TestArrivalContinuesTheRecordsTrace(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	p, h := tracedPartition(t, rec.Tracer())
	for i, c := range []struct{ header, envelope, wantParent string }{
		{relayTP, envelopeTP, relayTP},
		{"", envelopeTP, envelopeTP},
		{"garbage", envelopeTP, envelopeTP},
	} {
		r := benchRecord(t, c.envelope)
		r.Offset = int64(i)
		if c.header != "" {
			r.Headers = []kgo.RecordHeader{{Key: tracing.Header, Value: []byte(c.header)}}
		}
		p.add([]*kgo.Record{r})
		it := h.it
		if it.Trace == nil {
			t.Fatalf("case %d: a traced worker held a firing without a trace", i)
		}
		if !p.Claim(it) {
			t.Fatal("claim refused")
		}
		it.Trace.Hold.End() // as the executor does when it takes the firing
		p.Finish(it)
		want, _ := tracing.Parse(c.wantParent)
		consume := rec.Named(SpanConsume)[i]
		if consume.Parent().SpanID() != want.SpanID() || consume.SpanContext().TraceID() != want.TraceID() {
			t.Fatalf("case %d: consume span parent %v, want %v", i, consume.Parent(), want)
		}
		if consume.SpanKind() != trace.SpanKindConsumer || tracingtest.Attr(consume, "messaging.kafka.offset") != strconv.FormatInt(r.Offset, 10) {
			t.Fatalf("case %d: consume span kind %v offset %q", i, consume.SpanKind(), tracingtest.Attr(consume, "messaging.kafka.offset"))
		}
		hold := rec.Named(SpanHold)[i]
		if hold.Parent().SpanID() != consume.SpanContext().SpanID() {
			t.Fatalf("case %d: hold span is not the consume span's child", i)
		}
	}
}

// A firing without any context starts a trace here, sampled at the firing
// ratio; a firing whose partition is revoked before it ran ends its trace
// as abandoned.
func TestArrivalWithoutContextAndAbandon(t *testing.T) {
	rec := tracingtest.New(t, 1, 0)
	p, h := tracedPartition(t, rec.Tracer())
	p.add([]*kgo.Record{benchRecord(t, "")})
	if it := h.it; it.Trace == nil || it.Trace.Consume.IsRecording() || !it.Trace.Consume.SpanContext().IsValid() {
		t.Fatal("a firing without context at firing ratio 0 must get an unsampled trace of its own")
	}

	rec = tracingtest.New(t, 1, 1)
	p, _ = tracedPartition(t, rec.Tracer())
	p.add([]*kgo.Record{benchRecord(t, envelopeTP)})
	if _, n := p.detach(func(*work.Item) bool { return false }); n != 1 {
		t.Fatalf("revoke abandoned %d", n)
	}
	consume := rec.Named(SpanConsume)
	if len(consume) != 1 || tracingtest.Attr(consume[0], tracing.AttrOutcome) != outcomeAbandoned || len(rec.Named(SpanHold)) != 1 {
		t.Fatalf("after a revoke: consume %v, hold %v", consume, rec.Named(SpanHold))
	}
}

// Tracing off: no trace on the item.
func TestArrivalUntraced(t *testing.T) {
	p, h := tracedPartition(t, nil)
	p.add([]*kgo.Record{benchRecord(t, envelopeTP)})
	if h.it.Trace != nil {
		t.Fatal("an untraced worker gave a firing a trace")
	}
}
