package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Every RPC of every sundial.v1 service has a row in the role table, and
// every row is an RPC: a new RPC cannot be open to a role by omission
// (a missing one is refused to all, which this test turns into a failure
// naming it).
func TestEveryRPCHasARole(t *testing.T) {
	_ = sundialv1.File_sundial_v1_job_service_proto // link the generated files
	rpcs := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("sundial.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				rpcs["/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name())] = true
			}
		}
		return true
	})
	if len(rpcs) < 25 {
		t.Fatalf("found only %d RPCs: are the generated files linked?", len(rpcs))
	}
	for m := range rpcs {
		if _, ok := Methods[m]; !ok {
			t.Errorf("%s has no entry in auth.Methods: give it Read (changes nothing) or Write", m)
		}
	}
	for m := range Methods {
		if !rpcs[m] {
			t.Errorf("auth.Methods names %s, which is no RPC", m)
		}
	}
}

func TestAllowed(t *testing.T) {
	cases := []struct {
		role   Role
		method string
		ok     bool
	}{
		{RoleAdmin, "/sundial.v1.JobService/CreateJob", true},
		{RoleAdmin, "/sundial.v1.TokenService/CreateToken", true},
		{RoleReadOnly, "/sundial.v1.JobService/GetJob", true},
		{RoleReadOnly, "/sundial.v1.JobService/PreviewSchedule", true},
		{RoleReadOnly, "/sundial.v1.DeadLetterService/ListDeadLetters", true},
		{RoleReadOnly, "/sundial.v1.JobService/CreateJob", false},
		{RoleReadOnly, "/sundial.v1.DeadLetterService/RedriveDeadLetters", false},
		{RoleReadOnly, "/sundial.v1.TokenService/ListTokens", false},
		{RoleOperator, "/sundial.v1.JobService/ListJobs", true},
		{RoleOperator, "/sundial.v1.DeadLetterService/RedriveDeadLetters", true},
		{RoleOperator, "/sundial.v1.JobService/UpdateJob", false},
		{RoleOperator, "/sundial.v1.SigningKeyService/RotateSigningKey", false},
		{RoleAdmin, "/sundial.v1.JobService/NoSuchMethod", false},
		{RoleAdmin, "/grpc.health.v1.Health/Check", true},
	}
	for _, tc := range cases {
		err := Allowed(tc.role, tc.method)
		if (err == nil) != tc.ok {
			t.Errorf("Allowed(%s, %s) = %v, want ok=%v", tc.role, tc.method, err, tc.ok)
			continue
		}
		if err != nil {
			name := strings.TrimPrefix(tc.method, "/")
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), string(tc.role)) || !strings.Contains(err.Error(), name) {
				t.Errorf("Allowed(%s, %s) = %v, want PermissionDenied naming both", tc.role, tc.method, err)
			}
		}
	}
}

func TestRolesOfStaticTokens(t *testing.T) {
	tokens, err := NewTokens(map[string]string{
		"tok-a": "acme", "tok-r": "acme:viewer:read-only", "tok-o": "platform::operator", "tok-n": "acme:ci:admin",
	})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]Principal{
		"tok-a": {Tenant: "acme", Actor: "acme/token:" + Fingerprint("tok-a"), Role: RoleAdmin},
		"tok-r": {Tenant: "acme", Actor: "acme/viewer", Role: RoleReadOnly},
		"tok-o": {Tenant: "platform", Actor: "platform/token:" + Fingerprint("tok-o"), Role: RoleOperator},
		"tok-n": {Tenant: "acme", Actor: "acme/ci", Role: RoleAdmin},
	} {
		p, ok, err := tokens.ResolveContext(context.Background(), token)
		if !ok || err != nil || p != want {
			t.Errorf("%s: %+v %v %v, want %+v", token, p, ok, err, want)
		}
	}
	if _, err := NewTokens(map[string]string{"tok": "acme:x:root"}); err == nil {
		t.Error("an unknown role was accepted")
	}
}

type fakeVerifier struct {
	p   Principal
	err error
}

func (f fakeVerifier) Verify(_ context.Context, token string) (Principal, bool, error) {
	if f.err != nil {
		return Principal{}, false, f.err
	}
	return f.p, token == "sdl_x_y", nil
}

// The interceptor asks the verifier for tokens that are not static,
// refuses by role with PermissionDenied, lets an operator act on the
// tenant it names and nobody else on another tenant.
func TestInterceptorRolesAndTenantHeader(t *testing.T) {
	static, err := NewTokens(map[string]string{"tok-r": "acme:viewer:read-only", "tok-o": "platform:oncall:operator", "tok-a": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := static.WithVerifier(fakeVerifier{p: Principal{Tenant: "globex", Actor: "globex/ci", Role: RoleReadOnly, TokenID: "x"}})
	unary := tokens.UnaryServerInterceptor()
	type seen struct {
		tenant, named string
		operator      bool
	}
	call := func(method string, kv ...string) (seen, error) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
		var s seen
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			s.tenant, _ = TenantFrom(ctx)
			s.named, s.operator = OperatorTenant(ctx)
			return nil, nil
		})
		return s, err
	}
	const get, create = "/sundial.v1.JobService/GetJob", "/sundial.v1.JobService/CreateJob"
	if s, err := call(get, "authorization", "Bearer sdl_x_y"); err != nil || s.tenant != "globex" {
		t.Fatalf("verified token: %+v %v", s, err)
	}
	if _, err := call(create, "authorization", "Bearer sdl_x_y"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("read-only create: %v", err)
	}
	if _, err := call(create, "authorization", "Bearer tok-r"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "read-only may not call sundial.v1.JobService/CreateJob") {
		t.Fatalf("static read-only create: %v", err)
	}
	if s, err := call(get, "authorization", "Bearer tok-o", TenantHeader, "acme"); err != nil || s.tenant != "acme" || s.named != "acme" || !s.operator {
		t.Fatalf("operator naming acme: %+v %v", s, err)
	}
	if s, err := call(get, "authorization", "Bearer tok-o"); err != nil || s.tenant != "platform" || s.named != "" || !s.operator {
		t.Fatalf("operator naming none: %+v %v", s, err)
	}
	if _, err := call(get, "authorization", "Bearer tok-o", TenantHeader, "a/b"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("operator naming a bad tenant: %v", err)
	}
	if _, err := call(get, "authorization", "Bearer tok-a", TenantHeader, "globex"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("admin naming another tenant: %v", err)
	}
	if s, err := call(get, "authorization", "Bearer tok-a", TenantHeader, "acme"); err != nil || s.tenant != "acme" || s.operator {
		t.Fatalf("admin naming its own tenant: %+v %v", s, err)
	}
	if _, err := call(get, "authorization", "Bearer sdl_other"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown token: %v", err)
	}
	down := static.WithVerifier(fakeVerifier{err: errors.New("postgres away")}).UnaryServerInterceptor()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer sdl_x_y"))
	_, err = down(ctx, nil, &grpc.UnaryServerInfo{FullMethod: get}, func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.Unavailable || strings.Contains(err.Error(), "postgres away") {
		t.Fatalf("verifier down: %v", err)
	}
	// A static token is never sent to the verifier.
	if s, ok, err := static.WithVerifier(fakeVerifier{err: errors.New("down")}).ResolveContext(context.Background(), "tok-a"); !ok || err != nil || s.Tenant != "acme" {
		t.Fatalf("static token with the verifier down: %+v %v", s, err)
	}
}

func TestLoadTokensFileWithRoles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	body := "tok-a: acme:ci:read-only\ntok-b: {tenant: platform, role: operator}\ntok-c: {tenant: acme, name: viewer, role: read-only}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadTokensFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := NewTokens(m)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]Role{"tok-a": RoleReadOnly, "tok-b": RoleOperator, "tok-c": RoleReadOnly} {
		if p, ok, _ := tokens.ResolveContext(context.Background(), token); !ok || p.Role != want {
			t.Errorf("%s: %+v %v, want role %s", token, p, ok, want)
		}
	}
	if err := os.WriteFile(p, []byte("tok-x: {tenant: acme, role: root}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = LoadTokensFile(p)
	if err == nil {
		_, err = NewTokens(m)
	}
	if err == nil || strings.Contains(err.Error(), "tok-x") {
		t.Fatalf("an unknown role: %v", err)
	}
}
