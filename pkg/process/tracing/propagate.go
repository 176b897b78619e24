package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// Header is the W3C Trace Context header (and Kafka record header) that
// carries a span context between processes.
const Header = "traceparent"

// Format renders sc as a version-00 traceparent
// ("00-<trace id>-<span id>-<flags>"), or "" when sc is not valid. Written
// out by hand rather than through a propagator and carrier: it runs once
// per staged firing and per hop, and needs no map.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	flags := [1]byte{byte(sc.TraceFlags())}
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// Parse reads a traceparent into a remote span context. It accepts what
// the W3C recommendation asks a receiver to accept: version 00 exactly,
// or a later version whose first four fields have the version-00 shape;
// all-zero ids and version ff are refused.
func Parse(s string) (trace.SpanContext, bool) {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') {
		return trace.SpanContext{}, false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	if !lowerHex(s[0:2]) || !decode(ver[:], s[0:2]) || ver[0] == 0xff || (ver[0] == 0 && len(s) != 55) {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) ||
		!decode(tid[:], s[3:35]) || !decode(sid[:], s[36:52]) || !decode(flags[:], s[53:55]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	})
	if !sc.IsValid() {
		return trace.SpanContext{}, false
	}
	return sc, true
}

func decode(dst []byte, s string) bool {
	n, err := hex.Decode(dst, []byte(s))
	return err == nil && n == len(dst)
}

// lowerHex: the recommendation allows only lower-case hex digits.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Context returns ctx carrying the remote span context traceparent names,
// or ctx itself when traceparent is empty or malformed (the caller's span
// then starts a trace of its own).
func Context(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	sc, ok := Parse(traceparent)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
