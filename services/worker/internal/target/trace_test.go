package target

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A traced attempt's context reaches the target as the traceparent header
// of the HTTP request and of the Kafka record; an untraced one sends none.
func TestTraceparentReachesTheTarget(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(tracing.Header)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h := NewHTTP(nil, secret)
	f := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
		Url: srv.URL, Headers: map[string]string{"traceparent": "00-forged-by-the-job"},
	}}}, false)
	for _, want := range []string{tp, ""} {
		if res := h.Fire(context.Background(), Request{Firing: f, SentAt: sent, Traceparent: want}); !res.OK {
			t.Fatalf("fire: %+v", res)
		}
		if g := <-got; want != "" && g != want {
			t.Fatalf("traceparent %q, want %q", g, want)
		}
	}

	p := &fakeProducer{}
	k := NewKafka(p, secret, "sundial.", []string{"*"})
	kf := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.ticks"}}}, false)
	k.Fire(context.Background(), Request{Firing: kf, SentAt: sent, Traceparent: tp})
	k.Fire(context.Background(), Request{Firing: kf, SentAt: sent})
	header := func(i int) (string, bool) {
		for _, h := range p.got[i].Headers {
			if h.Key == tracing.Header {
				return string(h.Value), true
			}
		}
		return "", false
	}
	if v, ok := header(0); !ok || v != tp {
		t.Fatalf("kafka record traceparent %q, want %q", v, tp)
	}
	if v, ok := header(1); ok {
		t.Fatalf("untraced kafka record carries traceparent %q", v)
	}
}
