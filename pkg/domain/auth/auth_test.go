package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseTokens(t *testing.T) {
	m, err := ParseTokens(" tok-a=acme, tok-b = globex ,,")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["tok-a"] != "acme" || m["tok-b"] != "globex" {
		t.Fatalf("ParseTokens = %v", m)
	}
	if _, err := ParseTokens("just-a-token"); err == nil {
		t.Fatal("want an error for an entry without =")
	}
}

func TestNewTokensRefusesBadEntries(t *testing.T) {
	for name, m := range map[string]map[string]string{
		"empty token":  {"": "acme"},
		"empty tenant": {"tok": " "},
		"bad tenant":   {"tok": "a b"},
	} {
		if _, err := NewTokens(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadTokensFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"tokens.yaml": "tok-a: acme\n\"tok-b\": globex\n",
		"tokens.json": `{"tok-a": "acme", "tok-b": "globex"}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := LoadTokensFile(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["tok-a"] != "acme" || m["tok-b"] != "globex" {
			t.Fatalf("%s: %v", name, m)
		}
	}
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("- secret-token-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadTokensFile(p)
	if err == nil || strings.Contains(err.Error(), "secret-token-value") {
		t.Fatalf("LoadTokensFile(list) = %v; want an error that does not quote the file", err)
	}
}

func TestInterceptorResolvesTenant(t *testing.T) {
	tokens, err := NewTokens(map[string]string{"tok-a": "acme", "tok-b": "globex"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tokens.Tenants(); len(got) != 2 || got[0] != "acme" {
		t.Fatalf("Tenants = %v", got)
	}
	unary := tokens.UnaryServerInterceptor()
	call := func(fullMethod string, md metadata.MD) (string, error) {
		ctx := metadata.NewIncomingContext(context.Background(), md)
		var tenant string
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: fullMethod}, func(ctx context.Context, _ any) (any, error) {
			tenant, _ = TenantFrom(ctx)
			return nil, nil
		})
		return tenant, err
	}
	const m = "/sundial.v1.JobService/GetJob"
	cases := []struct {
		name   string
		md     metadata.MD
		tenant string
		code   codes.Code
	}{
		{"bearer", metadata.Pairs("authorization", "Bearer tok-a"), "acme", codes.OK},
		{"lower-case scheme", metadata.Pairs("authorization", "bearer tok-b"), "globex", codes.OK},
		{"no header", metadata.MD{}, "", codes.Unauthenticated},
		{"unknown token", metadata.Pairs("authorization", "Bearer nope"), "", codes.Unauthenticated},
		{"basic scheme", metadata.Pairs("authorization", "Basic tok-a"), "", codes.Unauthenticated},
		{"bare token", metadata.Pairs("authorization", "tok-a"), "", codes.Unauthenticated},
	}
	for _, tc := range cases {
		tenant, err := call(m, tc.md)
		if status.Code(err) != tc.code || tenant != tc.tenant {
			t.Errorf("%s: tenant %q err %v; want %q %v", tc.name, tenant, err, tc.tenant, tc.code)
		}
	}
	// Health and reflection are public.
	for _, pm := range []string{"/grpc.health.v1.Health/Check", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"} {
		if _, err := call(pm, metadata.MD{}); err != nil {
			t.Errorf("%s needs a token: %v", pm, err)
		}
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestStreamInterceptor(t *testing.T) {
	tokens, _ := NewTokens(map[string]string{"tok": "acme"})
	stream := tokens.StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: "/sundial.v1.JobService/ListJobs"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer tok"))
	var got string
	err := stream(nil, fakeStream{ctx: ctx}, info, func(_ any, ss grpc.ServerStream) error {
		got, _ = TenantFrom(ss.Context())
		return nil
	})
	if err != nil || got != "acme" {
		t.Fatalf("stream: tenant %q err %v", got, err)
	}
	err = stream(nil, fakeStream{ctx: context.Background()}, info, func(any, grpc.ServerStream) error { return nil })
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream without token: %v", err)
	}
}

func TestBearer(t *testing.T) {
	md, err := Bearer("tok").GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer tok" {
		t.Fatalf("Bearer = %v, %v", md, err)
	}
}

func TestActors(t *testing.T) {
	tokens, err := NewTokens(map[string]string{"tok-a": "acme", "tok-d": "acme:deployer@ci", "tok-g": " globex : ops "})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ tenant, actor string }{
		"tok-a": {"acme", "acme/token:" + Fingerprint("tok-a")},
		"tok-d": {"acme", "acme/deployer@ci"},
		"tok-g": {"globex", "globex/ops"},
	}
	for token, want := range cases {
		tenant, actor, ok := tokens.ResolveActor(token)
		if !ok || tenant != want.tenant || actor != want.actor {
			t.Errorf("%s: %q %q %v, want %q %q", token, tenant, actor, ok, want.tenant, want.actor)
		}
	}
	// What `printf %s tok-a | sha256sum | cut -c1-12` prints.
	if fp := Fingerprint("tok-a"); fp != "4f66a4283f8b" {
		t.Fatalf("Fingerprint = %q", fp)
	}
	if strings.Contains(cases["tok-a"].actor, "tok-a") {
		t.Fatal("actor carries the token")
	}
	for name, m := range map[string]map[string]string{
		"empty name":   {"tok": "acme:"},
		"bad name":     {"tok": "acme:a b"},
		"two colons":   {"tok": "acme:a:b"},
		"empty tenant": {"tok": ":name"},
	} {
		if _, err := NewTokens(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	// The interceptor puts the actor next to the tenant.
	unary := tokens.UnaryServerInterceptor()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer tok-d"))
	var actor string
	_, err = unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/sundial.v1.JobService/GetJob"}, func(ctx context.Context, _ any) (any, error) {
		actor, _ = ActorFrom(ctx)
		return nil, nil
	})
	if err != nil || actor != "acme/deployer@ci" {
		t.Fatalf("actor %q err %v", actor, err)
	}
	if _, ok := ActorFrom(context.Background()); ok {
		t.Fatal("actor in an empty context")
	}
}

func TestLoadTokensFileWithNames(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	body := "tok-a: acme\ntok-b: acme:deployer\ntok-c: {tenant: globex, name: ops}\ntok-d:\n  tenant: globex\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadTokensFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if m["tok-a"] != "acme" || m["tok-b"] != "acme:deployer" || m["tok-c"] != "globex:ops" || m["tok-d"] != "globex" {
		t.Fatalf("LoadTokensFile = %v", m)
	}
	if _, err := NewTokens(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("tok-secret-x: {name: ops}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokensFile(p); err == nil || strings.Contains(err.Error(), "tok-secret-x") {
		t.Fatalf("mapping without a tenant: %v", err)
	}
}
