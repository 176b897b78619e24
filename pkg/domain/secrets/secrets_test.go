package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeSecret(t *testing.T, dir, tenant, name, value string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, tenant), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tenant, name), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The syntax is jobspec's: exactly {{secret:NAME}}, and every "{{" must
// open a reference.
func TestMalformedReferences(t *testing.T) {
	r := NewResolver(nil, -1, Map{"acme": {"a": "value-a"}})
	for _, bad := range []string{"{{secret:}}", "{{secret:a b}}", "{{secret:a", "{{other}}"} {
		if _, _, err := r.Expand("acme", bad); !errors.Is(err, jobspec.ErrMalformedSecretRef) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Tenants and names jobspec or pkg/domain/auth accept but a directory must not
// serve: nothing outside the tenant's own directory is ever read.
func TestDirStaysInsideTheTenantsDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "secrets")
	writeSecret(t, dir, "acme", "tok", "acme-value")
	writeSecret(t, root, "secrets", "flat", "unscoped-value") // <dir>/flat, the old layout
	if err := os.WriteFile(filepath.Join(root, "outside"), []byte("outside-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := Dir(dir)
	for _, c := range []struct{ tenant, name string }{
		{"..", "outside"}, {".", "flat"}, {"", "flat"}, {"acme", ".."}, {"acme/..", "flat"},
		{"acme", "../acme/tok"}, {".hidden", "tok"}, {"globex", "tok"}, {"acme", "flat"},
	} {
		if v, ok, err := d.Lookup(c.tenant, c.name); ok || err != nil {
			t.Errorf("Lookup(%q, %q) = %q %v %v", c.tenant, c.name, v, ok, err)
		}
		if ok, err := d.Has(c.tenant, c.name); ok || err != nil {
			t.Errorf("Has(%q, %q) = %v %v", c.tenant, c.name, ok, err)
		}
	}
	if ok, err := d.Has("acme", "tok"); !ok || err != nil {
		t.Fatalf("Has(acme, tok) = %v %v", ok, err)
	}
	// A directory named like a secret is not one.
	if err := os.MkdirAll(filepath.Join(dir, "acme", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if ok, err := d.Has("acme", "sub"); ok || err != nil {
		t.Fatalf("Has(acme, sub) = %v %v", ok, err)
	}
	// The old layout as a mounted Kubernetes Secret: a link into ..data.
	writeSecret(t, dir, "..data", "linked", "linked-value")
	if err := os.Symlink(filepath.Join("..data", "linked"), filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("acme", filepath.Join(dir, "acme-link")); err != nil { // a link to a tenant's directory is no secret
		t.Fatal(err)
	}
	flat, err := d.Unscoped()
	if err != nil || len(flat) != 2 || flat[0] != "flat" || flat[1] != "linked" {
		t.Fatalf("Unscoped = %v %v", flat, err)
	}
}

// The heart of the scoping: the same name is a different secret for each
// tenant, and a tenant without it gets a MissingError naming the tenant,
// even though another tenant has a secret of that name.
func TestExpandIsScopedByTenant(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "acme", "api-token", "acme-value-123\n")
	writeSecret(t, dir, "acme", "db.pass", "acme-db-456")
	writeSecret(t, dir, "initech", "api-token", "initech-value-789")
	r := NewResolver(nil, -1, Dir(dir))
	out, used, err := r.Expand("acme", "Bearer {{secret:api-token}}; db={{secret:db.pass}}")
	if err != nil || out != "Bearer acme-value-123; db=acme-db-456" || len(used) != 2 {
		t.Fatalf("acme: %q %v %v", out, used, err)
	}
	if out, _, err := r.Expand("initech", "Bearer {{secret:api-token}}"); err != nil || out != "Bearer initech-value-789" {
		t.Fatalf("initech: %q %v", out, err)
	}
	if s, used, err := r.Expand("acme", "no references"); s != "no references" || used != nil || err != nil {
		t.Fatalf("plain string: %q %v %v", s, used, err)
	}
	for _, tenant := range []string{"globex", "", ".."} {
		out, used, err := r.Expand(tenant, "Bearer {{secret:api-token}}")
		var me *MissingError
		if !errors.As(err, &me) || me.Name != "api-token" || me.Tenant != tenant || !errors.Is(err, ErrMissing) || out != "" || used != nil {
			t.Fatalf("tenant %q resolved acme's secret: %q %v %v", tenant, out, used, err)
		}
	}
}

// A cached value is the tenant's own: a lookup for one tenant does not
// answer another's from the cache.
func TestCacheIsPerTenant(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := NewResolver(clk, time.Minute, Map{"acme": {"tok": "acme-tok"}})
	if v, err := r.Lookup("acme", "tok"); v != "acme-tok" || err != nil {
		t.Fatalf("acme: %q %v", v, err)
	}
	if v, err := r.Lookup("globex", "tok"); !errors.Is(err, ErrMissing) || v != "" {
		t.Fatalf("globex read acme's cached secret: %q %v", v, err)
	}
}

// A rotated file takes effect once the cached value is older than the TTL.
func TestCacheTTL(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "acme", "tok", "old-value")
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := NewResolver(clk, 10*time.Second, Dir(dir))
	if v, _ := r.Lookup("acme", "tok"); v != "old-value" {
		t.Fatalf("got %q", v)
	}
	writeSecret(t, dir, "acme", "tok", "new-value")
	clk.Advance(5 * time.Second)
	if v, _ := r.Lookup("acme", "tok"); v != "old-value" {
		t.Fatalf("within the TTL: %q", v)
	}
	clk.Advance(6 * time.Second)
	if v, _ := r.Lookup("acme", "tok"); v != "new-value" {
		t.Fatalf("after the TTL: %q", v)
	}
}

func TestEnvFromEnvironOnlyNames(t *testing.T) {
	got := EnvFromEnviron([]string{"SUNDIAL_SECRET_API_TOKEN=v1", "HOME=/root", "SUNDIAL_SECRET_X=v2"})
	if len(got) != 2 || got[0] != "SUNDIAL_SECRET_API_TOKEN" || got[1] != "SUNDIAL_SECRET_X" {
		t.Fatalf("%v", got)
	}
}

func TestRedact(t *testing.T) {
	got := Redact(`{"echo":"Bearer s3cr3t-value","n":"1"}`, []string{"s3cr3t-value", "1"})
	if got != `{"echo":"Bearer [REDACTED]","n":"1"}` {
		t.Fatalf("redacted %q", got)
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "{{secret:a}}", "x {{secret:a.b-c}} y", "{{secret:}}", "{{secret:{{secret:a}}}}", "{{secret:a", "plain"} {
		f.Add("acme", s)
	}
	r := NewResolver(nil, -1, Map{"acme": {"a": "value-a"}, "globex": {"b": "value-b"}})
	f.Fuzz(func(t *testing.T, tenant, s string) {
		out, used, err := r.Expand(tenant, s)
		if err != nil {
			return
		}
		if !HasReference(s) && out != s {
			t.Fatalf("a value without references changed: %q → %q", s, out)
		}
		for _, v := range used {
			if tenant == "acme" && v != "value-a" || tenant == "globex" && v != "value-b" || tenant != "acme" && tenant != "globex" {
				t.Fatalf("tenant %q used %q", tenant, v)
			}
		}
	})
}
