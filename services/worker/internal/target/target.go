// Package target delivers one attempt of a firing to where its job points:
// an HTTP request (HTTP) or a record on a Kafka topic (Kafka). Both carry
// the same identity headers, and both are signed, so a target can dedupe by
// Idempotency-Key, order by Sundial-Fence-Token and trust the sender.
package target

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/signature"
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
}

// Result is what happened. Exactly one of (HTTPStatus > 0) or Err describes
// the outcome of an HTTP attempt; a Kafka attempt sets only Err.
type Result struct {
	OK bool
	// HTTPStatus is the response status, 0 when no response arrived.
	HTTPStatus int
	// Excerpt is the start of the response body, at most ExcerptLimit bytes
	// of valid UTF-8.
	Excerpt string
	Err     error
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
			return Result{Err: errors.New("target: Kafka targets are not enabled on this worker (--allow-kafka-targets)")}
		}
		return r.Kafka.Fire(ctx, req)
	default:
		return Result{Err: ErrNoTarget}
	}
}

// Header is one header name and value.
type Header struct{ Name, Value string }

// Headers are the identity headers of an attempt, in a fixed order, signed
// with secret over the body (the payload). Both deliveries send them.
func Headers(secret []byte, req Request) []Header {
	f := req.Firing
	h := []Header{
		{firing.HeaderIdempotencyKey, f.GetExecutionId()},
		{firing.HeaderExecutionID, f.GetExecutionId()},
		{firing.HeaderJobID, f.GetJobId()},
		{firing.HeaderFenceToken, strconv.FormatInt(req.Fence, 10)},
		{firing.HeaderScheduledAt, f.GetScheduledTime().AsTime().UTC().Format(time.RFC3339Nano)},
		{firing.HeaderAttempt, strconv.Itoa(int(max(f.GetAttempt(), 1)))},
	}
	if f.GetCatchUp() {
		h = append(h, Header{firing.HeaderCatchUp, "true"})
	}
	h = append(h, Header{firing.HeaderSignature, signature.Sign(secret, req.SentAt, f.GetExecutionId(), f.GetPayload())})
	return h
}

func errorf(format string, args ...any) Result { return Result{Err: fmt.Errorf(format, args...)} }
