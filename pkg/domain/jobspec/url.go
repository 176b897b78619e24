package jobspec

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// CheckURL returns nil when raw is a URL the worker can send a request to
// exactly as written, or an error saying what is wrong and where. It is the
// rule for every URL a job names (target.http.url, target.http.cancel_url,
// callback_url): the api refuses a job whose URL fails it, and the worker
// dead-letters a stored firing whose URL fails it instead of sending it.
//
// The URL must be an absolute http or https URL of RFC 3986 with a host:
//
//   - Every character is one RFC 3986 allows unescaped (letters, digits,
//     the unreserved "-._~", the delimiters ":/?@!$&'()*+,;=", and "[]"
//     only around an IPv6 host) or a percent-escape of two hex digits. A space,
//     a control character, a non-ASCII character or one of " < > \ ^ ` { | }
//     is refused rather than escaped on the caller's behalf: net/url would
//     let some of them through to the request line, where the target
//     answers 400 at every firing, and guessing an escape would send a URL
//     nobody wrote.
//   - No userinfo: URLs end up in logs, the ledger and API responses;
//     credentials belong in a header (which may name a secret).
//   - No fragment: a client never sends it, so the target would not see
//     what the job says.
//   - The host is a name of letters, digits, '-', '.' and '_' (an
//     international name in its xn-- form), an IPv4 address, or an IPv6
//     address in brackets without a zone (a zone names a network interface
//     of whichever worker runs the attempt); a port, when given, is 1-65535.
//   - At most MaxURLLen bytes.
//
// What passes reaches the wire unchanged: the request's Host is the URL's
// host and its request target is the URL's path (or "/") and query, byte for
// byte (the worker's FuzzTargetURL holds it to that).
func CheckURL(raw string) error {
	if raw == "" {
		return errNotAbsolute
	}
	if len(raw) > MaxURLLen {
		return fmt.Errorf("is %d bytes, at most %d allowed", len(raw), MaxURLLen)
	}
	if err := checkURLBytes(raw); err != nil {
		return err
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !validScheme(scheme) {
		return schemeProblem(raw)
	}
	if s := strings.ToLower(scheme); s != "http" && s != "https" {
		return fmt.Errorf("must be an absolute http or https URL: the scheme is %q", scheme)
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	if strings.Contains(authority, "@") {
		return errors.New("must not contain credentials; send them in a header")
	}
	if i := strings.IndexAny(rest[len(authority):], "[]"); i >= 0 {
		at := len(scheme) + len("://") + len(authority) + i
		return fmt.Errorf("contains %q at character %d, which a URL allows only around an IPv6 host: percent-encode it as %%%02X", raw[at], at+1, raw[at])
	}
	if err := checkAuthority(authority); err != nil {
		return err
	}
	// The structure is sound by now; net/url is the parser the worker and
	// net/http use, so what it makes of the URL is what gets sent.
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may carry a token in its query
		}
		return fmt.Errorf("is not a valid URL: %v", err)
	}
	if u.Host != authority || u.Opaque != "" || u.User != nil || u.Fragment != "" {
		return errors.New("is not a valid URL")
	}
	return nil
}

var errNotAbsolute = errors.New("must be an absolute http or https URL")

// checkURLBytes refuses the first byte RFC 3986 does not allow in a URL as
// written, a bad percent-escape and a fragment. Positions count from 1;
// every byte before the one named is ASCII, so bytes and characters agree.
func checkURLBytes(raw string) error {
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		switch {
		case b == ' ':
			return fmt.Errorf("contains a space at character %d: percent-encode it as %%20", i+1)
		case b < ' ' || b == 0x7f:
			return fmt.Errorf("contains a control character (0x%02X) at character %d", b, i+1)
		case b >= 0x80:
			return fmt.Errorf("contains a non-ASCII character at character %d: percent-encode its UTF-8 bytes (é is %%C3%%A9) and write an international host name in its xn-- form", i+1)
		case b == '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				esc := raw[i:min(i+3, len(raw))]
				return fmt.Errorf("has a bad percent-escape %q at character %d: '%%' must be followed by two hex digits (a literal '%%' is %%25)", esc, i+1)
			}
		case b == '#':
			return fmt.Errorf("has a fragment (from '#' at character %d), which is never sent to the target: leave it out, or percent-encode a '#' of the path or query as %%23", i+1)
		case !urlByte(b):
			return fmt.Errorf("contains %q at character %d: percent-encode it as %%%02X", b, i+1, b)
		}
	}
	return nil
}

// urlByte reports whether RFC 3986 allows b unescaped somewhere in a URL
// (unreserved, gen-delims and sub-delims; '%' and '#' are judged apart).
func urlByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
		strings.IndexByte("-._~:/?[]@!$&'()*+,;=", b) >= 0
}

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}

// validScheme reports whether s is an RFC 3986 scheme:
// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func validScheme(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '+' || b == '-' || b == '.') {
			return false
		}
	}
	return true
}

// schemeProblem says what is wrong with a URL that does not start with
// scheme "://": a path ("/hook"), a bare host ("example.com/run",
// "localhost:8080"), or http without the "//" before the host.
func schemeProblem(raw string) error {
	if strings.HasPrefix(raw, "/") {
		return errNotAbsolute
	}
	if scheme, _, ok := strings.Cut(raw, ":"); ok {
		if s := strings.ToLower(scheme); s == "http" || s == "https" {
			return fmt.Errorf("must be an absolute http or https URL: write %q before the host", s+"://")
		}
	}
	return errors.New("must be an absolute http or https URL: it has no scheme (start it with https:// or http://)")
}

// checkAuthority checks host[:port] (no userinfo, no brackets outside an
// IPv6 host: the caller checked both).
func checkAuthority(authority string) error {
	host, port, hasPort := authority, "", false
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return errors.New("has '[' without ']' around its IPv6 host")
		}
		host = authority[1:end]
		switch after := authority[end+1:]; {
		case after == "":
		case after[0] == ':':
			port, hasPort = after[1:], true
		default:
			return fmt.Errorf("has %q after its IPv6 host, where only :port may follow", after)
		}
		if host == "" {
			return errors.New("must be an absolute http or https URL: it has no host")
		}
		if strings.Contains(host, "%") {
			return fmt.Errorf("host [%s] has an IPv6 zone, which names a network interface of the worker's machine: leave it out", host)
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return fmt.Errorf("host [%s] is not an IPv6 address (only an IPv6 address goes in brackets)", host)
		}
	} else {
		if strings.Count(authority, ":") > 1 {
			return errors.New("has more than one ':' after the host (an IPv6 address goes in brackets: http://[::1]:8080/)")
		}
		if i := strings.IndexByte(authority, ':'); i >= 0 {
			host, port, hasPort = authority[:i], authority[i+1:], true
		}
		if host == "" {
			return errors.New("must be an absolute http or https URL: it has no host")
		}
		if err := checkHostName(host); err != nil {
			return err
		}
	}
	if hasPort {
		if port == "" {
			return errors.New("has ':' after the host but no port: give a port or leave the ':' out")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' || port[0] == '-' {
			return fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	return nil
}

// checkHostName checks a host that is not in brackets: a DNS name (with '_',
// which some internal names carry) or an IPv4 address, at most 253
// characters (a trailing dot aside) in labels of 1-63.
func checkHostName(host string) error {
	for i := 0; i < len(host); i++ {
		if b := host[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '.' || b == '_') {
			return fmt.Errorf("host %q may contain only letters, digits, '-', '.' and '_' (write an international name in its xn-- form, an IPv6 address in brackets)", host)
		}
	}
	name := strings.TrimSuffix(host, ".")
	if len(name) > 253 {
		return fmt.Errorf("host is %d characters, at most 253 allowed", len(name))
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q has an empty label or one longer than 63 characters", host)
		}
	}
	return nil
}
