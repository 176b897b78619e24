package firing

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fuzzFirings are seed envelopes: an HTTP and a Kafka firing as the
// prefetcher stages them, a retry, and an empty one.
func fuzzFirings() []*sundialv1.Firing {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	return []*sundialv1.Firing{
		{
			ExecutionId: "0192d7a0-0000-7000-8000-000000000001", JobId: "0192d7a0-0000-7000-8000-0000000000aa", Tenant: "acme",
			JobVersion: 3, Attempt: 1, FirstAttempt: 1, Priority: sundialv1.Priority_PRIORITY_HIGH,
			ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at.Add(1500 * time.Millisecond)),
			Payload:        []byte(`{"report":"nightly"}`),
			AttemptTimeout: durationpb.New(30 * time.Second),
			Retry:          &sundialv1.RetryPolicy{MaxAttempts: 5, Backoff: sundialv1.Backoff_BACKOFF_EXPONENTIAL, InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute)},
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
				Url: "https://reports.internal.example/run", Method: "POST",
				Headers: map[string]string{"Authorization": "Bearer {{secret:tok}}"},
			}}},
			CallbackUrl: "https://hooks.example/done",
			Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		{
			ExecutionId: "e", JobId: "j", Attempt: 4, FirstAttempt: 2, CatchUp: true,
			Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_REDRIVE,
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.events", Key: "k"}}},
		},
		{},
	}
}

// FuzzDecode feeds Decode what a Kafka record or an outbox row may hold
// (the worker decodes every record it consumes; the api decodes stored
// envelopes of dead letters): it never panics, and whatever decodes
// encodes again to an envelope that decodes to the same firing, so an
// envelope the worker re-stages (a retry, a DLQ entry) loses nothing.
func FuzzDecode(f *testing.F) {
	for _, e := range fuzzFirings() {
		b, err := Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xa2, 0x01, 0x7f}) // a truncated length-delimited field
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if e != nil {
				t.Fatal("Decode returned an envelope with its error")
			}
			return
		}
		again, err := Encode(e)
		if err != nil {
			t.Fatalf("a decoded envelope does not encode: %v", err)
		}
		back, err := Decode(again)
		if err != nil {
			t.Fatalf("a re-encoded envelope does not decode: %v", err)
		}
		if !proto.Equal(e, back) {
			t.Fatal("decode(encode(decode(b))) differs from decode(b)")
		}
		if Traceparent(again) != e.GetTraceparent() {
			t.Fatalf("Traceparent of the re-encoded envelope is %q, want %q", Traceparent(again), e.GetTraceparent())
		}
		// What every consumer of an envelope derives from it.
		_ = Topics{Prefix: "p"}.Fire(e.GetPriority())
		_ = e.GetScheduledTime().AsTime()
		_ = e.GetFireTime().AsTime()
	})
}

// FuzzEnvelope builds envelopes field by field and checks
// decode(encode(x)) == x, and that the identities derived from a job and a
// slot hold for any of them: the execution id is deterministic and apart
// from the trigger id, and the jitter lies in [0, max) in whole
// milliseconds.
func FuzzEnvelope(f *testing.F) {
	f.Add("0192d7a0-0000-7000-8000-000000000001", "acme", []byte("payload"), int64(1777626000), int32(999), int32(1), int64(3), uint8(2), true, "https://x.example/", int64(60000))
	f.Add("", "", []byte(nil), int64(-62135596800), int32(0), int32(-1), int64(-1), uint8(9), false, "", int64(0))
	f.Add("\xff\xfe", "t\x00", []byte{0}, int64(253402300799), int32(999999999), int32(2147483647), int64(9223372036854775807), uint8(4), true, "{{secret:a}}", int64(1))
	f.Fuzz(func(t *testing.T, id, tenant string, payload []byte, sec int64, nsec, attempt int32, version int64, prio uint8, catchUp bool, url string, jitterMS int64) {
		in := &sundialv1.Firing{
			ExecutionId: id, JobId: id, Tenant: tenant, JobVersion: version, Attempt: attempt, FirstAttempt: attempt,
			Priority:      sundialv1.Priority(prio % 6),
			ScheduledTime: &timestamppb.Timestamp{Seconds: sec, Nanos: nsec},
			FireTime:      &timestamppb.Timestamp{Seconds: sec, Nanos: nsec},
			CatchUp:       catchUp, Payload: payload,
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url, Headers: map[string]string{tenant: url}}}},
		}
		b, err := Encode(in)
		if err != nil {
			// Only a string that is not UTF-8 fails to encode; proto3
			// strings must be valid.
			return
		}
		out, err := Decode(b)
		if err != nil {
			t.Fatalf("an encoded envelope does not decode: %v", err)
		}
		if !proto.Equal(in, out) {
			t.Fatal("decode(encode(x)) != x")
		}

		var job uuid.UUID
		copy(job[:], id)
		slot := time.Unix(sec, int64(nsec)%1e9)
		id1, id2 := ExecutionID(job, slot), ExecutionID(job, time.Unix(0, slot.UnixNano()))
		if id1 != id2 || id1 == TriggerExecutionID(job, slot) {
			t.Fatal("execution ids are not deterministic, or a trigger shares a slot's id")
		}
		if p := Partition(job); p < 0 || p >= Partitions {
			t.Fatalf("partition %d", p)
		}
		maxJitter := time.Duration(jitterMS%(3600*1000)) * time.Millisecond
		j := Jitter(job, slot, maxJitter)
		if maxJitter <= 0 {
			if j != 0 {
				t.Fatalf("jitter %s without a maximum", j)
			}
			return
		}
		if j < 0 || j >= maxJitter || j%time.Millisecond != 0 {
			t.Fatalf("Jitter = %s, want whole milliseconds in [0, %s)", j, maxJitter)
		}
	})
}
