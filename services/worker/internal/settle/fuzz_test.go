package settle

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// captureProducer keeps the records it is given instead of producing them.
type captureProducer struct{ recs []*kgo.Record }

func (c *captureProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	c.recs = append(c.recs, rs...)
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i] = kgo.ProduceResult{Record: r}
	}
	return out
}

// FuzzDeadLetterRecord takes any value a record of a fire topic may carry
// to the dead-letter topic, the two ways the worker sends one there:
//
//   - a value that does not decode as an envelope is poison, and goes to
//     the DLQ byte for byte (kind raw) so nothing is lost for a human to
//     inspect;
//   - one that decodes dies as a DeadLetter (kind dead_letter) whose value
//     DecodeDeadLetter reads back to the same dead letter, keyed by its
//     job id.
//
// And DecodeDeadLetter itself, on the same bytes, never panics and
// round-trips what it decodes.
func FuzzDeadLetterRecord(f *testing.F) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	fir := &sundialv1.Firing{ExecutionId: "0192d7a0-0000-7000-8000-000000000001", JobId: "0192d7a0-0000-7000-8000-0000000000aa",
		Tenant: "acme", Attempt: 3, FirstAttempt: 1, ScheduledTime: timestamppb.New(at), Payload: []byte("p"),
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/"}}}}
	for _, v := range []proto.Message{
		fir,
		&sundialv1.DeadLetter{Firing: fir, LastError: "target: POST https://x.example/: status 503", ErrorClass: "http_5xx",
			DeadTime: timestamppb.New(at), HttpStatus: 503, Attempts: 3},
		&sundialv1.Firing{},
	} {
		b, err := proto.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "http_5xx", int32(503))
	}
	f.Add([]byte("not a protobuf \xff"), "poison", int32(0))
	f.Fuzz(func(t *testing.T, value []byte, class string, httpStatus int32) {
		if dl, err := DecodeDeadLetter(value); err == nil {
			b, err := encode(dl)
			if err != nil {
				t.Fatalf("a decoded dead letter does not encode: %v", err)
			}
			back, err := DecodeDeadLetter(b)
			if err != nil || !proto.Equal(dl, back) {
				t.Fatalf("dead letter does not round-trip: %v", err)
			}
		}

		prod := &captureProducer{}
		dlq := NewKafkaDLQ(prod, "sundial.dlq")
		ctx := context.Background()
		fr, ferr := firing.Decode(value)
		if ferr != nil {
			src := &kgo.Record{Topic: "sundial.fire.low", Partition: 3, Offset: 42, Key: []byte("k"), Value: value}
			if err := dlq.PublishRaw(ctx, src, ferr); err != nil {
				t.Fatal(err)
			}
			rec := prod.recs[0]
			if !bytes.Equal(rec.Value, value) || kind(rec) != KindRaw {
				t.Fatalf("poison record changed on its way to the DLQ (kind %q)", kind(rec))
			}
			return
		}
		dl := &sundialv1.DeadLetter{Firing: fr, ErrorClass: class, LastError: class, HttpStatus: httpStatus, Attempts: 1, DeadTime: timestamppb.New(time.Unix(0, 0))}
		err := dlq.PublishDeadLetter(ctx, dl)
		if err != nil {
			// Only a string field that is not UTF-8 (proto3 strings must
			// be) fails to encode; the error says so rather than
			// producing a record nobody can read.
			if len(prod.recs) != 0 {
				t.Fatalf("a dead letter that does not encode was produced: %v", err)
			}
			return
		}
		rec := prod.recs[0]
		back, err := DecodeDeadLetter(rec.Value)
		if err != nil || !proto.Equal(back, dl) {
			t.Fatalf("the DLQ record does not decode to the dead letter: %v", err)
		}
		if kind(rec) != KindDeadLetter || string(rec.Key) != fr.GetJobId() {
			t.Fatalf("kind %q key %q", kind(rec), rec.Key)
		}
	})
}

func kind(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderDLQKind {
			return string(h.Value)
		}
	}
	return ""
}
