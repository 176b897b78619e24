package netpolicy

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// FuzzCheckURLHost judges any host[:port] a job's URL may name, as the
// worker does before it dials. It never panics; a refusal is a
// *RefusedError matching ErrRefused; a literal address is judged exactly
// as the dial-time check judges it; and a metadata service's name is
// refused however it is written.
func FuzzCheckURLHost(f *testing.F) {
	for _, h := range []string{"127.0.0.1:8080", "[::1]:443", "[::ffff:169.254.169.254]", "metadata.google.internal.", "METADATA.goog:80",
		"example.com", "10.0.0.1", "[fe80::1%25eth0]:80", "[64:ff9b::7f00:1]:80", "0.0.0.0:1", "[::]:80", "host:99999", ":80", "[::1"} {
		f.Add(h, uint16(80))
	}
	p, err := New([]string{"127.0.0.1:8099"}, []string{"10.0.0.0/8"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, hostport string, defaultPort uint16) {
		err := p.CheckURLHost(hostport, defaultPort)
		var re *RefusedError
		if err != nil && (!errors.As(err, &re) || !errors.Is(err, ErrRefused) || re.Reason == "") {
			t.Fatalf("CheckURLHost(%q) = %v, want a *RefusedError with a reason", hostport, err)
		}
		host, port := hostport, defaultPort
		if h, ps, serr := net.SplitHostPort(hostport); serr == nil {
			host = h
			if n, perr := strconv.ParseUint(ps, 10, 16); perr == nil {
				port = uint16(n)
			}
		}
		name := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
		if metadataNames[name] && err == nil {
			t.Fatalf("metadata name %q allowed", hostport)
		}
		if a, perr := netip.ParseAddr(name); perr == nil {
			if want := p.Check(netip.AddrPortFrom(a, port)); (want == nil) != (err == nil) {
				t.Fatalf("CheckURLHost(%q) = %v but Check(%s) = %v", hostport, err, netip.AddrPortFrom(a, port), want)
			}
		}
	})
}
