// Package auth resolves the tenant and the actor of a gRPC call from its
// bearer token.
//
// Every Sundial API call carries "authorization: Bearer <token>". Tokens and
// the principal each one stands for come from configuration (a file or a
// flag, loaded once in main): a Tokens value. A principal is a tenant and,
// optionally, a name for whoever holds the token ("acme:deployer": tenant
// acme, name deployer). The server interceptors put the resolved tenant and
// actor in the call's context, where handlers read them with TenantFrom and
// ActorFrom; a call without a known token fails with Unauthenticated before
// any handler runs. Health checks and server reflection need no token, so
// probes and grpcurl work unauthenticated.
//
// The actor is what the audit trail records as "who". It is
// "<tenant>/<name>" for a named token, else "<tenant>/token:<fingerprint>",
// the fingerprint being the first 12 hex digits of the token's SHA-256
// (Fingerprint), so an operator can tell which token made a change without
// the audit trail holding anything a caller could authenticate with.
//
// Tokens are kept only as SHA-256 digests and looked up by digest, so the
// lookup's timing does not depend on how much of a guessed token matches a
// real one, and a heap dump does not hold usable tokens.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// Tokens maps bearer tokens to principals.
type Tokens struct {
	byDigest map[[sha256.Size]byte]principal
}

// principal is who a token stands for.
type principal struct {
	tenant string
	actor  string
}

// NewTokens builds a token table from token → principal pairs, a principal
// being "tenant" or "tenant:name". Empty tokens or tenants, and names or
// tenants outside [A-Za-z0-9._-] (names may also use @), are refused.
func NewTokens(m map[string]string) (*Tokens, error) {
	t := &Tokens{byDigest: make(map[[sha256.Size]byte]principal, len(m))}
	for token, p := range m {
		if err := t.add(token, p); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *Tokens) add(token, spec string) error {
	token = strings.TrimSpace(token)
	if token == "" {
		return errors.New("auth: empty token")
	}
	tenant, name, _ := strings.Cut(strings.TrimSpace(spec), ":")
	tenant, name = strings.TrimSpace(tenant), strings.TrimSpace(name)
	if tenant == "" {
		return errors.New("auth: token with an empty tenant")
	}
	if !validName(tenant, false) {
		return fmt.Errorf("auth: tenant %q: use letters, digits and . _ - only", tenant)
	}
	if strings.Contains(spec, ":") && (name == "" || !validName(name, true)) {
		return fmt.Errorf("auth: principal %q: the name after ':' must be 1-128 letters, digits and . _ - @", spec)
	}
	actor := tenant + "/token:" + Fingerprint(token)
	if name != "" {
		actor = tenant + "/" + name
	}
	d := sha256.Sum256([]byte(token))
	if prev, ok := t.byDigest[d]; ok && prev.tenant != tenant {
		return errors.New("auth: one token is given for two tenants")
	}
	t.byDigest[d] = principal{tenant: tenant, actor: actor}
	return nil
}

// Fingerprint is the short, non-secret identity of a token that actors
// carry: the first 12 hex digits of its SHA-256 (the same as
// `printf %s TOKEN | sha256sum | cut -c1-12`).
func Fingerprint(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:6])
}

func validName(s string, allowAt bool) bool {
	if len(s) > 128 {
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
// written "tenant", "tenant:name", or as a mapping {tenant: acme, name:
// deployer}; the result maps token to "tenant" or "tenant:name", as
// NewTokens takes it.
func LoadTokensFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	// Not the decoder's message: it can quote file content, which is
	// tokens.
	bad := fmt.Errorf("auth: tokens file %s: must be a YAML or JSON map of token to tenant, tenant:name or {tenant, name}", path)
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
			}
			if err := node.Decode(&p); err != nil || p.Tenant == "" || strings.Contains(p.Tenant, ":") {
				return nil, bad
			}
			m[token] = p.Tenant
			if p.Name != "" {
				m[token] += ":" + p.Name
			}
		default:
			return nil, bad
		}
	}
	return m, nil
}

// Len is the number of distinct tokens.
func (t *Tokens) Len() int { return len(t.byDigest) }

// Tenants lists the distinct tenants, sorted, for logging.
func (t *Tokens) Tenants() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range t.byDigest {
		if !seen[p.tenant] {
			seen[p.tenant] = true
			out = append(out, p.tenant)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve returns the tenant of token.
func (t *Tokens) Resolve(token string) (string, bool) {
	tenant, _, ok := t.ResolveActor(token)
	return tenant, ok
}

// ResolveActor returns the tenant of token and the actor the audit trail
// records for it.
func (t *Tokens) ResolveActor(token string) (tenant, actor string, ok bool) {
	if t == nil || token == "" {
		return "", "", false
	}
	p, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return p.tenant, p.actor, ok
}

type tenantKey struct{}

type actorKey struct{}

// WithTenant returns ctx carrying tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// WithActor returns ctx carrying actor (see ActorFrom).
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// TenantFrom returns the tenant the interceptor resolved for this call.
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
	for _, v := range md.Get("authorization") {
		scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
		if !ok || !strings.EqualFold(scheme, "bearer") {
			continue
		}
		if tenant, actor, ok := t.ResolveActor(strings.TrimSpace(token)); ok {
			return WithActor(WithTenant(ctx, tenant), actor), nil
		}
	}
	return nil, errUnauthenticated
}

// UnaryServerInterceptor authenticates unary calls.
func (t *Tokens) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := t.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor authenticates streaming calls.
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
