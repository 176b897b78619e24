//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// otlpSpan is what the test keeps of an exported span.
type otlpSpan struct {
	service, name           string
	traceID, spanID, parent string
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests the services' otlp-http exporters send to /v1/traces.
type otlpReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []otlpSpan
	changed chan struct{} // signalled after every export and every sink request
}

func newOTLPReceiver(t *testing.T, changed chan struct{}) *otlpReceiver {
	r := &otlpReceiver{changed: changed}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, otlpSpan{service: service, name: s.GetName(),
						traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
						parent: hex.EncodeToString(s.GetParentSpanId())})
				}
			}
		}
		r.mu.Unlock()
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
		signal(r.changed)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// trace is the spans of one trace id, by name.
func (r *otlpReceiver) trace(id string) map[string][]otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]otlpSpan{}
	for _, s := range r.spans {
		if s.traceID == id {
			out[s.name] = append(out[s.name], s)
		}
	}
	return out
}

// tracedDelivery is one request the sink received.
type tracedDelivery struct {
	execution, attempt, traceparent string
}

// TestTracingFollowsAFiringEndToEnd runs the four services with the
// otlp-http exporter aimed at a receiver in the test, and follows two
// firings: a scheduled one-off whose first attempt fails (prefetcher →
// relay → worker → target, then the retry through the outbox and the relay
// again) and a manual trigger (api → relay → worker → target). Each
// firing's spans, from every service, share one trace id, hang together
// parent to child, and the target received that trace's traceparent
// header, naming the worker's target span.
func TestTracingFollowsAFiringEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	changed := make(chan struct{}, 1)
	receiver := newOTLPReceiver(t, changed)

	var mu sync.Mutex
	var got []tracedDelivery
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := tracedDelivery{r.Header.Get(firing.HeaderExecutionID), r.Header.Get(firing.HeaderAttempt), r.Header.Get(tracing.Header)}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		signal(changed)
		if d.attempt == "1" && r.URL.Path == "/flaky" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	infra := harness.InfraFromEnv()
	ns, err := harness.NewNamespace(ctx, infra, "e2e-tracing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Drop(context.Background()); err != nil {
			t.Logf("namespace %s not cleaned up: %v", ns.Name, err)
		}
	})
	plat, err := harness.NewPlatform(harness.Config{
		BinDir: binDir, Infra: infra, Namespace: ns, LogDir: t.TempDir(), TLS: tlsMode,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Env: []string{
			"SUNDIAL_OTEL_EXPORTER=otlp-http",
			"SUNDIAL_OTEL_ENDPOINT=" + receiver.srv.URL,
			// Every firing traced; the default traces one in a hundred.
			"SUNDIAL_OTEL_FIRING_SAMPLE_RATIO=1",
			// The standard variable of the SDK's batch processor: export
			// every 100 ms rather than every 5 s.
			"OTEL_BSP_SCHEDULE_DELAY=100",
			// The sink is on loopback, which the worker refuses otherwise.
			"SUNDIAL_ALLOW_TARGET_ADDRS=127.0.0.1",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plat.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			for _, pr := range plat.Processes() {
				t.Logf("---- %s log (tail) ----\n%s", pr.Name, harness.Tail(pr.LogPath, 40))
			}
		}
	})
	if _, err := plat.StartAPI(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"relay", "prefetcher", "worker"} {
		if _, err := plat.Start(ctx, svc, svc); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := plat.Client()
	if err != nil {
		t.Fatal(err)
	}

	_, err = cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "traced-one-off",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Now().Add(4 * time.Second).Truncate(time.Second))}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: sink.URL + "/flaky"}}},
		Retry: &sundialv1.RetryPolicy{MaxAttempts: 2, Backoff: sundialv1.Backoff_BACKOFF_FIXED,
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Second)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	manual, err := cl.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{
		Name:     "traced-yearly",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 1 1 *"}, Timezone: "UTC"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: sink.URL + "/manual"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	trig, err := cl.TriggerJob(ctx, &sundialv1.TriggerJobRequest{Id: manual.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}

	deliveries := func() map[string][]tracedDelivery {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]tracedDelivery{}
		for _, d := range got {
			out[d.execution] = append(out[d.execution], d)
		}
		return out
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	var scheduledExec string
	wait("both attempts of the one-off and the trigger at the sink", func() bool {
		ds := deliveries()
		for exec, d := range ds {
			if exec != trig.GetExecutionId() && len(d) >= 2 {
				scheduledExec = exec
			}
		}
		return scheduledExec != "" && len(ds[trig.GetExecutionId()]) >= 1
	})

	// Every spot the firing passed must have exported its span: wait for
	// each trace to be complete, then check how it hangs together.
	type check struct {
		name      string
		delivered []tracedDelivery
		origin    string // the service and span where the trace begins
		want      map[string]int
	}
	ds := deliveries()
	for _, c := range []check{
		{"scheduled", ds[scheduledExec][:2], "sundial-prefetcher " + tracing.SpanStage,
			map[string]int{tracing.SpanStage: 1, "relay.publish": 2, "worker.consume": 2, "worker.target": 2, "worker.settle": 1}},
		{"triggered", ds[trig.GetExecutionId()][:1], "sundial-api " + tracing.SpanStage,
			map[string]int{"sundial.v1.JobService/TriggerJob": 1, tracing.SpanStage: 1, "relay.publish": 1, "worker.consume": 1, "worker.target": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, ok := tracing.Parse(c.delivered[0].traceparent)
			if !ok {
				t.Fatalf("the target got traceparent %q", c.delivered[0].traceparent)
			}
			traceID := first.TraceID().String()
			for _, d := range c.delivered {
				sc, ok := tracing.Parse(d.traceparent)
				if !ok || sc.TraceID().String() != traceID || !sc.IsSampled() {
					t.Fatalf("attempt %s reached the target with traceparent %q, want one in trace %s", d.attempt, d.traceparent, traceID)
				}
			}
			var spans map[string][]otlpSpan
			wait(fmt.Sprintf("the spans of trace %s", traceID), func() bool {
				spans = receiver.trace(traceID)
				for name, n := range c.want {
					if len(spans[name]) < n {
						return false
					}
				}
				return true
			})
			byID := map[string]otlpSpan{}
			services := map[string]bool{}
			for _, ss := range spans {
				for _, s := range ss {
					byID[s.spanID] = s
					services[s.service] = true
				}
			}
			for _, svc := range []string{"sundial-relay", "sundial-worker"} {
				if !services[svc] {
					t.Errorf("no span of %s in the trace", svc)
				}
			}
			// Walk from what the target received up to the root: the
			// worker's target span, its consume span, the relay's publish,
			// and where the firing was staged.
			for _, d := range c.delivered {
				sc, _ := tracing.Parse(d.traceparent)
				var path []string
				for id := sc.SpanID().String(); id != "" && id != "0000000000000000"; {
					s, ok := byID[id]
					if !ok {
						t.Fatalf("attempt %s: span %s (below %v) was not exported", d.attempt, id, path)
					}
					path = append(path, s.service+" "+s.name)
					id = s.parent
				}
				joined := strings.Join(path, " < ")
				if !strings.HasPrefix(joined, "sundial-worker worker.target < sundial-worker worker.consume < sundial-relay relay.publish < ") ||
					!strings.Contains(joined, c.origin) {
					t.Fatalf("attempt %s: from the target up: %s; want worker.target < worker.consume < relay.publish < … %s", d.attempt, joined, c.origin)
				}
				t.Logf("attempt %s: %s", d.attempt, joined)
			}
		})
	}
}
