// Package target delivers one attempt of a firing to where its job points:
// an HTTP request (HTTP) or a record on a Kafka topic (Kafka). Both carry
// the same identity headers, and both are signed, so a target can dedupe by
// Idempotency-Key, order by Sundial-Fence-Token and trust the sender. A
// traced attempt also carries its W3C traceparent.
package target

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Request is one attempt to deliver.
type Request struct {
	Firing *sundialv1.Firing
	// Fence is the lease's fence token for this attempt.
	Fence int64
	// SentAt is when the attempt starts (corrected clock); it is the
	// signature's timestamp.
	SentAt time.Time
	// Traceparent is the attempt's W3C trace context, sent as the
	// traceparent header; empty when the firing is not traced.
	Traceparent string
	// Event, when set, makes the request news of an attempt rather than
	// an attempt (firing.EventCancelled): it carries the Sundial-Event
	// header, and its Idempotency-Key is "<execution id>:<event>", so a
	// target that dedupes attempts does not take it for a duplicate.
	Event string
}

// Result is what happened. Exactly one of (HTTPStatus > 0) or Err describes
// the outcome of an HTTP attempt; a Kafka attempt sets only Err.
type Result struct {
	OK bool
	// HTTPStatus is the response status, 0 when no response arrived.
	HTTPStatus int
	// Excerpt is the start of the response body, at most ExcerptLimit bytes
	// of valid UTF-8, with secret values redacted.
	Excerpt string
	// Err describes a failure; secret values are redacted from it.
	Err error
	// Class classifies a failure (one of the Class constants; empty on
	// success). It is the dead letter's error_class.
	Class string
	// Permanent: retrying cannot help (a 4xx other than 408/429, a refused
	// address, a missing secret, a malformed target).
	Permanent bool
	// RetryAfter is the target's Retry-After (429 and 5xx), valid when
	// HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// Failure classes: the dead letter's error_class, and the reason a retry
// was scheduled.
const (
	ClassHTTP3xx        = "http_3xx" // a redirect, which is not followed (permanent)
	ClassHTTP4xx        = "http_4xx" // permanent, except 408
	ClassHTTP429        = "http_429"
	ClassHTTP5xx        = "http_5xx"
	ClassTimeout        = "timeout" // the attempt timeout expired
	ClassConnection     = "connection"
	ClassCircuitOpen    = "circuit_open"    // refused by the host's open circuit breaker
	ClassAddressRefused = "address_refused" // the outbound-address policy (permanent)
	ClassPoison         = "poison"          // delivered too often without finishing, or undecodable
	ClassKafka          = "kafka"           // a Kafka target's produce failed (or its topic is refused: permanent)
	ClassSecret         = "secret"          // a referenced secret is missing (permanent)
	ClassInvalidTarget  = "invalid_target"  // no target, bad URL, disabled target kind (permanent)
	ClassCanceled       = "canceled"        // the attempt was cancelled from outside (fenced, shutdown)
)

// Failed builds a failure result.
func Failed(class string, permanent bool, err error) Result {
	return Result{Class: class, Permanent: permanent, Err: err}
}

// ExcerptLimit bounds the response excerpt kept in the ledger.
const ExcerptLimit = 1024

// Target delivers attempts.
type Target interface {
	Fire(ctx context.Context, req Request) Result
}

// ErrNoTarget: the envelope names no target.
var ErrNoTarget = errors.New("target: firing has no target")

// Router sends each attempt to the delivery its envelope asks for.
type Router struct {
	HTTP  Target
	Kafka Target // nil: Kafka targets are refused
}

// Fire implements Target.
func (r Router) Fire(ctx context.Context, req Request) Result {
	switch req.Firing.GetTarget().GetKind().(type) {
	case *sundialv1.Target_Http:
		return r.HTTP.Fire(ctx, req)
	case *sundialv1.Target_Kafka:
		if r.Kafka == nil {
			return Failed(ClassInvalidTarget, true, errors.New("target: Kafka targets are not enabled on this worker (--allow-kafka-targets)"))
		}
		return r.Kafka.Fire(ctx, req)
	default:
		return Failed(ClassInvalidTarget, true, ErrNoTarget)
	}
}

// Header is one header name and value.
type Header struct{ Name, Value string }

// Signer makes an attempt's signature header for the firing's tenant:
// *signing.Keyring signs with the tenant's own keys,
// Secret with one platform secret.
type Signer interface {
	Sign(tenant string, ts time.Time, executionID string, body []byte) string
}

// Secret signs every tenant's requests with one secret, unnamed.
type Secret []byte

// Sign implements Signer.
func (s Secret) Sign(_ string, ts time.Time, executionID string, body []byte) string {
	return signature.Sign(s, ts, executionID, body)
}

// Headers are the identity headers of an attempt, in a fixed order, signed
// with secret over the body (the payload).
func Headers(secret []byte, req Request) []Header { return SignedHeaders(Secret(secret), req) }

// SignedHeaders are the identity headers of an attempt, in a fixed order,
// signed by s for the firing's tenant over the body (the payload). Both
// deliveries send them.
func SignedHeaders(s Signer, req Request) []Header {
	f := req.Firing
	key := f.GetExecutionId()
	if req.Event != "" {
		key += ":" + req.Event
	}
	h := []Header{
		{firing.HeaderIdempotencyKey, key},
		{firing.HeaderExecutionID, f.GetExecutionId()},
		{firing.HeaderJobID, f.GetJobId()},
		{firing.HeaderFenceToken, strconv.FormatInt(req.Fence, 10)},
		{firing.HeaderScheduledAt, f.GetScheduledTime().AsTime().UTC().Format(time.RFC3339Nano)},
		{firing.HeaderAttempt, strconv.Itoa(int(max(f.GetAttempt(), 1)))},
	}
	if f.GetCatchUp() {
		h = append(h, Header{firing.HeaderCatchUp, "true"})
	}
	if req.Event != "" {
		h = append(h, Header{firing.HeaderEvent, req.Event})
	}
	if req.Traceparent != "" {
		// Not covered by the signature, which signs the firing: a trace
		// context is advice a target may ignore.
		h = append(h, Header{tracing.Header, req.Traceparent})
	}
	h = append(h, Header{firing.HeaderSignature, s.Sign(f.GetTenant(), req.SentAt, f.GetExecutionId(), f.GetPayload())})
	return h
}

func invalidf(format string, args ...any) Result {
	return Failed(ClassInvalidTarget, true, fmt.Errorf(format, args...))
}

// Host is the host (and port, if the URL names one) an HTTP firing goes
// to, lower-cased (firing.TargetHost): the key of per-host rate limits and
// circuit breakers. Empty for other targets or an unparsable URL.
func Host(f *sundialv1.Firing) string {
	h := f.GetTarget().GetHttp()
	if h == nil {
		return ""
	}
	return urls.get(h.GetUrl()).host
}
