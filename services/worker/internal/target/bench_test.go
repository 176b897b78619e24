package target

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// BenchmarkHTTPFire is one attempt's delivery as far as the wire, as the
// worker makes it: the host looked up twice (the limits' admission and
// their breaker), then the URL check, the request built, signed and
// written as net/http writes it, the answer read (the transport answers at
// once). The connection's own cost is left out.
func BenchmarkHTTPFire(b *testing.B) {
	h := NewHTTP(NewClient(discardWire{}), secret)
	f := httpEnvelope("http://127.0.0.1:18500/hook?tenant=acme", nil)
	b.ReportAllocs()
	for b.Loop() {
		// The limits ask twice: admission, then the breaker.
		for range 2 {
			if Host(f) == "" {
				b.Fatal("no host")
			}
		}
		if res := h.Fire(context.Background(), Request{Firing: f, SentAt: sent}); !res.OK {
			b.Fatal(res.Err)
		}
	}
}

// discardWire writes each request as net/http would and forgets it.
type discardWire struct{ http.RoundTripper }

func (discardWire) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Write(io.Discard); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
}
