// Package auth resolves who makes a gRPC call from its bearer token, and
// decides whether that caller's role may make it.
//
// Every Sundial API call carries "authorization: Bearer <token>". A token
// stands for a principal: a tenant, optionally a name for whoever holds it
// ("acme:deployer": tenant acme, name deployer), and a role (Role: tenant
// admin, tenant read-only, platform operator). Tokens come from three
// places, all the api's: the bootstrap tokens of its --tokens-file, kept
// there as argon2id hashes (HashToken, ParseHash) and reloaded when the
// file changes; the tokens made through its TokenService, checked against
// Postgres — both Verifiers of services/api's tokens package — and the
// deprecated plain tokens of its --tokens flag (NewTokens). The server interceptors put the
// resolved tenant, actor and role in the call's context, where handlers
// read them with TenantFrom, ActorFrom and PrincipalFrom; a call without a
// known token fails with Unauthenticated, and one its role may not make
// with PermissionDenied naming the role and the method (Allowed, the one
// table of which role may call what), before any handler runs. Health
// checks and server reflection need no token, so probes and grpcurl work
// unauthenticated.
//
// A platform operator's calls act on the tenant named by the
// "sundial-tenant" request header (TenantHeader), or on the operator's
// own tenant without it; its role allows reads only, and the dead-letter
// re-drive.
//
// The actor is what the audit trail records as "who". It is
// "<tenant>/<name>" for a named token, else "<tenant>/token:<fingerprint>",
// the fingerprint being the first 12 hex digits of the token's SHA-256
// (Fingerprint), so an operator can tell which token made a change without
// the audit trail holding anything a caller could authenticate with.
//
// Plain static tokens are kept only as SHA-256 digests and looked up by
// digest, so the lookup's timing does not depend on how much of a guessed
// token matches a real one, and a heap dump does not hold usable tokens.
//
// Every call the interceptors refuse as Unauthenticated or
// PermissionDenied is told to the hook of WithRefusals (the api writes
// them to its access_denied_audit table), with the caller's address and
// the presented token's fingerprint, never the token.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// Principal is who a token stands for.
type Principal struct {
	// Tenant is the token's own tenant (for an operator, the platform
	// team's).
	Tenant string
	// Actor is how the audit trail names the token's calls.
	Actor string
	Role  Role
	// TokenID is the id of an api-made token; "" for a static one.
	TokenID string
}

// Verifier checks tokens that are not static: services/api's tokens
// package, over Postgres. Verify answers ok=false for a token it does not
// know (or that is revoked or expired), and an error only when it could
// not tell (the database is away).
type Verifier interface {
	Verify(ctx context.Context, token string) (p Principal, ok bool, err error)
}

// Tokens resolves bearer tokens: the static ones by digest, then the
// Verifier's, when it has one.
type Tokens struct {
	byDigest  map[[sha256.Size]byte]Principal
	verifiers []Verifier
	refused   func(context.Context, Refusal)
}

// TokenIDer is implemented by a Verifier whose tokens carry their id
// (the api's "sdl_<id>_<secret>"), so a refused call can name the token it
// claimed to be without the audit trail holding the token.
type TokenIDer interface {
	TokenID(token string) string
}

// Refusal is a call the interceptor refused: Unauthenticated (no token,
// or one nobody knows, revoked or expired) or PermissionDenied (the
// role may not make it). It holds nothing a caller could authenticate
// with.
type Refusal struct {
	// Method is the full gRPC method name.
	Method string
	Code   codes.Code
	// Principal is the caller's, for PermissionDenied; zero for
	// Unauthenticated.
	Principal Principal
	// Fingerprint is the presented token's (Fingerprint), "" when the
	// call carried none; TokenID the api-token id it claimed, if any.
	Fingerprint, TokenID string
	// Source is the caller's address (host only): the network peer, or
	// for a call through the api's own HTTP gateway the client address
	// it forwarded.
	Source string
}

// NewTokens builds a token table from token → principal pairs, a principal
// being "tenant", "tenant:name", "tenant:name:role" or "tenant::role"
// (role: admin, read-only or operator; admin when not given). Empty tokens
// or tenants, and names or tenants outside [A-Za-z0-9._-] (names may also
// use @), are refused.
func NewTokens(m map[string]string) (*Tokens, error) {
	t := &Tokens{byDigest: make(map[[sha256.Size]byte]Principal, len(m))}
	for token, p := range m {
		if err := t.add(token, p); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// WithVerifier returns a copy of t that also asks v about tokens that are
// not static.
func (t *Tokens) WithVerifier(v Verifier) *Tokens {
	return &Tokens{byDigest: t.byDigest, verifiers: append(slices.Clip(t.verifiers), v), refused: t.refused}
}

// WithRefusals returns a copy of t that tells fn of every call its
// interceptors refuse as Unauthenticated or PermissionDenied. fn runs on
// the call's goroutine before the error returns, so it must not block.
func (t *Tokens) WithRefusals(fn func(context.Context, Refusal)) *Tokens {
	return &Tokens{byDigest: t.byDigest, verifiers: t.verifiers, refused: fn}
}

// ParsePrincipal reads "tenant", "tenant:name", "tenant:name:role" or
// "tenant::role" (role admin, read-only or operator; admin when not
// given). The Actor it returns is "<tenant>/<name>" for a named one and
// "" otherwise: an unnamed token's actor carries its fingerprint
// (UnnamedActor).
func ParsePrincipal(spec string) (Principal, error) {
	parts := strings.Split(strings.TrimSpace(spec), ":")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	tenant, name, role := parts[0], "", RoleAdmin
	if tenant == "" {
		return Principal{}, errors.New("auth: token with an empty tenant")
	}
	if !ValidName(tenant, false) {
		return Principal{}, fmt.Errorf("auth: tenant %q: use letters, digits and . _ - only", tenant)
	}
	switch len(parts) {
	case 1:
	case 2, 3:
		name = parts[1]
		if (len(parts) == 2 || name != "") && (name == "" || !ValidName(name, true)) {
			return Principal{}, fmt.Errorf("auth: principal %q: the name after ':' must be 1-128 letters, digits and . _ - @", spec)
		}
		if len(parts) == 3 {
			r, err := ParseRole(parts[2])
			if err != nil {
				return Principal{}, fmt.Errorf("auth: principal %q: %w", spec, err)
			}
			role = r
		}
	default:
		return Principal{}, fmt.Errorf("auth: principal %q: write tenant, tenant:name or tenant:name:role", spec)
	}
	p := Principal{Tenant: tenant, Role: role}
	if name != "" {
		p.Actor = tenant + "/" + name
	}
	return p, nil
}

// UnnamedActor is the actor of an unnamed static token of tenant.
func UnnamedActor(tenant, token string) string { return tenant + "/token:" + Fingerprint(token) }

func (t *Tokens) add(token, spec string) error {
	token = strings.TrimSpace(token)
	if token == "" {
		return errors.New("auth: empty token")
	}
	p, err := ParsePrincipal(spec)
	if err != nil {
		return err
	}
	if p.Actor == "" {
		p.Actor = UnnamedActor(p.Tenant, token)
	}
	d := sha256.Sum256([]byte(token))
	if prev, ok := t.byDigest[d]; ok && prev.Tenant != p.Tenant {
		return errors.New("auth: one token is given for two tenants")
	}
	t.byDigest[d] = p
	return nil
}

// Fingerprint is the short, non-secret identity of a token that actors
// carry: the first 12 hex digits of its SHA-256 (the same as
// `printf %s TOKEN | sha256sum | cut -c1-12`).
func Fingerprint(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:6])
}

// ValidName reports whether s is a valid tenant (allowAt false) or token
// name (allowAt true): 1-128 letters, digits and . _ - (and @).
func ValidName(s string, allowAt bool) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || allowAt && r == '@') {
			return false
		}
	}
	return true
}

// ParseTokens reads the flag form "token=tenant,token=tenant:name".
func ParseTokens(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		token, tenant, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, errors.New("auth: tokens: each entry must be token=tenant")
		}
		m[strings.TrimSpace(token)] = strings.TrimSpace(tenant)
	}
	return m, nil
}

// LoadTokensFile reads a YAML or JSON object mapping each token to its
// principal (JSON is YAML, so one decoder reads both). A principal is
// written "tenant", "tenant:name", "tenant:name:role", or as a mapping
// {tenant: acme, name: deployer, role: read-only}; the result maps token
// to the colon form, as NewTokens takes it.
func LoadTokensFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	// Not the decoder's message: it can quote file content, which is
	// tokens.
	bad := fmt.Errorf("auth: tokens file %s: must be a YAML or JSON map of token to tenant, tenant:name, tenant:name:role or {tenant, name, role}", path)
	raw := map[string]yaml.Node{}
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, bad
	}
	m := make(map[string]string, len(raw))
	for token, node := range raw {
		switch node.Kind {
		case yaml.ScalarNode:
			m[token] = node.Value
		case yaml.MappingNode:
			var p struct {
				Tenant string `yaml:"tenant"`
				Name   string `yaml:"name"`
				Role   string `yaml:"role"`
			}
			if err := node.Decode(&p); err != nil || p.Tenant == "" || strings.Contains(p.Tenant+p.Name+p.Role, ":") {
				return nil, bad
			}
			m[token] = p.Tenant
			switch {
			case p.Role != "":
				m[token] += ":" + p.Name + ":" + p.Role
			case p.Name != "":
				m[token] += ":" + p.Name
			}
		default:
			return nil, bad
		}
	}
	return m, nil
}

// Len is the number of distinct static tokens.
func (t *Tokens) Len() int { return len(t.byDigest) }

// Tenants lists the distinct tenants of the static tokens, sorted, for
// logging.
func (t *Tokens) Tenants() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range t.byDigest {
		if !seen[p.Tenant] {
			seen[p.Tenant] = true
			out = append(out, p.Tenant)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve returns the tenant of a static token.
func (t *Tokens) Resolve(token string) (string, bool) {
	tenant, _, ok := t.ResolveActor(token)
	return tenant, ok
}

// ResolveActor returns the tenant of a static token and the actor the
// audit trail records for it. ResolveContext also knows api-made tokens.
func (t *Tokens) ResolveActor(token string) (tenant, actor string, ok bool) {
	if t == nil || token == "" {
		return "", "", false
	}
	p, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return p.Tenant, p.Actor, ok
}

// ResolveContext returns the principal of token: a static one, else one
// the Verifier knows. err is the Verifier's when it could not tell.
func (t *Tokens) ResolveContext(ctx context.Context, token string) (Principal, bool, error) {
	if t == nil || token == "" {
		return Principal{}, false, nil
	}
	if p, ok := t.byDigest[sha256.Sum256([]byte(token))]; ok {
		return p, true, nil
	}
	for _, v := range t.verifiers {
		p, ok, err := v.Verify(ctx, token)
		if ok || err != nil {
			return p, ok, err
		}
	}
	return Principal{}, false, nil
}

type tenantKey struct{}

type actorKey struct{}

type principalKey struct{}

// WithTenant returns ctx carrying tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// WithActor returns ctx carrying actor (see ActorFrom).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// WithPrincipal returns ctx carrying p, its tenant and its actor.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(WithActor(WithTenant(ctx, p.Tenant), p.Actor), principalKey{}, p)
}

// TenantFrom returns the tenant the call acts on: the token's, or for a
// platform operator the one its TenantHeader names.
func TenantFrom(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// ActorFrom returns who is calling, as the audit trail records it:
// "<tenant>/<name>" for a named token, "<tenant>/token:<fingerprint>"
// otherwise.
func ActorFrom(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(actorKey{}).(string)
	return a, ok && a != ""
}

// PrincipalFrom returns the caller's principal: its own tenant (not the
// one an operator acts on), actor and role.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// TenantHeader is the request header naming the tenant a platform
// operator's call acts on ("sundial-tenant: acme"; over HTTP
// "Grpc-Metadata-Sundial-Tenant"). Other roles' calls refuse a header
// naming another tenant than their own.
const TenantHeader = "sundial-tenant"

// OperatorTenant reports, for a platform operator's call, the tenant it
// named (TenantHeader), or "" when it named none; ok is false for other
// roles.
func OperatorTenant(ctx context.Context) (tenant string, ok bool) {
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Role != RoleOperator {
		return "", false
	}
	t, _ := TenantFrom(ctx)
	if named, _ := ctx.Value(namedTenantKey{}).(bool); !named {
		return "", true
	}
	return t, true
}

type namedTenantKey struct{}

// Public reports whether a full gRPC method name needs no token: health
// checks and server reflection.
func Public(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// errUnauthenticated says nothing about which part failed, on purpose.
var errUnauthenticated = status.Error(codes.Unauthenticated, `missing or unknown bearer token: send "authorization: Bearer <token>"`)

func (t *Tokens) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	if Public(fullMethod) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var presented string
	for _, v := range md.Get("authorization") {
		scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
		if !ok || !strings.EqualFold(scheme, "bearer") {
			continue
		}
		token = strings.TrimSpace(token)
		presented = token
		p, ok, err := t.ResolveContext(ctx, token)
		if err != nil {
			return nil, status.Error(codes.Unavailable, "bearer token not checked: the token store does not answer; retry")
		}
		if !ok {
			continue
		}
		if err := Allowed(p.Role, fullMethod); err != nil {
			t.refuse(ctx, md, fullMethod, codes.PermissionDenied, p, token)
			return nil, err
		}
		ctx = WithPrincipal(ctx, p)
		if named := md.Get(TenantHeader); len(named) > 0 {
			tenant := strings.TrimSpace(named[0])
			switch {
			case p.Role == RoleOperator && ValidName(tenant, false):
				ctx = context.WithValue(WithTenant(ctx, tenant), namedTenantKey{}, true)
			case p.Role == RoleOperator:
				return nil, status.Errorf(codes.InvalidArgument, "%s header: %q is not a tenant name", TenantHeader, tenant)
			case tenant != p.Tenant:
				t.refuse(ctx, md, fullMethod, codes.PermissionDenied, p, token)
				return nil, status.Errorf(codes.PermissionDenied, "role %s acts on its own tenant only: the %s header may not name another", p.Role, TenantHeader)
			}
		}
		return ctx, nil
	}
	t.refuse(ctx, md, fullMethod, codes.Unauthenticated, Principal{}, presented)
	return nil, errUnauthenticated
}

// refuse tells the refusal hook, if any, of a refused call.
func (t *Tokens) refuse(ctx context.Context, md metadata.MD, method string, code codes.Code, p Principal, token string) {
	if t.refused == nil {
		return
	}
	r := Refusal{Method: method, Code: code, Principal: p, TokenID: p.TokenID, Source: source(ctx, md)}
	if token != "" {
		r.Fingerprint = Fingerprint(token)
		for _, v := range t.verifiers {
			if r.TokenID != "" {
				break
			}
			if ider, ok := v.(TokenIDer); ok {
				r.TokenID = ider.TokenID(token)
			}
		}
	}
	t.refused(ctx, r)
}

// source is the caller's host: the network peer's, or for an in-process
// call (the api's HTTP gateway, over a net.Pipe: network "pipe", which no
// caller outside the process can be) the client address the gateway
// forwarded. x-forwarded-for is read only there: a
// network caller could write anything in it.
func source(ctx context.Context, md metadata.MD) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return ""
	}
	if n := pr.Addr.Network(); n == "pipe" || n == "local" {
		// The gateway appends the address it took the request from to
		// whatever X-Forwarded-For the client sent: the last entry is the
		// one the api itself saw.
		if fwd := md.Get("x-forwarded-for"); len(fwd) > 0 {
			list := strings.Split(fwd[len(fwd)-1], ",")
			return strings.TrimSpace(list[len(list)-1])
		}
		return "in-process"
	}
	addr := pr.Addr.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// UnaryServerInterceptor authenticates unary calls and checks their role.
func (t *Tokens) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := t.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor authenticates streaming calls and checks their
// role.
func (t *Tokens) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := t.authenticate(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &tenantStream{ServerStream: ss, ctx: ctx})
	}
}

type tenantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tenantStream) Context() context.Context { return s.ctx }

// Bearer is client-side per-RPC credentials sending token as a bearer
// token. Insecure transport is allowed because Sundial runs on loopback and
// behind service meshes that terminate TLS; use TLS transport credentials
// anywhere else.
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = Bearer("")
