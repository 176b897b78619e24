package notify

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/process/clock"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("notify-secret")

type results struct {
	mu  sync.Mutex
	got map[string]int
	ch  chan string
}

func (r *results) add(s string) {
	r.mu.Lock()
	r.got[s]++
	r.mu.Unlock()
	r.ch <- s
}

func newNotifier(t *testing.T, policy *netpolicy.Policy, clk clock.Clock, cfg Config) (*Notifier, *results) {
	t.Helper()
	r := &results{got: map[string]int{}, ch: make(chan string, 100)}
	tr := target.NewTransport(policy)
	t.Cleanup(tr.CloseIdleConnections)
	n := New(target.NewClient(tr), secret, policy, clk, cfg, Metrics{Result: r.add}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n, r
}

func allow(t *testing.T, srv *httptest.Server) *netpolicy.Policy {
	t.Helper()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, err := netpolicy.New([]string{"127.0.0.1:" + port}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNotificationIsSignedAndCarriesTheSummary(t *testing.T) {
	type got struct {
		h    http.Header
		body []byte
	}
	arrived := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		arrived <- got{r.Header.Clone(), b}
	}))
	defer srv.Close()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	n, res := newNotifier(t, allow(t, srv), clock.NewFake(now), Config{})
	s := Summary{Event: EventDead, ExecutionID: "e1", JobID: "j1", Tenant: "acme", Status: "EXECUTION_STATUS_DEAD",
		Attempt: 3, Attempts: 3, Error: "status 503", ErrorClass: "http_5xx", HTTPStatus: 503,
		Scheduled: now.Add(-time.Minute), Finished: now, DeadLetter: true}
	if !n.Notify(srv.URL+"/cb", s) {
		t.Fatal("not queued")
	}
	g := <-arrived
	if r := <-res.ch; r != "ok" {
		t.Fatalf("result %s", r)
	}
	if err := signature.Verify(secret, g.h.Get(firing.HeaderSignature), "e1", g.body, now, time.Minute); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if g.h.Get(HeaderEvent) != "dead" || g.h.Get(firing.HeaderIdempotencyKey) != "e1:dead" || g.h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", g.h)
	}
	var back Summary
	if err := json.Unmarshal(g.body, &back); err != nil {
		t.Fatal(err)
	}
	if back != s {
		t.Fatalf("summary %+v, want %+v", back, s)
	}
}

// 5xx is tried again (Attempts in all); a 4xx is not; a refused address is
// never sent.
func TestNotificationRetries(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/flaky" {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(400)
	}))
	defer srv.Close()
	clk := armedClock{clock.NewFake(time.Now()), make(chan struct{}, 10)}
	n, res := newNotifier(t, allow(t, srv), clk, Config{Workers: 1, Attempts: 3, Backoff: time.Second})
	n.Notify(srv.URL+"/flaky", Summary{ExecutionID: "a", Event: EventSucceeded})
	for range 2 {
		if r := <-res.ch; r != "retry" {
			t.Fatalf("result %s, want retry", r)
		}
		<-clk.armed
		clk.Advance(time.Minute)
	}
	if r := <-res.ch; r != "failed" {
		t.Fatalf("after 3 attempts: %s", r)
	}
	n.Notify(srv.URL+"/bad", Summary{ExecutionID: "b", Event: EventSucceeded})
	if r := <-res.ch; r != "failed" {
		t.Fatalf("400: %s", r)
	}
	n.Notify("http://169.254.169.254/latest", Summary{ExecutionID: "c", Event: EventSucceeded})
	if r := <-res.ch; r != "refused" {
		t.Fatalf("metadata address: %s", r)
	}
	// A callback URL stored before the api checked URLs (a space in it)
	// fails without being sent, as the api's rule says.
	n.Notify(srv.URL+"/with space", Summary{ExecutionID: "d", Event: EventSucceeded})
	if r := <-res.ch; r != "failed" {
		t.Fatalf("a URL with a space: %s", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["/flaky"] != 3 || calls["/bad"] != 1 || len(calls) != 2 {
		t.Fatalf("calls %v", calls)
	}
}

// A full queue drops instead of blocking the caller.
func TestNotifyNeverBlocks(t *testing.T) {
	n := New(http.DefaultClient, secret, nil, clock.Real{}, Config{QueueSize: 2}, Metrics{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Not started: nothing drains the queue.
	ok := 0
	for range 5 {
		if n.Notify("http://example.invalid/", Summary{}) {
			ok++
		}
	}
	if ok != 2 {
		t.Fatalf("%d queued, want 2", ok)
	}
	n.Stop()
	if n.Notify("http://example.invalid/", Summary{}) {
		t.Fatal("queued after stop")
	}
}

type armedClock struct {
	*clock.Fake
	armed chan struct{}
}

func (c armedClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Fake.NewTimer(d)
	c.armed <- struct{}{}
	return t
}

// tenantKeys signs as the worker's keyring does: each tenant's own keys.
type tenantKeys map[string][]signature.Key

func (k tenantKeys) Sign(tenant string, ts time.Time, id string, body []byte) string {
	return signature.SignKeys(k[tenant], ts, id, body)
}

// With a signer, a callback is signed with its job's tenant's keys, named,
// and not with the platform secret.
func TestNotificationIsSignedWithTheTenantsKeys(t *testing.T) {
	arrived := make(chan http.Header, 1)
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		arrived <- r.Header.Clone()
	}))
	defer srv.Close()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	policy := allow(t, srv)
	tr := target.NewTransport(policy)
	defer tr.CloseIdleConnections()
	acme := signature.Key{ID: "k-acme", Secret: []byte("sdk_acme")}
	n := New(target.NewClient(tr), secret, policy, clock.NewFake(now), Config{Signer: tenantKeys{"acme": {acme}}}, Metrics{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if !n.Notify(srv.URL+"/cb", Summary{Event: EventSucceeded, ExecutionID: "e1", JobID: "j1", Tenant: "acme"}) {
		t.Fatal("not queued")
	}
	h := <-arrived
	sig := h.Get(firing.HeaderSignature)
	if !strings.Contains(sig, "kid=k-acme") || signature.VerifyKeys([]signature.Key{acme}, sig, "e1", body, now, time.Minute) != nil {
		t.Fatalf("signature %q", sig)
	}
	if err := signature.Verify(secret, sig, "e1", body, now, time.Minute); err == nil {
		t.Fatal("the platform secret verifies a callback of a tenant with keys")
	}
}
