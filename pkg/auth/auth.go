// Package auth resolves the tenant of a gRPC call from its bearer token.
//
// Every Sundial API call carries "authorization: Bearer <token>". Tokens and
// the tenant each one stands for come from configuration (a file or a flag,
// loaded once in main): a Tokens value. The server interceptors put the
// resolved tenant in the call's context, where handlers read it with
// TenantFrom; a call without a known token fails with Unauthenticated
// before any handler runs. Health checks and server reflection need no
// token, so probes and grpcurl work unauthenticated.
//
// Tokens are kept only as SHA-256 digests and looked up by digest, so the
// lookup's timing does not depend on how much of a guessed token matches a
// real one, and a heap dump does not hold usable tokens.
package auth

import (
	"context"
	"crypto/sha256"
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

// Tokens maps bearer tokens to tenants.
type Tokens struct {
	byDigest map[[sha256.Size]byte]string
}

// NewTokens builds a token table from token → tenant pairs. Empty tokens
// or tenants are refused.
func NewTokens(m map[string]string) (*Tokens, error) {
	t := &Tokens{byDigest: make(map[[sha256.Size]byte]string, len(m))}
	for token, tenant := range m {
		if err := t.add(token, tenant); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *Tokens) add(token, tenant string) error {
	token, tenant = strings.TrimSpace(token), strings.TrimSpace(tenant)
	if token == "" {
		return errors.New("auth: empty token")
	}
	if tenant == "" {
		return errors.New("auth: token with an empty tenant")
	}
	if !validTenant(tenant) {
		return fmt.Errorf("auth: tenant %q: use letters, digits and . _ - only", tenant)
	}
	d := sha256.Sum256([]byte(token))
	if prev, ok := t.byDigest[d]; ok && prev != tenant {
		return errors.New("auth: one token is given for two tenants")
	}
	t.byDigest[d] = tenant
	return nil
}

func validTenant(s string) bool {
	if len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// ParseTokens reads the flag form "token=tenant,token=tenant".
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

// LoadTokensFile reads a YAML or JSON object mapping token to tenant (JSON
// is YAML, so one decoder reads both).
func LoadTokensFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	m := map[string]string{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		// Not the decoder's message: it can quote file content, which is
		// tokens.
		return nil, fmt.Errorf("auth: tokens file %s: must be a YAML or JSON map of token to tenant", path)
	}
	return m, nil
}

// Len is the number of distinct tokens.
func (t *Tokens) Len() int { return len(t.byDigest) }

// Tenants lists the distinct tenants, sorted, for logging.
func (t *Tokens) Tenants() []string {
	seen := map[string]bool{}
	var out []string
	for _, tenant := range t.byDigest {
		if !seen[tenant] {
			seen[tenant] = true
			out = append(out, tenant)
		}
	}
	sort.Strings(out)
	return out
}

// Resolve returns the tenant of token.
func (t *Tokens) Resolve(token string) (string, bool) {
	if t == nil || token == "" {
		return "", false
	}
	tenant, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return tenant, ok
}

type tenantKey struct{}

// WithTenant returns ctx carrying tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant the interceptor resolved for this call.
func TenantFrom(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok && t != ""
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
		if tenant, ok := t.Resolve(strings.TrimSpace(token)); ok {
			return WithTenant(ctx, tenant), nil
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
