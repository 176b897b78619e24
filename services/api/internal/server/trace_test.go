package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// stagingStore runs a Stage's plan against an active hourly job and keeps
// the firings it planned.
type stagingStore struct {
	Store
	mu      sync.Mutex
	firings []*sundialv1.Firing
}

func (s *stagingStore) Stage(_ context.Context, tenant, id string, dryRun bool, fn store.StageFunc) (store.StageResult, error) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	job := validJob()
	job.Id, job.Tenant, job.Version, job.Status = id, tenant, 1, sundialv1.JobStatus_JOB_STATUS_ACTIVE
	job.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}}
	job.CreateTime = timestamppb.New(now.Add(-24 * time.Hour))
	plan, err := fn(now, job)
	if err != nil {
		return store.StageResult{}, err
	}
	res := store.StageResult{Job: job, Now: now, Plan: plan}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range plan.Firings {
		if !dryRun {
			res.Inserted = append(res.Inserted, st.Firing)
			s.firings = append(s.firings, st.Firing)
		}
	}
	return res, nil
}

const callerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A call is a server span continuing the caller's traceparent; the one
// firing TriggerJob stages is a child span whose context the envelope
// carries; refused calls are traced, health checks are not.
func TestTriggerJobIsOneTraceWithItsFiring(t *testing.T) {
	rec := tracingtest.New(t, 1, 0) // firing ratio 0: a triggered firing follows its call instead
	st := &stagingStore{}
	jobs, err := NewJobService(Config{Store: st, Versions: noVersions{}, Clock: clock.Real{}, Tracer: rec.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens(map[string]string{"tok": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: jobs, Tracer: rec.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	client := sundialv1.NewJobServiceClient(conn)
	if _, err := client.TriggerJob(ctx, &sundialv1.TriggerJobRequest{Id: someID}); status.Code(err) != grpccodes.Unauthenticated {
		t.Fatalf("call without token: %v", err)
	}
	callCtx := metadata.AppendToOutgoingContext(ctx, tracing.Header, callerTP)
	if _, err := client.TriggerJob(callCtx, &sundialv1.TriggerJobRequest{Id: someID}, grpc.PerRPCCredentials(auth.Bearer("tok"))); err != nil {
		t.Fatal(err)
	}

	calls := rec.Named("sundial.v1.JobService/TriggerJob")
	if len(calls) != 2 || len(rec.Ended()) != 3 {
		t.Fatalf("%d TriggerJob spans of %d spans, want 2 of 3 (no health check span)", len(calls), len(rec.Ended()))
	}
	refused, call := calls[0], calls[1]
	if tracingtest.Attr(refused, "rpc.grpc.status_code") != "16" || refused.Status().Code == codes.Error {
		t.Fatalf("refused call: status code %q, span status %v (a caller's mistake is no server error)",
			tracingtest.Attr(refused, "rpc.grpc.status_code"), refused.Status())
	}
	caller, _ := tracing.Parse(callerTP)
	if call.Parent().SpanID() != caller.SpanID() || call.SpanContext().TraceID() != caller.TraceID() || call.SpanKind() != trace.SpanKindServer {
		t.Fatalf("call span parent %v kind %v, want the caller's context", call.Parent(), call.SpanKind())
	}
	if tracingtest.Attr(call, tracing.AttrTenant) != "acme" || tracingtest.Attr(call, "rpc.method") != "TriggerJob" {
		t.Fatalf("call span attributes %v", call.Attributes())
	}
	staged := rec.Named(tracing.SpanStage)
	if len(staged) != 1 || staged[0].Parent().SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("firing spans %v, want one child of the call", staged)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if got := st.firings[0].GetTraceparent(); got != tracing.Format(staged[0].SpanContext()) {
		t.Fatalf("envelope traceparent %q, want the firing span's", got)
	}
}

// A backfill's firings are traces of their own, linked to the call; a dry
// run traces none; without a tracer nothing is traced.
func TestBackfilledFiringsAreTracesLinkedToTheCall(t *testing.T) {
	rec := tracingtest.New(t, 1, 1)
	st := &stagingStore{}
	s, err := NewJobService(Config{Store: st, Versions: noVersions{}, Clock: clock.Real{}, Tracer: rec.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 5, 6, 30, 0, 0, time.UTC)
	req := &sundialv1.BackfillJobRequest{Id: someID, StartTime: timestamppb.New(start), EndTime: timestamppb.New(start.Add(3 * time.Hour)), DryRun: true}
	ctx, call := rec.Tracer().Start(tenantCtx, "call")
	if _, err := s.BackfillJob(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Named(tracing.SpanStage)); n != 0 {
		t.Fatalf("a dry run traced %d firings", n)
	}
	req.DryRun = false
	if _, err := s.BackfillJob(ctx, req); err != nil {
		t.Fatal(err)
	}
	call.End()
	staged := rec.Named(tracing.SpanStage)
	if len(staged) != 3 {
		t.Fatalf("%d firing spans for 3 slots", len(staged))
	}
	traces := map[trace.TraceID]bool{}
	for _, f := range staged {
		traces[f.SpanContext().TraceID()] = true
		if f.Parent().IsValid() || len(f.Links()) != 1 || f.Links()[0].SpanContext.SpanID() != call.SpanContext().SpanID() {
			t.Fatalf("firing span parent %v links %v, want a root linked to the call", f.Parent(), f.Links())
		}
	}
	if len(traces) != 3 {
		t.Fatal("backfilled firings share a trace")
	}

	plain, err := NewJobService(Config{Store: &stagingStore{}, Versions: noVersions{}, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.BackfillJob(tenantCtx, req); err != nil {
		t.Fatal(err)
	}
}

// The quota rejection series exist at zero on a healthy api.
func TestQuotaRejectionsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sundial_api_quota_rejections_total Requests refused with ResourceExhausted, by quota (max_jobs, min_interval, create_rate, and request_rate: the per-token call rate limit).
# TYPE sundial_api_quota_rejections_total counter
sundial_api_quota_rejections_total{quota="create_rate"} 0
sundial_api_quota_rejections_total{quota="max_jobs"} 0
sundial_api_quota_rejections_total{quota="min_interval"} 0
sundial_api_quota_rejections_total{quota="request_rate"} 0
`), "sundial_api_quota_rejections_total"); err != nil {
		t.Fatal(err)
	}
}
