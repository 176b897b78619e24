// Package netpolicy decides which network addresses Sundial may open
// connections to on behalf of a job: a job names any URL it likes, and
// without a policy a worker would happily POST a signed request to its own
// loopback admin port, to a neighbour on the link-local network, or to the
// cloud metadata service that hands out the host's credentials.
//
// By default a Policy refuses
//
//   - loopback addresses (127.0.0.0/8, ::1),
//   - link-local addresses (169.254.0.0/16, fe80::/10),
//   - cloud metadata endpoints (169.254.169.254, fd00:ec2::254,
//     100.100.100.200, and the names metadata.google.internal and
//     metadata.goog),
//   - unspecified and "this network" addresses (0.0.0.0/8, ::), which a
//     dial quietly turns into the local host,
//   - multicast and broadcast addresses,
//
// plus any prefix given as an extra deny rule (a deployment that must not
// reach its private ranges adds 10.0.0.0/8 and friends). Private addresses
// are allowed by default: internal services calling internal webhooks is
// what Sundial is for. An allow rule (a prefix, an address, or an
// address:port) overrides every deny rule.
//
// The check that matters is made at dial time, on the address the dialer
// actually connects to (Policy.Control as a net.Dialer's Control), so a
// host name that resolves to an allowed address at validation time and to
// 127.0.0.1 a second later (DNS rebinding) is still refused. IPv4 addresses
// embedded in IPv6 (::ffff:a.b.c.d, and the NAT64 prefix 64:ff9b::/96) are
// judged as the IPv4 address they reach.
package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Reasons a connection is refused; they are the metric labels too.
const (
	ReasonLoopback    = "loopback"
	ReasonLinkLocal   = "link_local"
	ReasonMetadata    = "metadata"
	ReasonUnspecified = "unspecified"
	ReasonMulticast   = "multicast"
	ReasonDenied      = "denied" // an extra deny rule
)

// ErrRefused is what every refusal matches with errors.Is.
var ErrRefused = errors.New("netpolicy: address refused")

// RefusedError says which address was refused and why.
type RefusedError struct {
	// Addr is the address (or host name) refused.
	Addr string
	// Reason is one of the Reason constants.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("netpolicy: connection to %s refused (%s; allowlist it with --allow-target-addrs)", e.Addr, e.Reason)
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

type denyRule struct {
	prefix netip.Prefix
	reason string
}

// Built-in rules, most specific first: the first match names the reason.
var builtin = []denyRule{
	{netip.MustParsePrefix("169.254.169.254/32"), ReasonMetadata}, // AWS, GCP, Azure, OpenStack, ...
	{netip.MustParsePrefix("fd00:ec2::254/128"), ReasonMetadata},  // AWS over IPv6
	{netip.MustParsePrefix("100.100.100.200/32"), ReasonMetadata}, // Alibaba Cloud
	{netip.MustParsePrefix("127.0.0.0/8"), ReasonLoopback},
	{netip.MustParsePrefix("::1/128"), ReasonLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ReasonLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), ReasonLinkLocal},
	{netip.MustParsePrefix("0.0.0.0/8"), ReasonUnspecified},
	{netip.MustParsePrefix("::/128"), ReasonUnspecified},
	{netip.MustParsePrefix("224.0.0.0/4"), ReasonMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ReasonMulticast},
	{netip.MustParsePrefix("ff00::/8"), ReasonMulticast},
}

// metadataNames are refused by name before any lookup: they are how the
// metadata services are usually addressed, and refusing the name gives a
// clearer error than refusing the address it resolves to.
var metadataNames = map[string]bool{
	"metadata.google.internal": true,
	"metadata.goog":            true,
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

type allowRule struct {
	prefix netip.Prefix
	port   uint16 // 0: any port
}

// Policy is an immutable outbound-address policy, safe for concurrent use.
type Policy struct {
	allow     []allowRule
	deny      []denyRule
	onRefused func(reason string)
}

// Option configures a Policy.
type Option func(*Policy)

// OnRefused calls f with the reason of every refusal (metrics).
func OnRefused(f func(reason string)) Option { return func(p *Policy) { p.onRefused = f } }

// New returns the default policy amended by allow rules (each a CIDR
// prefix, an IP address, or IP:port / [IPv6]:port) and extra deny prefixes
// (each a CIDR prefix or an IP address). Host names are not accepted in
// either: the policy judges the addresses a dial reaches, and a name's
// addresses change.
func New(allow, deny []string, opts ...Option) (*Policy, error) {
	p := &Policy{}
	for _, s := range allow {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		r, err := parseAllow(s)
		if err != nil {
			return nil, err
		}
		p.allow = append(p.allow, r)
	}
	for _, s := range deny {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		pr, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("netpolicy: deny rule %q: want a CIDR prefix or an IP address", s)
		}
		p.deny = append(p.deny, denyRule{pr, ReasonDenied})
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

func parseAllow(s string) (allowRule, error) {
	if pr, err := parsePrefix(s); err == nil {
		return allowRule{prefix: pr}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a := unmap(ap.Addr())
		return allowRule{prefix: netip.PrefixFrom(a, a.BitLen()), port: ap.Port()}, nil
	}
	return allowRule{}, fmt.Errorf("netpolicy: allow rule %q: want a CIDR prefix, an IP address or IP:port (host names are not accepted: the policy judges addresses)", s)
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a := unmap(pr.Addr())
		bits := pr.Bits()
		if pr.Addr().Is4In6() {
			bits -= 96
		}
		return netip.PrefixFrom(a, max(bits, 0)).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = unmap(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// unmap turns IPv4-mapped and NAT64-embedded IPv6 addresses into the IPv4
// address they reach, and drops any zone.
func unmap(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap()
	}
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return a
}

// Check judges one address a connection would reach; nil means allowed.
// The error is a *RefusedError.
func (p *Policy) Check(ap netip.AddrPort) error {
	a := unmap(ap.Addr())
	for _, r := range p.allow {
		if r.prefix.Contains(a) && (r.port == 0 || r.port == ap.Port()) {
			return nil
		}
	}
	for _, rules := range [][]denyRule{builtin, p.deny} {
		for _, r := range rules {
			if r.prefix.Contains(a) {
				return p.refuse(netip.AddrPortFrom(a, ap.Port()).String(), r.reason)
			}
		}
	}
	return nil
}

// CheckHost judges a URL's host before any lookup: metadata service names
// are refused, literal addresses are checked (port 0 matches only allow
// rules without a port; pass the real port with Check when known). Names
// that resolve are judged again at dial time by Control.
func (p *Policy) CheckHost(host string, port uint16) error {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if metadataNames[h] {
		return p.refuse(host, ReasonMetadata)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return p.Check(netip.AddrPortFrom(a, port))
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses the connection
// before it is made when the (already resolved) address is not allowed.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Only IP networks reach here with a resolved address; anything
		// else (a unix socket) is not a target a job may name.
		return p.refuse(address, ReasonDenied)
	}
	return p.Check(ap)
}

// Dialer returns a copy of base whose connections are checked by p.
func (p *Policy) Dialer(base net.Dialer) *net.Dialer {
	d := base
	d.Control = p.Control
	d.ControlContext = nil
	return &d
}

// CheckURLHost is CheckHost for a "host" or "host:port" string as found in a
// URL (defaultPort applies when it has none).
func (p *Policy) CheckURLHost(hostport string, defaultPort uint16) error {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return p.CheckHost(hostport, defaultPort)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return p.CheckHost(host, defaultPort)
	}
	return p.CheckHost(host, uint16(port))
}

func (p *Policy) refuse(addr, reason string) error {
	if p.onRefused != nil {
		p.onRefused(reason)
	}
	return &RefusedError{Addr: addr, Reason: reason}
}
