package target

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
)

// The SSRF guard against a hostile job: its URL names a host the worker
// must not reach, either through DNS that changes its answer between a
// check and the dial (rebinding) or through a redirect from a host it may
// reach. These tests play both attacks against the worker's own HTTP
// delivery, with a real DNS server on loopback and real HTTP servers.

// rebindingDNS is a DNS server on 127.0.0.1 that answers every A query for
// any name with first, the first time, and with then afterwards — the
// behaviour of an attacker's name server with a TTL of 0. AAAA queries get
// no records.
type rebindingDNS struct {
	pc          net.PacketConn
	first, then netip.Addr
	queries     atomic.Int32
	wg          sync.WaitGroup
}

func startRebindingDNS(t *testing.T, first, then string) *rebindingDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &rebindingDNS{pc: pc, first: netip.MustParseAddr(first), then: netip.MustParseAddr(then)}
	d.wg.Add(1)
	go d.serve()
	t.Cleanup(func() {
		_ = pc.Close()
		d.wg.Wait()
	})
	return d
}

func (d *rebindingDNS) serve() {
	defer d.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if resp, ok := d.answer(buf[:n]); ok {
			_, _ = d.pc.WriteTo(resp, from)
		}
	}
}

func (d *rebindingDNS) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if q.Type == dnsmessage.TypeA {
		addr := d.then
		if d.queries.Add(1) == 1 {
			addr = d.first
		}
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0}
		if b.AResource(rh, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil, false
		}
	}
	msg, err := b.Finish()
	return msg, err == nil
}

// resolver sends every lookup to d, whatever the system's configuration.
func (d *rebindingDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", d.pc.LocalAddr().String())
	}}
}

// countingSink is an HTTP server on loopback that counts the requests
// reaching it.
func countingSink(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A name that resolves to a public address when it is looked up first (as
// a check at validation would see it) and to loopback when the worker
// dials is refused at the dial, on the address it resolved to: the target
// behind it never sees the request.
func TestHTTPRefusesDNSRebindingToLoopback(t *testing.T) {
	sink, hits := countingSink(t, nil)
	dns := startRebindingDNS(t, "203.0.113.7", "127.0.0.1")
	policy, err := netpolicy.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(policy, WithResolver(dns.resolver()))
	defer tr.CloseIdleConnections()
	h := NewHTTP(NewClient(tr), secret, WithPolicy(policy))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The check a validator would make: the name looks public and allowed.
	addrs, err := dns.resolver().LookupNetIP(ctx, "ip4", "rebind.sundial.test")
	if err != nil || len(addrs) != 1 || addrs[0].String() != "203.0.113.7" {
		t.Fatalf("first lookup: %v %v", addrs, err)
	}
	if err := policy.Check(netip.AddrPortFrom(addrs[0], 80)); err != nil {
		t.Fatalf("the public answer is refused: %v", err)
	}

	url := "http://rebind.sundial.test:" + port(t, sink) + "/hook"
	r := h.Fire(ctx, Request{Firing: httpEnvelope(url, nil), SentAt: sent})
	var re *netpolicy.RefusedError
	if r.Class != ClassAddressRefused || !r.Permanent || !errors.As(r.Err, &re) || re.Reason != netpolicy.ReasonLoopback {
		t.Fatalf("rebound to loopback: %+v", r)
	}
	if !strings.HasPrefix(re.Addr, "127.0.0.1:") {
		t.Fatalf("refused %q, want the address the name resolved to at the dial", re.Addr)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback target was reached %d times", n)
	}
	if n := dns.queries.Load(); n < 2 {
		t.Fatalf("the worker did not resolve the name at the dial (%d A queries)", n)
	}
}

// The same against a private range a deployment denies (10.0.0.0/8 here):
// the refusal happens before any connection is attempted, so not even a
// TCP handshake reaches the private network.
func TestHTTPRefusesDNSRebindingToDeniedPrivateRange(t *testing.T) {
	dns := startRebindingDNS(t, "203.0.113.7", "10.20.30.40")
	policy, err := netpolicy.New(nil, []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(policy, WithResolver(dns.resolver()))
	defer tr.CloseIdleConnections()
	h := NewHTTP(NewClient(tr), secret, WithPolicy(policy))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dns.resolver().LookupNetIP(ctx, "ip4", "internal.sundial.test"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := h.Fire(ctx, Request{Firing: httpEnvelope("http://internal.sundial.test/admin", nil), SentAt: sent})
	var re *netpolicy.RefusedError
	if r.Class != ClassAddressRefused || !r.Permanent || !errors.As(r.Err, &re) || re.Reason != netpolicy.ReasonDenied || re.Addr != "10.20.30.40:80" {
		t.Fatalf("rebound to 10.20.30.40: %+v", r)
	}
	// 10.20.30.40 routes nowhere here; a connect attempt would wait for the
	// dial timeout (5 s). The refusal is immediate.
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("refusal took %s: a connection was attempted", d)
	}
}

// A target the policy allows answers with a redirect to an address it does
// not (another loopback port, the metadata service, a denied private
// range): the worker does not follow it. The attempt fails permanently as
// a 3xx, and the redirect's destination sees nothing — the signed request
// is never resent to a host the job did not name.
func TestHTTPDoesNotFollowRedirectsToPrivateAddresses(t *testing.T) {
	inner, innerHits := countingSink(t, nil)
	for _, loc := range []string{
		inner.URL + "/internal",                           // loopback, not allowlisted
		"http://169.254.169.254/latest/meta-data/iam/",    // cloud metadata
		"http://10.0.0.1/admin",                           // a denied private range
		"http://metadata.google.internal/computeMetadata", // metadata by name
	} {
		t.Run(loc, func(t *testing.T) {
			outer, outerHits := countingSink(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
			})
			policy, err := netpolicy.New([]string{"127.0.0.1:" + port(t, outer)}, []string{"10.0.0.0/8"})
			if err != nil {
				t.Fatal(err)
			}
			tr := NewTransport(policy)
			defer tr.CloseIdleConnections()
			h := NewHTTP(NewClient(tr), secret, WithPolicy(policy))
			r := h.Fire(context.Background(), Request{Firing: httpEnvelope(outer.URL+"/hook", nil), SentAt: sent})
			if r.OK || r.HTTPStatus != http.StatusTemporaryRedirect || r.Class != ClassHTTP3xx || !r.Permanent {
				t.Fatalf("redirect to %s: %+v", loc, r)
			}
			if outerHits.Load() != 1 {
				t.Fatalf("the allowed target saw %d requests, want 1", outerHits.Load())
			}
		})
	}
	if n := innerHits.Load(); n != 0 {
		t.Fatalf("the redirect's loopback destination was reached %d times", n)
	}
}

// Defence in depth: even a client that follows redirects, over the
// worker's transport, cannot reach a refused address through one — each
// hop is dialled, and checked, anew.
func TestTransportRefusesRedirectHopAtDial(t *testing.T) {
	inner, innerHits := countingSink(t, nil)
	outer, _ := countingSink(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/internal", http.StatusFound)
	})
	policy, err := netpolicy.New([]string{"127.0.0.1:" + port(t, outer)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(policy)
	defer tr.CloseIdleConnections()
	following := &http.Client{Transport: tr} // the default: follows up to 10 redirects
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, outer.URL+"/hook", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := following.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	var re *netpolicy.RefusedError
	if !errors.As(err, &re) || re.Reason != netpolicy.ReasonLoopback {
		t.Fatalf("redirect hop to %s: %v", inner.URL, err)
	}
	if n := innerHits.Load(); n != 0 {
		t.Fatalf("the redirect's destination was reached %d times", n)
	}
}
