package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

type fakeTokens struct {
	sundialv1.UnimplementedTokenServiceServer
	mu      sync.Mutex
	creates []*sundialv1.CreateTokenRequest
	revokes []string
	tenants []string // the sundial-tenant header of each list
}

func (f *fakeTokens) CreateToken(_ context.Context, req *sundialv1.CreateTokenRequest) (*sundialv1.CreateTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	return &sundialv1.CreateTokenResponse{Secret: "sdl_0123456789abcdef_secret",
		Token: &sundialv1.Token{Id: "0123456789abcdef", Tenant: "acme", Name: req.GetName(), Role: req.GetRole(), CreateTime: timestamppb.New(fakeNow)}}, nil
}

func (f *fakeTokens) ListTokens(ctx context.Context, _ *sundialv1.ListTokensRequest) (*sundialv1.ListTokensResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.tenants = append(f.tenants, strings.Join(md.Get(auth.TenantHeader), ","))
	f.mu.Unlock()
	return &sundialv1.ListTokensResponse{Tokens: []*sundialv1.Token{
		{Id: "0123456789abcdef", Name: "ci", Role: sundialv1.Role_ROLE_TENANT_ADMIN, CreateTime: timestamppb.New(fakeNow), CreatedBy: "acme/ops"},
		{Id: "fedcba9876543210", Name: "old", Role: sundialv1.Role_ROLE_TENANT_READ_ONLY, CreateTime: timestamppb.New(fakeNow),
			RevokeTime: timestamppb.New(fakeNow), RevokedBy: "acme/ops"},
		{Id: "00000000000000aa", Name: "gone", Role: sundialv1.Role_ROLE_TENANT_READ_ONLY, CreateTime: timestamppb.New(fakeNow.Add(-2 * time.Hour)),
			ExpireTime: timestamppb.New(fakeNow.Add(-time.Hour))},
	}}, nil
}

func (f *fakeTokens) RevokeToken(_ context.Context, req *sundialv1.RevokeTokenRequest) (*sundialv1.RevokeTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokes = append(f.revokes, req.GetId())
	return &sundialv1.RevokeTokenResponse{Token: &sundialv1.Token{Id: req.GetId(), Name: "ci", RevokeTime: timestamppb.New(fakeNow), RevokedBy: "acme/ops"}}, nil
}

func TestTokenCommands(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "token create", "ci", "--role", "admin", "--ttl", "720h")
	if code != 0 || !strings.Contains(out, "sdl_0123456789abcdef_secret") || !strings.Contains(stderr, "not shown again") {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	if c := f.toks.creates[0]; c.GetName() != "ci" || c.GetRole() != sundialv1.Role_ROLE_TENANT_ADMIN || c.GetTtl().AsDuration() != 720*time.Hour {
		t.Fatalf("create sent %v", c)
	}
	if code, _, stderr := run(t, addr, nil, "token create", "ci", "--role", "root"); code != 2 || !strings.Contains(stderr, "--role") {
		t.Fatalf("bad role: %d %q", code, stderr)
	}
	if code, _, _ := run(t, addr, nil, "token create"); code != 2 {
		t.Fatalf("no name: %d", code)
	}
	code, out, _ = run(t, addr, nil, "token list", "--all")
	if code != 0 || !strings.Contains(out, "revoked by acme/ops") || !strings.Contains(out, "expired") || !strings.Contains(out, "read-only") {
		t.Fatalf("list: %d %q", code, out)
	}
	code, out, _ = run(t, addr, nil, "token revoke", "0123456789abcdef")
	if code != 0 || !strings.Contains(out, "revoked 0123456789abcdef (ci)") || f.toks.revokes[0] != "0123456789abcdef" {
		t.Fatalf("revoke: %d %q", code, out)
	}
	// --tenant travels as the sundial-tenant header; a tenant's token
	// may name its own tenant only (the api's interceptor refuses).
	if code, _, stderr := run(t, addr, map[string]string{"SUNDIAL_TENANT": "acme"}, "token list"); code != 0 {
		t.Fatalf("list as acme: %s", stderr)
	}
	if got := f.toks.tenants; len(got) != 2 || got[0] != "" || got[1] != "acme" {
		t.Fatalf("tenant headers %q", got)
	}
	if code, _, stderr := run(t, addr, nil, "token list", "--tenant", "globex"); code != 1 || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("list as globex: %d %s", code, stderr)
	}
}
