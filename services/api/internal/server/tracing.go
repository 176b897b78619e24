package server

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/tracing"
)

// tracedPrefix: only Sundial's own services are traced. Health checks and
// reflection are probes and tools, polled every few seconds; their spans
// would drown the calls people look for.
const tracedPrefix = "/sundial.v1."

// traceUnary makes every Sundial call a server span named after its method
// (sundial.v1.JobService/TriggerJob), continuing the caller's trace when
// the call's metadata carries a traceparent. It runs outermost, so refused
// calls are traced too, and the span ends with the call's gRPC code.
func traceUnary(tr trace.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, tracedPrefix) {
			return handler(ctx, req)
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(tracing.Header); len(v) > 0 {
				ctx = tracing.Context(ctx, v[0])
			}
		}
		name := strings.TrimPrefix(info.FullMethod, "/")
		service, method, _ := strings.Cut(name, "/")
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", service),
			attribute.String("rpc.method", method)))
		defer span.End()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(code)))
		if serverFault(code) {
			span.SetStatus(codes.Error, status.Convert(err).Message())
		}
		return resp, err
	}
}

// serverFault: the codes that mean the server failed, the ones a server
// span reports as an error (the others are the caller's mistakes, which
// the status code attribute still shows).
func serverFault(c grpccodes.Code) bool {
	switch c {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal,
		grpccodes.Unavailable, grpccodes.DataLoss:
		return true
	}
	return false
}

// tenantOnSpan puts the authenticated tenant on the call's span; it runs
// after authentication, innermost.
func tenantOnSpan() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if t, ok := auth.TenantFrom(ctx); ok {
			if span := trace.SpanFromContext(ctx); span.IsRecording() {
				span.SetAttributes(tracing.AttrTenant.String(t))
			}
		}
		return handler(ctx, req)
	}
}
