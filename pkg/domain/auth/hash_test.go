package auth

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestHashToken(t *testing.T) {
	h, err := HashToken("sdb_s3cret", BootstrapHashParams)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=4096,t=2,p=1$") || strings.Contains(h, "s3cret") {
		t.Fatalf("hash %q", h)
	}
	parsed, err := ParseHash(h)
	if err != nil {
		t.Fatal(err)
	}
	if !parsed.Matches("sdb_s3cret") || parsed.Matches("sdb_s3cret!") || parsed.Matches("") {
		t.Fatal("Matches answers wrong")
	}
	if h2, _ := HashToken("sdb_s3cret", BootstrapHashParams); h2 == h {
		t.Fatal("the same salt twice")
	}
	for _, bad := range []string{"", "plain-token", "$argon2i$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA",
		"$argon2id$v=18$m=1024,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA", "$argon2id$v=19$m=0,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA",
		"$argon2id$v=19$m=1024,t=1,p=1,x=2$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA", "$argon2id$v=19$m=1024,t=1,p=1$!!$c2FsdHNhbHRzYWx0c2FsdA",
		"$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$", "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA$"} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted", bad)
		}
	}
	// Parameters that would make each check slow are refused, by name.
	_, err = ParseHash("$argon2id$v=19$m=1048576,t=1,p=1$c2FsdHNhbHQ$c2FsdHNhbHRzYWx0c2FsdA")
	if err == nil || !strings.Contains(err.Error(), "m=1048576") || !strings.Contains(err.Error(), "schedctl token hash") {
		t.Fatalf("costly hash: %v", err)
	}
}

type hashVerifier struct{ h Hash }

func (v hashVerifier) Verify(_ context.Context, token string) (Principal, bool, error) {
	if v.h.Matches(token) {
		return Principal{Tenant: "acme", Actor: "acme/ops", Role: RoleReadOnly}, true, nil
	}
	return Principal{}, false, nil
}

func (hashVerifier) TokenID(token string) string {
	if id, ok := strings.CutPrefix(token, "sdl_"); ok {
		return id
	}
	return ""
}

type localAddr struct{}

func (localAddr) Network() string { return "local" }
func (localAddr) String() string  { return "in-process" }

// Every Unauthenticated and PermissionDenied refusal reaches the hook,
// with what is known of the caller and nothing it could authenticate
// with; calls that pass, and other errors, do not.
func TestRefusals(t *testing.T) {
	hash, err := HashToken("sdb_ops", BootstrapHashParams)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHash(hash)
	if err != nil {
		t.Fatal(err)
	}
	static, err := NewTokens(map[string]string{"tok-a": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var got []Refusal
	tokens := static.WithVerifier(hashVerifier{h}).WithRefusals(func(_ context.Context, r Refusal) { got = append(got, r) })
	unary := tokens.UnaryServerInterceptor()
	call := func(addr net.Addr, method string, kv ...string) error {
		ctx := peer.NewContext(metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...)), &peer.Peer{Addr: addr})
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	tcp := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}
	const get, create = "/sundial.v1.JobService/GetJob", "/sundial.v1.JobService/CreateJob"
	for _, err := range []error{
		call(tcp, get, "authorization", "Bearer sdb_ops"),
		call(tcp, create, "authorization", "Bearer tok-a"),
		call(tcp, "/grpc.health.v1.Health/Check"),
		call(tcp, get, "authorization", "Bearer tok-a", TenantHeader, "acme"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 0 {
		t.Fatalf("allowed calls reported: %+v", got)
	}
	_ = call(tcp, get)
	_ = call(tcp, get, "authorization", "Bearer wrong-token")
	_ = call(tcp, get, "authorization", "Bearer sdl_0123")
	_ = call(tcp, create, "authorization", "Bearer sdb_ops")
	_ = call(tcp, get, "authorization", "Bearer tok-a", TenantHeader, "globex")
	// Through the gateway: the address it saw, not what the client wrote.
	_ = call(localAddr{}, get, "authorization", "Bearer nope", "x-forwarded-for", "1.1.1.1, 192.0.2.7")
	// From the network, x-forwarded-for is the caller's word: ignored.
	_ = call(tcp, get, "x-forwarded-for", "192.0.2.9")
	want := []Refusal{
		{Method: get, Code: codes.Unauthenticated, Source: "10.1.2.3"},
		{Method: get, Code: codes.Unauthenticated, Source: "10.1.2.3", Fingerprint: Fingerprint("wrong-token")},
		{Method: get, Code: codes.Unauthenticated, Source: "10.1.2.3", Fingerprint: Fingerprint("sdl_0123"), TokenID: "0123"},
		{Method: create, Code: codes.PermissionDenied, Source: "10.1.2.3", Fingerprint: Fingerprint("sdb_ops"),
			Principal: Principal{Tenant: "acme", Actor: "acme/ops", Role: RoleReadOnly}},
		{Method: get, Code: codes.PermissionDenied, Source: "10.1.2.3", Fingerprint: Fingerprint("tok-a"),
			Principal: Principal{Tenant: "acme", Actor: "acme/token:" + Fingerprint("tok-a"), Role: RoleAdmin}},
		{Method: get, Code: codes.Unauthenticated, Source: "192.0.2.7", Fingerprint: Fingerprint("nope")},
		{Method: get, Code: codes.Unauthenticated, Source: "10.1.2.3"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d refusals, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("refusal %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestParsePrincipal(t *testing.T) {
	for spec, want := range map[string]Principal{
		"acme":               {Tenant: "acme", Role: RoleAdmin},
		"acme:ops":           {Tenant: "acme", Actor: "acme/ops", Role: RoleAdmin},
		"acme:ci:read-only":  {Tenant: "acme", Actor: "acme/ci", Role: RoleReadOnly},
		"platform::operator": {Tenant: "platform", Role: RoleOperator},
	} {
		got, err := ParsePrincipal(spec)
		if err != nil || got != want {
			t.Errorf("ParsePrincipal(%q) = %+v, %v", spec, got, err)
		}
	}
	for _, bad := range []string{"", "a/b", "acme:", "acme:x:boss", "a:b:c:d"} {
		if _, err := ParsePrincipal(bad); err == nil {
			t.Errorf("ParsePrincipal(%q) accepted", bad)
		}
	}
}
