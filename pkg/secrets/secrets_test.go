package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/jobspec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The syntax is jobspec's: exactly {{secret:NAME}}, and every "{{" must
// open a reference.
func TestMalformedReferences(t *testing.T) {
	r := NewResolver(nil, -1, Env{"SUNDIAL_SECRET_A": "value-a"})
	for _, bad := range []string{"{{secret:}}", "{{secret:a b}}", "{{secret:a", "{{other}}"} {
		if _, _, err := r.Expand(bad); !errors.Is(err, jobspec.ErrMalformedSecretRef) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// Names jobspec accepts but a directory must not serve.
	if _, ok, err := Dir(t.TempDir()).Lookup(".."); ok || err != nil {
		t.Errorf("Dir served %q: %v %v", "..", ok, err)
	}
}

func TestExpandFromDirThenEnv(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-token"), []byte("file-value-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := EnvFromEnviron([]string{"SUNDIAL_SECRET_API_TOKEN=env-loses", "SUNDIAL_SECRET_DB_PASS=env-value-456", "HOME=/root"})
	if len(env) != 2 {
		t.Fatalf("env %v", env)
	}
	r := NewResolver(nil, -1, Dir(dir), env)
	out, used, err := r.Expand("Bearer {{secret:api-token}}; db={{secret:db.pass}}")
	if err != nil {
		t.Fatal(err)
	}
	if out != "Bearer file-value-123; db=env-value-456" {
		t.Fatalf("expanded %q", out)
	}
	if len(used) != 2 {
		t.Fatalf("used %v", used)
	}
	if s, used, err := r.Expand("no references"); s != "no references" || used != nil || err != nil {
		t.Fatalf("plain string: %q %v %v", s, used, err)
	}
	_, _, err = r.Expand("{{secret:nope}}")
	var me *MissingError
	if !errors.As(err, &me) || me.Name != "nope" || !errors.Is(err, ErrMissing) {
		t.Fatalf("missing: %v", err)
	}
}

// A rotated file takes effect once the cached value is older than the TTL.
func TestCacheTTL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tok")
	if err := os.WriteFile(path, []byte("old-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := NewResolver(clk, 10*time.Second, Dir(dir))
	if v, _ := r.Lookup("tok"); v != "old-value" {
		t.Fatalf("got %q", v)
	}
	if err := os.WriteFile(path, []byte("new-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if v, _ := r.Lookup("tok"); v != "old-value" {
		t.Fatalf("within the TTL: %q", v)
	}
	clk.Advance(6 * time.Second)
	if v, _ := r.Lookup("tok"); v != "new-value" {
		t.Fatalf("after the TTL: %q", v)
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
		f.Add(s)
	}
	r := NewResolver(nil, -1, Env{"SUNDIAL_SECRET_A": "value-a"})
	f.Fuzz(func(t *testing.T, s string) {
		out, used, err := r.Expand(s)
		if err != nil {
			return
		}
		if !HasReference(s) && out != s {
			t.Fatalf("a value without references changed: %q → %q", s, out)
		}
		for _, v := range used {
			if v != "value-a" {
				t.Fatalf("used %q", v)
			}
		}
	})
}
