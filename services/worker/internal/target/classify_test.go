package target

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
	"github.com/sundialhq/sundial/pkg/domain/secrets"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func httpEnvelope(url string, headers map[string]string) *sundialv1.Firing {
	return envelope(&sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url, Headers: headers}}}, false)
}

func TestClassifyStatus(t *testing.T) {
	for _, tc := range []struct {
		status    int
		class     string
		permanent bool
	}{
		{400, ClassHTTP4xx, true}, {401, ClassHTTP4xx, true}, {404, ClassHTTP4xx, true}, {410, ClassHTTP4xx, true},
		{408, ClassHTTP4xx, false}, {429, ClassHTTP429, false},
		{500, ClassHTTP5xx, false}, {502, ClassHTTP5xx, false}, {503, ClassHTTP5xx, false},
		{301, ClassHTTP3xx, true},
	} {
		c, p := ClassifyStatus(tc.status)
		if c != tc.class || p != tc.permanent {
			t.Errorf("%d: %s/%v, want %s/%v", tc.status, c, p, tc.class, tc.permanent)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		d    time.Duration
		ok   bool
		name string
	}{
		{"120", 2 * time.Minute, true, "seconds"},
		{" 0 ", 0, true, "zero"},
		{"Fri, 01 May 2026 12:00:30 GMT", 30 * time.Second, true, "IMF-fixdate"},
		{"Friday, 01-May-26 12:01:00 GMT", time.Minute, true, "RFC 850"},
		{"Fri, 01 May 2026 11:00:00 GMT", 0, true, "date in the past"},
		{"99999999999", MaxRetryAfter, true, "huge"},
		{"-5", 0, false, "negative"},
		{"soon", 0, false, "garbage"},
		{"", 0, false, "absent"},
	} {
		d, ok := ParseRetryAfter(tc.v, now)
		if d != tc.d || ok != tc.ok {
			t.Errorf("%s %q: %s %v, want %s %v", tc.name, tc.v, d, ok, tc.d, tc.ok)
		}
	}
}

// 429 and 503 carry the target's Retry-After; a 4xx is permanent; a
// timeout and a refused connection are retryable and classified.
func TestHTTPFailureClasses(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/429":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
		case "/503":
			w.Header().Set("Retry-After", "Fri, 01 May 2026 08:00:10 GMT") // sent + 9.5 s
			w.WriteHeader(503)
		case "/404":
			w.Header().Set("Retry-After", "7") // ignored on a 4xx
			w.WriteHeader(404)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	defer close(release)
	h := NewHTTP(srv.Client(), secret)
	fire := func(path string, timeout time.Duration) Result {
		f := httpEnvelope(srv.URL+path, nil)
		if timeout > 0 {
			f.AttemptTimeout = durationpb.New(timeout)
		}
		return h.Fire(context.Background(), Request{Firing: f, SentAt: sent})
	}
	if r := fire("/429", 0); r.Class != ClassHTTP429 || r.Permanent || !r.HasRetryAfter || r.RetryAfter != 7*time.Second {
		t.Errorf("429: %+v", r)
	}
	if r := fire("/503", 0); r.Class != ClassHTTP5xx || r.Permanent || !r.HasRetryAfter || r.RetryAfter != 9500*time.Millisecond {
		t.Errorf("503: %+v", r)
	}
	if r := fire("/404", 0); r.Class != ClassHTTP4xx || !r.Permanent || r.HasRetryAfter {
		t.Errorf("404: %+v", r)
	}
	if r := fire("/slow", 30*time.Millisecond); r.Class != ClassTimeout || r.Permanent {
		t.Errorf("timeout: %+v", r)
	}
	// A port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	f := httpEnvelope("http://"+addr+"/", nil)
	if r := h.Fire(context.Background(), Request{Firing: f, SentAt: sent}); r.Class != ClassConnection || r.Permanent {
		t.Errorf("refused connection: %+v", r)
	}
	// A cancellation from outside (fencing) is not the target's fault.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := h.Fire(ctx, Request{Firing: httpEnvelope(srv.URL+"/slow", nil), SentAt: sent}); r.Class != ClassCanceled {
		t.Errorf("cancelled: %+v", r)
	}
	if r := h.Fire(context.Background(), Request{Firing: httpEnvelope("ftp://x/y", nil), SentAt: sent}); r.Class != ClassInvalidTarget || !r.Permanent {
		t.Errorf("bad scheme: %+v", r)
	}
}

// The outbound policy refuses a loopback target at dial time (permanent,
// address_refused) unless it is allowlisted, and refuses metadata names
// before any lookup.
func TestHTTPOutboundPolicy(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits++ }))
	defer srv.Close()
	strict, _ := netpolicy.New(nil, nil)
	h := NewHTTP(NewClient(NewTransport(strict)), secret, WithPolicy(strict))
	defer h.client.CloseIdleConnections()
	for _, url := range []string{srv.URL + "/", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/", "http://metadata.google.internal/computeMetadata/v1/", "http://169.254.169.254/latest/meta-data/"} {
		r := h.Fire(context.Background(), Request{Firing: httpEnvelope(url, nil), SentAt: sent})
		if r.Class != ClassAddressRefused || !r.Permanent || !errors.Is(r.Err, netpolicy.ErrRefused) {
			t.Errorf("%s: %+v", url, r)
		}
	}
	if hits != 0 {
		t.Fatalf("the sink was reached %d times through the policy", hits)
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	open, _ := netpolicy.New([]string{"127.0.0.1:" + port}, nil)
	h2 := NewHTTP(NewClient(NewTransport(open)), secret, WithPolicy(open))
	defer h2.client.CloseIdleConnections()
	if r := h2.Fire(context.Background(), Request{Firing: httpEnvelope(srv.URL+"/", nil), SentAt: sent}); !r.OK {
		t.Fatalf("allowlisted sink: %+v", r)
	}
}

// Secret references in headers are expanded for the request only, among
// the secrets of the firing's tenant; a target echoing them back sees its
// excerpt redacted; a missing secret — another tenant's included — is a
// permanent failure that never reaches the target.
func TestHTTPSecrets(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.WriteHeader(500)
		_, _ = w.Write([]byte("bad credentials: " + gotAuth))
	}))
	defer srv.Close()
	res := secrets.NewResolver(nil, -1, secrets.Map{"acme": {"billing-token": "tok-very-secret"}})
	h := NewHTTP(srv.Client(), secret, WithSecrets(res))
	f := httpEnvelope(srv.URL, map[string]string{"Authorization": "Bearer {{secret:billing-token}}"})
	f.Tenant = "acme"
	r := h.Fire(context.Background(), Request{Firing: f, SentAt: sent})
	if gotAuth != "Bearer tok-very-secret" {
		t.Fatalf("target saw %q", gotAuth)
	}
	if strings.Contains(r.Excerpt, "tok-very-secret") || !strings.Contains(r.Excerpt, secrets.Redacted) {
		t.Fatalf("excerpt %q not redacted", r.Excerpt)
	}
	if f.Target.GetHttp().GetHeaders()["Authorization"] != "Bearer {{secret:billing-token}}" {
		t.Fatal("the envelope was modified")
	}
	for _, c := range []struct{ tenant, ref string }{
		{"acme", "{{secret:nope}}"},
		{"globex", "{{secret:billing-token}}"}, // acme's secret, named by another tenant's job
		{"", "{{secret:billing-token}}"},       // an envelope without a tenant has no secrets
	} {
		gotAuth = ""
		f = httpEnvelope(srv.URL, map[string]string{"Authorization": "Bearer " + c.ref})
		f.Tenant = c.tenant
		r = h.Fire(context.Background(), Request{Firing: f, SentAt: sent})
		if r.Class != ClassSecret || !r.Permanent || !errors.Is(r.Err, secrets.ErrMissing) || gotAuth != "" {
			t.Fatalf("tenant %q, %s: %+v (target saw %q)", c.tenant, c.ref, r, gotAuth)
		}
	}
	if r := NewHTTP(srv.Client(), secret).Fire(context.Background(), Request{Firing: f, SentAt: sent}); r.Class != ClassSecret {
		t.Fatalf("no secret source: %+v", r)
	}
}

func TestHost(t *testing.T) {
	if h := Host(httpEnvelope("https://API.example.com:8443/x?y", nil)); h != "api.example.com:8443" {
		t.Fatalf("host %q", h)
	}
	if h := Host(envelope(nil, false)); h != "" {
		t.Fatalf("no target: %q", h)
	}
}
