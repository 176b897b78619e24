package target

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	secret    = []byte("test-secret")
	scheduled = time.Date(2026, 5, 1, 9, 0, 0, 123456789, time.FixedZone("x", 3600))
	sent      = time.Date(2026, 5, 1, 8, 0, 0, 500_000_000, time.UTC)
)

func envelope(t *sundialv1.Target, catchUp bool) *sundialv1.Firing {
	return &sundialv1.Firing{
		ExecutionId:   "exec-1",
		JobId:         "job-1",
		Attempt:       2,
		ScheduledTime: timestamppb.New(scheduled),
		CatchUp:       catchUp,
		Target:        t,
		Payload:       []byte(`{"a":1}`),
	}
}

func TestHeaders(t *testing.T) {
	req := Request{Firing: envelope(nil, true), Fence: 1746090000123456, SentAt: sent}
	got := map[string]string{}
	var order []string
	for _, h := range Headers(secret, req) {
		got[h.Name] = h.Value
		order = append(order, h.Name)
	}
	want := map[string]string{
		firing.HeaderIdempotencyKey: "exec-1",
		firing.HeaderExecutionID:    "exec-1",
		firing.HeaderJobID:          "job-1",
		firing.HeaderFenceToken:     "1746090000123456",
		firing.HeaderScheduledAt:    "2026-05-01T08:00:00.123456789Z", // UTC, nanoseconds
		firing.HeaderAttempt:        "2",
		firing.HeaderCatchUp:        "true",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if err := signature.Verify(secret, got[firing.HeaderSignature], "exec-1", []byte(`{"a":1}`), sent, time.Minute); err != nil {
		t.Errorf("signature: %v", err)
	}
	if order[len(order)-1] != firing.HeaderSignature {
		t.Error("signature should come last")
	}
	// No catch-up header on ordinary firings; attempt 0 reads as 1.
	req.Firing.CatchUp = false
	req.Firing.Attempt = 0
	for _, h := range Headers(secret, req) {
		if h.Name == firing.HeaderCatchUp {
			t.Error("Sundial-Catch-Up sent on an ordinary firing")
		}
		if h.Name == firing.HeaderAttempt && h.Value != "1" {
			t.Errorf("attempt %q, want 1", h.Value)
		}
	}
}

func TestHTTPSuccessHeadersAndBody(t *testing.T) {
	type seen struct {
		method string
		h      http.Header
		body   string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Clone(), string(b)}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("queued"))
	}))
	defer srv.Close()
	h := NewHTTP(srv.Client(), secret)
	f := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{
		Url:     srv.URL + "/hook",
		Method:  "put",
		Headers: map[string]string{"X-Team": "billing", "Content-Type": "application/json", firing.HeaderFenceToken: "forged"},
	}}}, false)
	res := h.Fire(context.Background(), Request{Firing: f, Fence: 42, SentAt: sent})
	if !res.OK || res.HTTPStatus != 202 || res.Excerpt != "queued" || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	s := <-got
	if s.method != "PUT" || s.body != `{"a":1}` {
		t.Fatalf("method %s body %q", s.method, s.body)
	}
	if s.h.Get("X-Team") != "billing" || s.h.Get("Content-Type") != "application/json" {
		t.Fatalf("job headers not passed: %v", s.h)
	}
	if s.h.Get(firing.HeaderFenceToken) != "42" {
		t.Fatalf("fence %q: a job header must not override Sundial's", s.h.Get(firing.HeaderFenceToken))
	}
	if s.h.Get(firing.HeaderIdempotencyKey) != "exec-1" {
		t.Fatal("no idempotency key")
	}
	if err := signature.Verify(secret, s.h.Get(firing.HeaderSignature), s.h.Get(firing.HeaderExecutionID), []byte(s.body), sent, time.Minute); err != nil {
		t.Fatalf("signature as the target sees it: %v", err)
	}
}

func TestHTTPFailureExcerptAndTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Repeat("é", 2000))) // 4000 bytes of 2-byte runes
	}))
	defer srv.Close()
	defer close(release)
	h := NewHTTP(srv.Client(), secret)
	f := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: srv.URL}}}, false)
	res := h.Fire(context.Background(), Request{Firing: f, SentAt: sent})
	if res.OK || res.HTTPStatus != 503 || res.Err == nil {
		t.Fatalf("503: %+v", res)
	}
	if len(res.Excerpt) > ExcerptLimit || !strings.HasPrefix(res.Excerpt, "éé") || strings.ContainsRune(res.Excerpt, '\uFFFD') {
		t.Fatalf("excerpt of %d bytes, must be <= %d of whole runes", len(res.Excerpt), ExcerptLimit)
	}

	f.Target.GetHttp().Url = srv.URL + "/slow"
	f.AttemptTimeout = durationpb.New(50 * time.Millisecond)
	res = h.Fire(context.Background(), Request{Firing: f, SentAt: sent})
	if res.OK || res.HTTPStatus != 0 || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %+v", res)
	}
}

type fakeProducer struct {
	Producer
	got []*kgo.Record
	err error
}

func (p *fakeProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.got = append(p.got, rs...)
	var out kgo.ProduceResults
	for _, r := range rs {
		out = append(out, kgo.ProduceResult{Record: r, Err: p.err})
	}
	return out
}

func TestKafka(t *testing.T) {
	p := &fakeProducer{}
	k := NewKafka(p, secret, "sundial.", []string{"*"})
	f := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.ticks"}}}, false)
	res := k.Fire(context.Background(), Request{Firing: f, Fence: 7, SentAt: sent})
	if !res.OK || len(p.got) != 1 {
		t.Fatalf("result %+v, %d records", res, len(p.got))
	}
	r := p.got[0]
	if r.Topic != "billing.ticks" || string(r.Key) != "job-1" || string(r.Value) != `{"a":1}` {
		t.Fatalf("record %s key %q value %q", r.Topic, r.Key, r.Value)
	}
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = string(h.Value)
	}
	if hs[firing.HeaderFenceToken] != "7" || hs[firing.HeaderIdempotencyKey] != "exec-1" {
		t.Fatalf("headers %v", hs)
	}
	if err := signature.Verify(secret, hs[firing.HeaderSignature], "exec-1", r.Value, sent, time.Minute); err != nil {
		t.Fatal(err)
	}

	f.Target.GetKafka().Key = "custom"
	k.Fire(context.Background(), Request{Firing: f, SentAt: sent})
	if string(p.got[1].Key) != "custom" {
		t.Fatalf("key %q, want the configured one", p.got[1].Key)
	}

	f.Target.GetKafka().Topic = "sundial.fire.critical"
	if res := k.Fire(context.Background(), Request{Firing: f, SentAt: sent}); res.OK || res.Err == nil {
		t.Fatal("produced to a platform topic")
	}
	restricted := NewKafka(p, secret, "sundial.", []string{"billing."})
	f.Target.GetKafka().Topic = "payroll.x"
	if res := restricted.Fire(context.Background(), Request{Firing: f, SentAt: sent}); res.OK {
		t.Fatal("produced to a topic outside the allow list")
	}
	p.err = errors.New("broker down")
	f.Target.GetKafka().Topic = "billing.y"
	if res := restricted.Fire(context.Background(), Request{Firing: f, SentAt: sent}); res.OK || res.Err == nil {
		t.Fatal("produce error not reported")
	}
}

func TestRouter(t *testing.T) {
	r := Router{HTTP: NewHTTP(nil, secret)}
	kafka := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "t"}}}, false)
	if res := r.Fire(context.Background(), Request{Firing: kafka}); res.OK || res.Err == nil {
		t.Fatal("Kafka target fired with Kafka disabled")
	}
	if res := r.Fire(context.Background(), Request{Firing: envelope(nil, false)}); !errors.Is(res.Err, ErrNoTarget) {
		t.Fatalf("no target: %v", res.Err)
	}
}
