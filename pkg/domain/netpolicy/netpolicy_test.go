package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultPolicy(t *testing.T) {
	p, err := New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr   string
		reason string // "" allowed
	}{
		{"127.0.0.1:80", ReasonLoopback},
		{"127.9.9.9:8080", ReasonLoopback},
		{"[::1]:443", ReasonLoopback},
		{"[::ffff:127.0.0.1]:80", ReasonLoopback}, // IPv4-mapped
		{"[64:ff9b::7f00:1]:80", ReasonLoopback},  // NAT64-embedded 127.0.0.1
		{"169.254.169.254:80", ReasonMetadata},
		{"[::ffff:169.254.169.254]:80", ReasonMetadata},
		{"[fd00:ec2::254]:80", ReasonMetadata},
		{"100.100.100.200:80", ReasonMetadata},
		{"169.254.10.1:80", ReasonLinkLocal},
		{"[fe80::1]:80", ReasonLinkLocal},
		{"[fe80::1%eth0]:80", ReasonLinkLocal},
		{"0.0.0.0:80", ReasonUnspecified},
		{"[::]:80", ReasonUnspecified},
		{"224.0.0.1:80", ReasonMulticast},
		{"255.255.255.255:80", ReasonMulticast},
		// Private and public addresses are allowed by default.
		{"10.1.2.3:443", ""},
		{"192.168.1.10:80", ""},
		{"172.16.0.1:80", ""},
		{"[fd12::1]:80", ""},
		{"93.184.216.34:443", ""},
		{"[2606:4700::1111]:443", ""},
	} {
		err := p.Check(netip.MustParseAddrPort(tc.addr))
		var re *RefusedError
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s refused: %v", tc.addr, err)
		case tc.reason != "" && !errors.As(err, &re):
			t.Errorf("%s allowed, want refused (%s)", tc.addr, tc.reason)
		case tc.reason != "" && re.Reason != tc.reason:
			t.Errorf("%s refused as %s, want %s", tc.addr, re.Reason, tc.reason)
		case tc.reason != "" && !errors.Is(err, ErrRefused):
			t.Errorf("%s: errors.Is(ErrRefused) false", tc.addr)
		}
	}
}

func TestAllowAndDenyRules(t *testing.T) {
	var refused []string
	p, err := New(
		[]string{"127.0.0.1:8099", "::1", "169.254.169.254/32", "10.9.0.0/16"},
		[]string{"10.0.0.0/8", "192.168.0.1"},
		OnRefused(func(r string) { refused = append(refused, r) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1:8099", true},  // allowed with its port
		{"127.0.0.1:8098", false}, // another port of the same address
		{"[::1]:1", true},         // any port
		{"169.254.169.254:80", true},
		{"10.9.1.1:443", true}, // allow beats deny
		{"10.1.1.1:443", false},
		{"192.168.0.1:80", false},
		{"192.168.0.2:80", true},
	} {
		if err := p.Check(netip.MustParseAddrPort(tc.addr)); (err == nil) != tc.allowed {
			t.Errorf("%s: err %v, want allowed=%v", tc.addr, err, tc.allowed)
		}
	}
	want := []string{ReasonLoopback, ReasonDenied, ReasonDenied}
	if len(refused) != len(want) {
		t.Fatalf("refusals %v, want %v", refused, want)
	}
	for i := range want {
		if refused[i] != want[i] {
			t.Fatalf("refusals %v, want %v", refused, want)
		}
	}
}

func TestRulesRejectHostNames(t *testing.T) {
	for _, bad := range []string{"localhost", "sink:8099", "example.com", "10.0.0.0/33"} {
		if _, err := New([]string{bad}, nil); err == nil {
			t.Errorf("allow rule %q accepted", bad)
		}
	}
	if _, err := New(nil, []string{"127.0.0.1:80"}); err == nil {
		t.Error("deny rule with a port accepted")
	}
}

func TestCheckHostRefusesMetadataNames(t *testing.T) {
	p, _ := New(nil, nil)
	for _, h := range []string{"metadata.google.internal", "METADATA.google.internal.", "metadata.goog"} {
		if err := p.CheckHost(h, 80); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v", h, err)
		}
	}
	if err := p.CheckURLHost("[::1]:8080", 80); !errors.Is(err, ErrRefused) {
		t.Errorf("literal loopback: %v", err)
	}
	if err := p.CheckURLHost("example.com", 443); err != nil {
		t.Errorf("a name is judged at dial time, not here: %v", err)
	}
}

// The dial-time check: a client whose dialer carries the policy cannot
// reach a loopback server, whatever name the URL uses; allowlisting the
// server's address lets it through.
func TestDialerRefusesAtConnectTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	get := func(p *Policy, url string) error {
		tr := &http.Transport{DialContext: p.Dialer(net.Dialer{Timeout: 5 * time.Second}).DialContext}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	strict, _ := New(nil, nil)
	// "localhost" passes any name check; the dial reaches 127.0.0.1 or ::1
	// and is refused there.
	err := get(strict, "http://localhost:"+port+"/")
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != ReasonLoopback {
		t.Fatalf("localhost reached through the policy: %v", err)
	}
	allowed, _ := New([]string{"127.0.0.1:" + port}, nil)
	if err := get(allowed, srv.URL); err != nil {
		t.Fatalf("allowlisted sink refused: %v", err)
	}
}
