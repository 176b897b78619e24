package signature

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// During a rotation's overlap a request carries one signature per valid
// key, each named: a verifier holding either key passes, with VerifyKeys
// (by id) or the older Verify (any v1); a verifier holding neither fails.
func TestSignKeysOverlap(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	cur := Key{ID: "k20261126-aaaa", Secret: []byte("sdk_current")}
	prev := Key{ID: "k20261001-bbbb", Secret: []byte("sdk_previous")}
	h := SignKeys([]Key{cur, prev}, now, "exec-1", []byte("body"))
	if !strings.HasPrefix(h, "t=1700000000,kid=k20261126-aaaa,v1=") || !strings.Contains(h, ",kid=k20261001-bbbb,v1=") {
		t.Fatalf("header %q", h)
	}
	for _, k := range []Key{cur, prev} {
		if err := VerifyKeys([]Key{k}, h, "exec-1", []byte("body"), now, time.Minute); err != nil {
			t.Errorf("VerifyKeys with %s: %v", k.ID, err)
		}
		if err := Verify(k.Secret, h, "exec-1", []byte("body"), now, time.Minute); err != nil {
			t.Errorf("Verify with %s: %v", k.ID, err)
		}
	}
	if err := VerifyKeys([]Key{cur, prev}, h, "exec-1", []byte("other"), now, time.Minute); !errors.Is(err, ErrMismatch) {
		t.Errorf("another body: %v", err)
	}
	stranger := Key{ID: "k-other", Secret: []byte("sdk_stranger")}
	if err := VerifyKeys([]Key{stranger}, h, "exec-1", []byte("body"), now, time.Minute); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a key the header does not name: %v", err)
	}
	// A key with the right id but the wrong secret: the id is no credential.
	if err := VerifyKeys([]Key{{ID: cur.ID, Secret: []byte("guess")}}, h, "exec-1", []byte("body"), now, time.Minute); !errors.Is(err, ErrMismatch) {
		t.Errorf("a forged key under a known id: %v", err)
	}
	// Swapping the ids around makes each key check the other's MAC.
	swapped := strings.NewReplacer(cur.ID, "X", prev.ID, cur.ID).Replace(h)
	swapped = strings.Replace(swapped, "X", prev.ID, 1)
	if err := VerifyKeys([]Key{cur}, swapped, "exec-1", []byte("body"), now, time.Minute); !errors.Is(err, ErrMismatch) {
		t.Errorf("swapped ids: %v", err)
	}
	if err := VerifyKeys([]Key{cur}, h, "exec-1", []byte("body"), now.Add(time.Hour), time.Minute); !errors.Is(err, ErrExpired) {
		t.Errorf("late: %v", err)
	}
}

// The platform's secret has no id: SignKeys with it is Sign, byte for byte.
func TestSignKeysWithoutIDIsSign(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	secret := []byte("platform-secret")
	if a, b := SignKeys([]Key{{Secret: secret}}, now, "e", []byte("x")), Sign(secret, now, "e", []byte("x")); a != b {
		t.Fatalf("%q != %q", a, b)
	}
	if err := VerifyKeys([]Key{{ID: "k1", Secret: secret}}, Sign(secret, now, "e", []byte("x")), "e", []byte("x"), now, time.Minute); err != nil {
		t.Fatalf("an unnamed signature is checked against every key: %v", err)
	}
}
