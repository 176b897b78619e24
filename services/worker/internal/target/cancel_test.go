package target

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A Kafka target's cancel notice is a record on its topic with its key:
// the notice as value, signed over it, flagged by Sundial-Event, with its
// own Idempotency-Key.
func TestKafkaCancelNotice(t *testing.T) {
	p := &fakeProducer{}
	k := NewKafka(p, secret, "sundial.", []string{"*"})
	f := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.ticks", Key: "k1"}}}, false)
	n := CancelNotice(f, "acme/alice", sent)
	if res := k.Fire(context.Background(), Request{Firing: n, Fence: 7, SentAt: sent, Event: firing.EventCancelled}); !res.OK || len(p.got) != 1 {
		t.Fatalf("result %+v, %d records", res, len(p.got))
	}
	r := p.got[0]
	var body CancelBody
	if err := json.Unmarshal(r.Value, &body); err != nil || r.Topic != "billing.ticks" || string(r.Key) != "k1" ||
		body.ExecutionID != "exec-1" || body.CancelledBy != "acme/alice" || body.Event != "cancelled" || !body.Cancelled.Equal(sent) {
		t.Fatalf("record %s key %q value %s: %v", r.Topic, r.Key, r.Value, err)
	}
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = string(h.Value)
	}
	if hs[firing.HeaderEvent] != "cancelled" || hs[firing.HeaderIdempotencyKey] != "exec-1:cancelled" || hs[firing.HeaderExecutionID] != "exec-1" {
		t.Fatalf("headers %v", hs)
	}
	if err := signature.Verify(secret, hs[firing.HeaderSignature], "exec-1", r.Value, sent, time.Minute); err != nil {
		t.Fatal(err)
	}
	if string(f.GetPayload()) != `{"a":1}` {
		t.Fatal("the original firing changed")
	}
}
