package tokens

import (
	"strings"
	"testing"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestTokenFormat(t *testing.T) {
	id, token, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	gotID, secret, ok := parseToken(token)
	if !ok || gotID != id || len(id) != 16 || len(secret) != 43 || !strings.HasPrefix(token, "sdl_"+id+"_") {
		t.Fatalf("token %q: id %q secret %d bytes ok %v", token, gotID, len(secret), ok)
	}
	_, other, _ := newToken()
	if other == token {
		t.Fatal("two tokens alike")
	}
	for _, bad := range []string{"", "tok-acme", "sdl_", "sdl_0123456789abcdef", "sdl_0123456789abcdef_", "sdl_0123456789abcdeg_x", "sdl_0123_x", "SDL_0123456789abcdef_x"} {
		if _, _, ok := parseToken(bad); ok {
			t.Errorf("parseToken(%q) accepted", bad)
		}
	}
}

func TestHashAndCheck(t *testing.T) {
	h, err := hashSecret("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "s3cret") {
		t.Fatalf("hash %q", h)
	}
	if ok, err := checkSecret(h, "s3cret"); !ok || err != nil {
		t.Fatalf("right secret: %v %v", ok, err)
	}
	if ok, err := checkSecret(h, "s3cret!"); ok || err != nil {
		t.Fatalf("wrong secret: %v %v", ok, err)
	}
	if h2, _ := hashSecret("s3cret"); h2 == h {
		t.Fatal("the same salt twice")
	}
	// Parameters are read from the hash: one made with other ones still
	// verifies.
	cheap := "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$"
	if ok, err := checkSecret(cheap+"x", "s3cret"); ok || err == nil {
		t.Fatalf("malformed hash: %v %v", ok, err)
	}
	for _, bad := range []string{"", "$argon2i$v=19$m=1,t=1,p=1$AA$AA", "$argon2id$v=18$m=1024,t=1,p=1$AA$AA", "$argon2id$v=19$m=0,t=1,p=1$AA$AA", "plain"} {
		if ok, err := checkSecret(bad, "x"); ok || err == nil {
			t.Errorf("checkSecret(%q) = %v, %v", bad, ok, err)
		}
	}
}

func TestRolesMapOneToOne(t *testing.T) {
	if len(roles) != len(auth.Roles) {
		t.Fatalf("%d API roles for %d auth roles", len(roles), len(auth.Roles))
	}
	for _, r := range auth.Roles {
		p := RoleToProto(r)
		if p == sundialv1.Role_ROLE_UNSPECIFIED || roles[p] != r {
			t.Errorf("%s → %s", r, p)
		}
	}
}

func TestMayMake(t *testing.T) {
	for _, tc := range []struct {
		from, to auth.Role
		ok       bool
	}{
		{auth.RoleAdmin, auth.RoleAdmin, true},
		{auth.RoleAdmin, auth.RoleReadOnly, true},
		{auth.RoleAdmin, auth.RoleOperator, false},
		{auth.RoleReadOnly, auth.RoleReadOnly, false},
		{auth.RoleOperator, auth.RoleOperator, true},
		{auth.RoleOperator, auth.RoleAdmin, false},
	} {
		if got := mayMake(tc.from, tc.to); got != tc.ok {
			t.Errorf("mayMake(%s, %s) = %v", tc.from, tc.to, got)
		}
	}
}
