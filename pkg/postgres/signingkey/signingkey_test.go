package signingkey

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testKEK(t *testing.T, material string) *KEK {
	t.Helper()
	k, err := NewKEK([]byte(material))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A sealed secret opens only with the same key-encryption key and for the
// same row: moved to another tenant or key id it does not open.
func TestSealOpen(t *testing.T) {
	kek := testKEK(t, strings.Repeat("k", 32))
	secret, err := NewSecret()
	if err != nil || !bytes.HasPrefix(secret, []byte(SecretPrefix)) || len(secret) < 40 {
		t.Fatalf("secret %q %v", secret, err)
	}
	sealed, err := kek.Seal("acme", "k1", secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, secret) {
		t.Fatal("the sealed form holds the secret")
	}
	if got, err := kek.Open("acme", "k1", sealed); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q %v", got, err)
	}
	for _, c := range []struct {
		kek         *KEK
		tenant, kid string
	}{
		{kek, "globex", "k1"}, {kek, "acme", "k2"}, {testKEK(t, strings.Repeat("x", 32)), "acme", "k1"},
	} {
		if _, err := c.kek.Open(c.tenant, c.kid, sealed); !errors.Is(err, ErrSealed) {
			t.Errorf("%s/%s opened: %v", c.tenant, c.kid, err)
		}
	}
	if _, err := kek.Open("acme", "k1", sealed[:5]); !errors.Is(err, ErrSealed) {
		t.Errorf("short: %v", err)
	}
}

func TestLoadKEK(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKEK(short); err == nil || strings.Contains(err.Error(), "too-short") {
		t.Fatalf("short key: %v", err)
	}
	if _, err := LoadKEK(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte(strings.Repeat("z", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKEK(ok); err != nil {
		t.Fatal(err)
	}
}

func TestNewKeyID(t *testing.T) {
	id, err := NewKeyID(time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC))
	if err != nil || !strings.HasPrefix(id, "k20261126-") || len(id) != len("k20261126-")+8 || strings.ContainsAny(id, ",=") {
		t.Fatalf("%q %v", id, err)
	}
}
