package server

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
)

// Metrics are the api's Prometheus series.
type Metrics struct {
	requests               *prometheus.CounterVec
	latency                *prometheus.HistogramVec
	versionPublishFailures prometheus.Counter
	droppedFirings         prometheus.Counter
	idempotentReplays      prometheus.Counter
	triggers               prometheus.Counter
	quotaRejections        *prometheus.CounterVec
	backfills              *prometheus.CounterVec
	backfillFirings        prometheus.Counter
	deadLettersListed      prometheus.Counter
	deadLettersRedriven    prometheus.Counter
	redrives               *prometheus.CounterVec
}

// NewMetrics registers the api's metrics with reg; nil registers nowhere
// (tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_api_requests_total",
			Help: "gRPC requests handled, by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sundial_api_request_duration_seconds",
			Help:    "gRPC request latency, by method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
		versionPublishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_version_publish_failures_total",
			Help: "Job changes whose new version could not be published to workers (Redis).",
		}),
		droppedFirings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_dropped_firings_total",
			Help: "Unpublished outbox rows deleted because their job changed.",
		}),
		idempotentReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_idempotent_replays_total",
			Help: "CreateJob calls answered with the job an earlier call with the same idempotency key created.",
		}),
		triggers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_triggers_total",
			Help: "Manual triggers staged.",
		}),
		quotaRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_api_quota_rejections_total",
			Help: "Requests refused with ResourceExhausted, by quota (max_jobs, min_interval, create_rate, and request_rate: the per-token call rate limit).",
		}, []string{"quota"}),
		backfills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_api_backfills_total",
			Help: "BackfillJob calls that succeeded, by mode (dry_run or staged).",
		}, []string{"mode"}),
		backfillFirings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_backfill_firings_total",
			Help: "Firings staged by backfills.",
		}),
		deadLettersListed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_dead_letters_listed_total",
			Help: "Dead letters returned by ListDeadLetters and GetDeadLetter.",
		}),
		deadLettersRedriven: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_api_dead_letters_redriven_total",
			Help: "Dead letters re-driven (firings staged with fresh attempts).",
		}),
		redrives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_api_redrives_total",
			Help: "RedriveDeadLetters calls that succeeded, by mode (dry_run or staged).",
		}, []string{"mode"}),
	}
	// Failure-only series exist at zero from the start, so dashboards and
	// alerts see 0 on a healthy api rather than no data.
	for _, q := range []string{quotas.MaxJobs, quotas.MinInterval, quotas.CreateRate, QuotaRequestRate} {
		m.quotaRejections.WithLabelValues(q)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.versionPublishFailures, m.droppedFirings, m.idempotentReplays, m.triggers,
			m.quotaRejections, m.backfills, m.backfillFirings, m.deadLettersListed, m.deadLettersRedriven, m.redrives)
	}
	return m
}

// methodName is the last element of a full gRPC method name.
func methodName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}

func (m *Metrics) observe(fullMethod string, start time.Time, err error) {
	name := methodName(fullMethod)
	m.requests.WithLabelValues(name, status.Code(err).String()).Inc()
	m.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
}

// UnaryServerInterceptor counts and times unary calls. It runs outside
// authentication, so refused calls are counted too.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observe(info.FullMethod, start, err)
		return resp, err
	}
}

// StreamServerInterceptor counts and times streaming calls.
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.observe(info.FullMethod, start, err)
		return err
	}
}
