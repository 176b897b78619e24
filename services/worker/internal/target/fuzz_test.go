package target

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// FuzzHeaders builds the identity headers of an attempt of any envelope a
// record may carry. It never panics; the headers say what the envelope
// and the lease say (the idempotency key is the execution id, the fence is
// the lease's); and the signature verifies against the secret, the
// execution id and the payload the request carries, so a target checking
// it never rejects a genuine attempt (an envelope whose execution id has a
// '.', which no genuine one has, is refused as malformed). Host, the key of
// the per-host limits, never panics either.
func FuzzHeaders(f *testing.F) {
	for _, e := range []*sundialv1.Firing{
		envelope(&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://API.example.com:8443/x?y"}}}, true),
		envelope(nil, false),
		{},
	} {
		b, err := firing.Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, int64(1746090000123456), sent.UnixNano(), "")
	}
	f.Add([]byte{}, int64(-1), int64(0), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, b []byte, fence, sentNanos int64, traceparent string) {
		e, err := firing.Decode(b)
		if err != nil {
			return
		}
		at := time.Unix(0, sentNanos)
		req := Request{Firing: e, Fence: fence, SentAt: at, Traceparent: traceparent}
		got := map[string]string{}
		for _, h := range Headers(secret, req) {
			if _, dup := got[h.Name]; dup {
				t.Fatalf("header %s sent twice", h.Name)
			}
			got[h.Name] = h.Value
		}
		if got[firing.HeaderIdempotencyKey] != e.GetExecutionId() || got[firing.HeaderExecutionID] != e.GetExecutionId() ||
			got[firing.HeaderJobID] != e.GetJobId() || got[firing.HeaderFenceToken] != strconv.FormatInt(fence, 10) {
			t.Fatalf("identity headers %v do not match the envelope and the fence", got)
		}
		if (got[firing.HeaderCatchUp] == "true") != e.GetCatchUp() {
			t.Fatalf("catch-up header %q for catch_up=%v", got[firing.HeaderCatchUp], e.GetCatchUp())
		}
		err = signature.Verify(secret, got[firing.HeaderSignature], e.GetExecutionId(), e.GetPayload(), at, time.Minute)
		switch {
		case strings.Contains(e.GetExecutionId(), "."):
			// Not an execution id Sundial makes; verifiers refuse it.
			if !errors.Is(err, signature.ErrMalformed) {
				t.Fatalf("execution id with '.': %v", err)
			}
		case err != nil:
			t.Fatalf("the attempt's own signature does not verify: %v", err)
		}
		_ = Host(e)
	})
}
