// Package tracing is Sundial's OpenTelemetry tracing: the settings every
// service has (--otel-*), the tracer provider built from them with its
// lifecycle (spans are flushed when the service stops), and the few
// helpers that carry a firing's W3C trace context from hop to hop.
//
// Tracing is off by default, and off means free: Provider.Tracer returns
// nil, and every component keeps a nil trace.Tracer and tests that one
// pointer before doing anything trace-related on its hot path — no span,
// no context, no header, no allocation.
//
// # How a firing's context travels
//
// A firing is one trace. It begins where the firing is staged: the
// prefetcher's staging transaction (or the api's TriggerJob, BackfillJob
// and RedriveDeadLetters) starts a span for each firing it writes and
// stores that span's context in the envelope (sundial.v1.Firing
// traceparent, as a W3C traceparent string). The relay publishes the row
// under a child span and puts that span's context on the Kafka record as a
// traceparent header; the worker continues from the header (or the
// envelope when there is none), and its target call sends its own span's
// context as the traceparent header of the HTTP request or Kafka record
// the target receives. A retry is staged by the worker with the failed
// attempt's context, so every attempt of an execution stays in one trace.
//
// # Sampling
//
// A staging transaction of the prefetcher can write thousands of firings,
// so firings have their own sampling ratio (--otel-firing-sample-ratio),
// applied where a firing's trace begins: Firing spans are new roots,
// linked to the span of the transaction or request that staged them, and
// sampled by their trace id at that ratio. Everything downstream follows
// the decision carried in the traceparent's sampled flag (parent-based),
// so a firing is traced end to end or not at all. Other roots (api calls,
// staging transactions) are sampled at --otel-sample-ratio.
package tracing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// Exporters --otel-exporter accepts.
const (
	ExporterNone     = "none"
	ExporterOTLPGRPC = "otlp-grpc"
	ExporterOTLPHTTP = "otlp-http"
	ExporterStdout   = "stdout"
)

// Defaults of the sampling ratios.
const (
	DefaultSampleRatio       = 1.0
	DefaultFiringSampleRatio = 0.01
)

// Config is the tracing settings of a service.
type Config struct {
	// Exporter is none (tracing off), otlp-grpc, otlp-http or stdout.
	Exporter string
	// Endpoint of the OTLP exporter as a URL (http:// means plaintext);
	// empty leaves it to OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT or the
	// exporter's default (localhost:4317 or localhost:4318).
	Endpoint string
	// SampleRatio of traces that start at a request or a background pass.
	SampleRatio float64
	// FiringSampleRatio of firings whose trace starts with their staging.
	FiringSampleRatio float64
	// ServiceName is the resource's service.name; empty means
	// sundial-<service>.
	ServiceName string
}

// flag names, also used by ApplyOTelEnv to tell which were given.
const (
	flagExporter    = "otel-exporter"
	flagEndpoint    = "otel-endpoint"
	flagRatio       = "otel-sample-ratio"
	flagFiringRatio = "otel-firing-sample-ratio"
	flagServiceName = "otel-service-name"
)

// Register adds the --otel-* flags to fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Exporter, flagExporter, ExporterNone, "OpenTelemetry trace exporter: none (tracing off, no cost), otlp-grpc, otlp-http or stdout")
	fs.StringVar(&c.Endpoint, flagEndpoint, "", "OTLP endpoint URL, e.g. http://otel-collector:4317 (otlp-grpc) or http://otel-collector:4318 (otlp-http, /v1/traces is added when the URL has no path); empty: OTEL_EXPORTER_OTLP_ENDPOINT or the exporter's default")
	fs.Float64Var(&c.SampleRatio, flagRatio, DefaultSampleRatio, "fraction of traces started by api calls and staging transactions that are recorded (0..1)")
	fs.Float64Var(&c.FiringSampleRatio, flagFiringRatio, DefaultFiringSampleRatio, "fraction of firings traced end to end, decided where a firing is staged (0..1); downstream services follow that decision")
	fs.StringVar(&c.ServiceName, flagServiceName, "", "service.name of this process's spans (default sundial-<service>)")
}

// ApplyOTelEnv fills the settings that no flag and no SUNDIAL_* variable
// set from the standard OpenTelemetry variables: OTEL_SDK_DISABLED,
// OTEL_TRACES_EXPORTER (otlp, console, none) with
// OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL, OTEL_SERVICE_NAME, and
// OTEL_TRACES_SAMPLER_ARG for a (parentbased_)traceidratio sampler. The
// exporters themselves read OTEL_EXPORTER_OTLP_* (endpoint, headers,
// certificates, timeout, compression) and the span processor OTEL_BSP_*.
// set tells which flags were given (flag.FlagSet.Visit after config.Load).
func (c *Config) ApplyOTelEnv(set map[string]bool, getenv func(string) (string, bool)) {
	env := func(k string) string {
		v, _ := getenv(k)
		return strings.TrimSpace(v)
	}
	if !set[flagExporter] {
		switch strings.ToLower(env("OTEL_TRACES_EXPORTER")) {
		case "otlp":
			proto := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
			if proto == "" {
				proto = env("OTEL_EXPORTER_OTLP_PROTOCOL")
			}
			if strings.HasPrefix(proto, "http/") {
				c.Exporter = ExporterOTLPHTTP
			} else {
				c.Exporter = ExporterOTLPGRPC
			}
		case "console":
			c.Exporter = ExporterStdout
		case "none":
			c.Exporter = ExporterNone
		}
		if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
			c.Exporter = ExporterNone
		}
	}
	if !set[flagServiceName] {
		if v := env("OTEL_SERVICE_NAME"); v != "" {
			c.ServiceName = v
		}
	}
	if !set[flagRatio] {
		switch env("OTEL_TRACES_SAMPLER") {
		case "traceidratio", "parentbased_traceidratio":
			if r, err := strconv.ParseFloat(env("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil {
				c.SampleRatio = r
			}
		case "always_off", "parentbased_always_off":
			c.SampleRatio = 0
		}
	}
}

// Validate records problems with the settings.
func (c *Config) Validate(p *config.Problems) {
	switch c.Exporter {
	case "", ExporterNone, ExporterOTLPGRPC, ExporterOTLPHTTP, ExporterStdout:
	default:
		p.Addf(flagExporter, "%q is not one of none, otlp-grpc, otlp-http, stdout", c.Exporter)
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.Addf(flagEndpoint, "%q is not an http:// or https:// URL with a host", c.Endpoint)
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		p.Addf(flagRatio, "must be between 0 and 1, got %v", c.SampleRatio)
	}
	if c.FiringSampleRatio < 0 || c.FiringSampleRatio > 1 {
		p.Addf(flagFiringRatio, "must be between 0 and 1, got %v", c.FiringSampleRatio)
	}
}

// Enabled says whether the settings turn tracing on.
func (c Config) Enabled() bool { return c.Exporter != "" && c.Exporter != ExporterNone }

// Provider owns the SDK's tracer provider of a service and implements
// lifecycle.Service: Stop flushes the spans still queued and shuts the
// exporter down. A Provider built with tracing off holds nothing.
type Provider struct {
	sdk          *sdktrace.TracerProvider
	flushTimeout time.Duration
	once         sync.Once
	err          error
}

// Option adjusts New.
type Option func(*options)

type options struct {
	stdout   io.Writer
	exporter sdktrace.SpanExporter
	batch    []sdktrace.BatchSpanProcessorOption
}

// WithStdout is where the stdout exporter writes (default os.Stdout), so
// tests can read it.
func WithStdout(w io.Writer) Option { return func(o *options) { o.stdout = w } }

// WithExporter replaces the exporter the settings name (tests); the
// settings must still turn tracing on.
func WithExporter(e sdktrace.SpanExporter) Option { return func(o *options) { o.exporter = e } }

// WithBatchOptions tunes the batch span processor (tests use a short
// timeout); without them OTEL_BSP_* and the SDK's defaults apply.
func WithBatchOptions(b ...sdktrace.BatchSpanProcessorOption) Option {
	return func(o *options) { o.batch = append(o.batch, b...) }
}

// New builds the provider of service (api, prefetcher, relay, worker).
// With the exporter none it returns a Provider whose Tracer is nil.
func New(ctx context.Context, service string, c Config, opts ...Option) (*Provider, error) {
	p := &Provider{flushTimeout: 5 * time.Second}
	if !c.Enabled() {
		return p, nil
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	exp := o.exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, c, o); err != nil {
			return nil, err
		}
	}
	name := c.ServiceName
	if name == "" {
		name = "sundial-" + service
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(
			attribute.String("service.name", name),
			attribute.String("service.namespace", "sundial"),
			attribute.Int("process.pid", os.Getpid()),
		))
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	p.sdk = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(NewSampler(c.SampleRatio, c.FiringSampleRatio)),
		// Batched, never synchronous: exporting is off the firing path,
		// and a full queue drops spans rather than slowing a firing.
		sdktrace.WithBatcher(exp, o.batch...),
	)
	return p, nil
}

func newExporter(ctx context.Context, c Config, o options) (sdktrace.SpanExporter, error) {
	switch c.Exporter {
	case ExporterStdout:
		w := o.stdout
		if w == nil {
			w = os.Stdout
		}
		return stdouttrace.New(stdouttrace.WithWriter(w))
	case ExporterOTLPGRPC:
		var eo []otlptracegrpc.Option
		if c.Endpoint != "" {
			eo = append(eo, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		// The gRPC client connects lazily: a collector that is down at
		// start costs dropped spans, never a failed start.
		return otlptracegrpc.New(ctx, eo...)
	case ExporterOTLPHTTP:
		var eo []otlptracehttp.Option
		if c.Endpoint != "" {
			u, err := url.Parse(c.Endpoint)
			if err != nil {
				return nil, fmt.Errorf("tracing: %s: %w", flagEndpoint, err)
			}
			// Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the
			// signal's path.
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			eo = append(eo, otlptracehttp.WithEndpointURL(u.String()))
		}
		return otlptracehttp.New(ctx, eo...)
	}
	return nil, fmt.Errorf("tracing: unknown exporter %q", c.Exporter)
}

// Enabled says whether spans are recorded and exported at all.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// Tracer returns the named tracer, or nil when tracing is off: components
// keep the nil and skip everything trace-related.
func (p *Provider) Tracer(name string) trace.Tracer {
	if !p.Enabled() {
		return nil
	}
	return p.sdk.Tracer(name)
}

// Start implements lifecycle.Service; the exporter needs no start.
func (p *Provider) Start(context.Context) error { return nil }

// Stop flushes queued spans (bounded) and shuts the exporter down.
// Idempotent.
func (p *Provider) Stop() {
	if !p.Enabled() {
		return
	}
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.flushTimeout)
		defer cancel()
		p.err = errors.Join(p.sdk.ForceFlush(ctx), p.sdk.Shutdown(ctx))
	})
}

// Err is what the flush and shutdown in Stop returned (an unreachable
// collector, say).
func (p *Provider) Err() error { return p.err }
