package tracing

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/config"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFormatParseAgreeWithThePropagator(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	_, span := tp.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	for _, sc := range []trace.SpanContext{span.SpanContext(), span.SpanContext().WithTraceFlags(0)} {
		got := Format(sc)
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
		if want := carrier.Get(Header); got != want {
			t.Fatalf("Format = %q, the propagator writes %q", got, want)
		}
		back, ok := Parse(got)
		if !ok {
			t.Fatalf("Parse(%q) refused it", got)
		}
		ext := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		if !back.Equal(ext) {
			t.Fatalf("Parse = %+v, the propagator extracts %+v", back, ext)
		}
		if !back.IsRemote() || back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || back.IsSampled() != sc.IsSampled() {
			t.Fatalf("round trip of %v gave %v", sc, back)
		}
	}
	if Format(trace.SpanContext{}) != "" {
		t.Fatal("an invalid span context formats as a header")
	}
}

func TestParseRefusesWhatTheRecommendationRefuses(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, ok := Parse(good); !ok {
		t.Fatalf("Parse(%q) refused", good)
	}
	// A later version may append fields.
	if sc, ok := Parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"); !ok || !sc.IsSampled() {
		t.Fatal("a future version with more fields was refused")
	}
	for _, bad := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has exactly four fields
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
	} {
		if sc, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) = %v, want refused", bad, sc)
		}
	}
	ctx := context.Background()
	if Context(ctx, "garbage") != ctx || Context(ctx, "") != ctx {
		t.Fatal("Context changed ctx for a bad or empty traceparent")
	}
	if sc := trace.SpanContextFromContext(Context(ctx, good)); !sc.IsRemote() || Format(sc) != good {
		t.Fatalf("Context carried %v", sc)
	}
}

func TestSamplerRatiosAndParents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(NewSampler(1, 0)), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")
	ctx := context.Background()

	_, req := tr.Start(ctx, "request")
	if !req.IsRecording() {
		t.Fatal("a root span at ratio 1 was not sampled")
	}
	_, f := tr.Start(ForFirings(ctx), "firing")
	if f.IsRecording() || f.SpanContext().IsSampled() {
		t.Fatal("a firing root at firing ratio 0 was sampled")
	}
	if !f.SpanContext().IsValid() {
		t.Fatal("an unsampled firing has no span context to propagate")
	}
	// Downstream follows the firing's decision, not the general ratio.
	_, child := tr.Start(Context(ctx, Format(f.SpanContext())), "publish")
	if child.IsRecording() {
		t.Fatal("the child of an unsampled firing was sampled")
	}
	if child.SpanContext().TraceID() != f.SpanContext().TraceID() {
		t.Fatal("the child left its parent's trace")
	}
	// And a sampled parent is followed even at firing ratio 0.
	_, sampled := tr.Start(ForFirings(Context(ctx, Format(req.SpanContext()))), "consume")
	if !sampled.IsRecording() {
		t.Fatal("the child of a sampled span was dropped")
	}
	for _, s := range []trace.Span{req, f, child, sampled} {
		s.End()
	}
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("%d spans recorded, want 2", n)
	}
}

func firing(exec string) *sundialv1.Firing {
	return &sundialv1.Firing{ExecutionId: exec, JobId: "job-1", Tenant: "acme", Attempt: 1, Priority: sundialv1.Priority_PRIORITY_HIGH}
}

func TestStagerGivesEachFiringItsOwnTraceLinkedToTheBatch(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(NewSampler(1, 1)), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")

	ctx, batch := tr.Start(context.Background(), "prefetch.batch")
	st := NewStager(ctx, tr)
	a, b := firing("e-1"), firing("e-2")
	st.Stage(a)
	st.Stage(b)
	if st.Staged() != 2 || len(rec.Ended()) != 0 {
		t.Fatalf("staged %d, ended %d: firing spans must stay open until the transaction ends", st.Staged(), len(rec.Ended()))
	}
	st.End(nil)
	batch.End()

	sa, _ := Parse(a.GetTraceparent())
	sb, _ := Parse(b.GetTraceparent())
	if !sa.IsValid() || !sb.IsValid() || sa.TraceID() == sb.TraceID() || sa.TraceID() == batch.SpanContext().TraceID() {
		t.Fatalf("traceparents %q %q: want one new trace per firing", a.GetTraceparent(), b.GetTraceparent())
	}
	for _, s := range rec.Ended() {
		if s.Name() != SpanStage {
			continue
		}
		if s.Parent().IsValid() {
			t.Fatalf("firing span has parent %v, want a root", s.Parent())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
			t.Fatalf("firing span links %v, want the batch span", s.Links())
		}
		if !hasAttr(s, AttrExecutionID.String("e-1")) && !hasAttr(s, AttrExecutionID.String("e-2")) {
			t.Fatalf("firing span attributes %v name no execution", s.Attributes())
		}
	}
}

func TestStagerAsChildAndRollback(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(NewSampler(1, 0)), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("t")

	ctx, call := tr.Start(context.Background(), "TriggerJob")
	st := NewStager(ctx, tr, AsChild())
	f := firing("e-1")
	st.Stage(f)
	st.End(errors.New("serialization failure"))
	call.End()
	sc, _ := Parse(f.GetTraceparent())
	if sc.TraceID() != call.SpanContext().TraceID() || !sc.IsSampled() {
		t.Fatalf("a triggered firing's context %v is not in the call's sampled trace (firing ratio 0 must not apply to a child)", sc)
	}
	spans := rec.Ended()
	if spans[0].Name() != SpanStage || spans[0].Status().Code != codes.Error {
		t.Fatalf("rolled-back firing span %q has status %v", spans[0].Name(), spans[0].Status())
	}

	var off *Stager
	g := firing("e-2")
	if off.Stage(g) != "" || g.GetTraceparent() != "" || off.Staged() != 0 {
		t.Fatal("a nil Stager staged something")
	}
	off.End(nil)
	if NewStager(ctx, nil) != nil {
		t.Fatal("NewStager without a tracer is not nil")
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, kv attribute.KeyValue) bool {
	for _, a := range s.Attributes() {
		if a.Key == kv.Key && a.Value.String() == kv.Value.String() {
			return true
		}
	}
	return false
}

func TestConfigFlagsEnvAndValidation(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c Config
	c.Register(fs)
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_SERVICE_NAME":           "from-env",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.25",
		"SUNDIAL_OTEL_SERVICE_NAME":   "from-sundial-env",
	}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := config.Load(fs, nil, getenv); err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || c.FiringSampleRatio != DefaultFiringSampleRatio {
		t.Fatalf("defaults: %+v", c)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.ApplyOTelEnv(set, getenv)
	if c.Exporter != ExporterOTLPHTTP || c.ServiceName != "from-sundial-env" || c.SampleRatio != 0.25 {
		t.Fatalf("after OTEL_* env: %+v (SUNDIAL_* must win over OTEL_*)", c)
	}
	env["OTEL_SDK_DISABLED"] = "true"
	c.ApplyOTelEnv(set, getenv)
	if c.Enabled() {
		t.Fatal("OTEL_SDK_DISABLED=true left tracing on")
	}

	bad := Config{Exporter: "jaeger", Endpoint: "collector:4317", SampleRatio: 2, FiringSampleRatio: -1}
	var p config.Problems
	bad.Validate(&p)
	err := p.Err()
	for _, name := range []string{flagExporter, flagEndpoint, flagRatio, flagFiringRatio} {
		if err == nil || !strings.Contains(err.Error(), name+":") {
			t.Errorf("Validate(%+v) = %v, want a problem naming %s", bad, err, name)
		}
	}
}

func TestProviderOffIsNothing(t *testing.T) {
	p, err := New(context.Background(), "worker", Config{Exporter: ExporterNone})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() || p.Tracer("x") != nil {
		t.Fatal("tracing off still hands out a tracer")
	}
	p.Stop()
	p.Stop()
}

func TestProviderStdoutFlushesOnStop(t *testing.T) {
	var out logbuf.Buffer
	p, err := New(context.Background(), "relay", Config{Exporter: ExporterStdout, SampleRatio: 1}, WithStdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("test").Start(context.Background(), "relay.publish")
	span.End()
	if out.String() != "" {
		t.Fatal("exported before the batch was due: the processor is not batching")
	}
	p.Stop()
	p.Stop()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, `"relay.publish"`) || !strings.Contains(got, "sundial-relay") {
		t.Fatalf("stdout export lacks the span or the default service name:\n%s", got)
	}
}

func TestProviderOTLPHTTPPostsToTheTracesPath(t *testing.T) {
	type post struct{ path, contentType string }
	got := make(chan post, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- post{r.URL.Path, r.Header.Get("Content-Type")}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p, err := New(context.Background(), "api", Config{Exporter: ExporterOTLPHTTP, Endpoint: srv.URL, SampleRatio: 1},
		WithBatchOptions(sdktrace.WithBatchTimeout(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("test").Start(context.Background(), "sundial.v1.JobService/CreateJob")
	span.End()
	p.Stop()
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.path != "/v1/traces" || r.contentType != "application/x-protobuf" {
			t.Fatalf("exporter posted %+v", r)
		}
	default:
		t.Fatal("Stop did not flush the span to the collector")
	}
}

// BenchmarkStage is the prefetcher's (and the api's) cost per staged firing
// with tracing on: a span started for each, sampled out or in.
func BenchmarkStage(b *testing.B) {
	for _, ratio := range []float64{0, 1} {
		b.Run(map[float64]string{0: "unsampled", 1: "sampled"}[ratio], func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(NewSampler(1, ratio)), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tr := tp.Tracer("bench")
			ctx, batch := tr.Start(context.Background(), "prefetch.batch")
			defer batch.End()
			f := firing("e-1")
			b.ReportAllocs()
			for b.Loop() {
				st := NewStager(ctx, tr)
				st.Stage(f)
				st.End(nil)
			}
		})
	}
}
