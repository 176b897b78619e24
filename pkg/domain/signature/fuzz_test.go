package signature

import (
	"crypto/hmac"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzVerifyErrors feeds Verify any header value, as a target's verifier gets it
// from the network: it never panics, and it either accepts or answers one of
// its three errors. A header that verifies must carry the timestamp it
// was checked against.
func FuzzVerifyErrors(f *testing.F) {
	secret := []byte("fuzz-secret")
	now := time.Unix(1777626000, 0)
	good := Sign(secret, now, "exec-1", []byte("body"))
	for _, h := range []string{
		good,
		good + ",v1=" + "00",
		"t=1777626000",
		"v1=" + good[len("t=1777626000,v1="):],
		"t=x,v1=ab",
		"t=1777626000,v0=abc," + good[len("t=1777626000,"):],
		" t=1777626000 , v1=" + good[len("t=1777626000,v1="):],
		"t=-9223372036854775808,v1=" + good[len("t=1777626000,v1="):],
		"",
		",,,",
		"t=1777626000,v1=zz",
	} {
		f.Add(h, "exec-1", []byte("body"), int64(5))
	}
	f.Fuzz(func(t *testing.T, header, execID string, body []byte, tolSec int64) {
		tol := time.Duration(tolSec%86400) * time.Second
		err := Verify(secret, header, execID, body, now, tol)
		if err == nil {
			unix, _, perr := parse(header)
			if perr != nil {
				t.Fatalf("Verify accepted a header parse refuses: %v", perr)
			}
			if tol > 0 && (unix < now.Unix()-int64(tol/time.Second) || unix > now.Unix()+int64(tol/time.Second)) {
				t.Fatalf("Verify accepted t=%d outside %s of %d", unix, tol, now.Unix())
			}
			return
		}
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrExpired) && !errors.Is(err, ErrMismatch) {
			t.Fatalf("Verify: %v is none of its errors", err)
		}
	})
}

// FuzzSignVerify checks the round trip: what Sign produces verifies for the
// same secret, execution id and body, and fails for a different secret,
// a different body or a different execution id.
func FuzzSignVerify(f *testing.F) {
	f.Add([]byte("secret"), int64(1777626000), "0192d7a0-0000-7000-8000-000000000001", []byte(`{"a":1}`))
	f.Add([]byte{}, int64(0), "", []byte{})
	f.Add([]byte("k"), int64(-62135596800), "e", []byte{0xff, 0x00})
	f.Add([]byte("k"), int64(1777626000), "0192d7a0-0000-7000-8000-000000000001.{\"amount\": 1", []byte(`5}`))
	f.Fuzz(func(t *testing.T, secret []byte, unix int64, execID string, body []byte) {
		ts := time.Unix(unix, 0)
		h := Sign(secret, ts, execID, body)
		if strings.Contains(execID, ".") {
			// No execution id has one; it would blur where the id ends
			// and the body starts.
			if err := Verify(secret, h, execID, body, ts, time.Minute); !errors.Is(err, ErrMalformed) {
				t.Fatalf("an execution id with '.': %v", err)
			}
			return
		}
		if err := Verify(secret, h, execID, body, ts, time.Minute); err != nil {
			t.Fatalf("Verify(Sign(x)) = %v", err)
		}
		if err := Verify(append([]byte("x"), secret...), h, execID, body, ts, 0); !errors.Is(err, ErrMismatch) {
			t.Fatalf("another secret: %v", err)
		}
		if err := Verify(secret, h, execID, append([]byte("x"), body...), ts, 0); !errors.Is(err, ErrMismatch) {
			t.Fatalf("another body: %v", err)
		}
		if err := Verify(secret, h, execID+"x", body, ts, 0); !errors.Is(err, ErrMismatch) {
			t.Fatalf("another execution id: %v", err)
		}
	})
}

// A captured request cannot pass for another execution with a shorter body
// by moving the body's start into the execution id at a '.': the MAC input
// "<t>.<id>.<x>.<rest>" is the same either way, so Verify refuses an
// execution id with a '.' (no execution id has one).
func TestVerifyRefusesBodySplicedIntoExecutionID(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1777626000, 0)
	id := "0192d7a0-0000-7000-8000-000000000001"
	h := Sign(secret, now, id, []byte(`{"amount": 1.5}`))
	if err := Verify(secret, h, id+`.{"amount": 1`, []byte(`5}`), now, time.Minute); !errors.Is(err, ErrMalformed) {
		t.Fatalf("spliced execution id and body: %v, want ErrMalformed", err)
	}
	if err := Verify(secret, h, id, []byte(`{"amount": 1.5}`), now, time.Minute); err != nil {
		t.Fatalf("the genuine request: %v", err)
	}
}

// FuzzVerifyKeys feeds VerifyKeys any header, as a tenant's target gets
// it: it never panics, answers nil or one of its four errors, and accepts
// only a header holding a v1 that one of the target's keys made — named
// by that key's id, or unnamed — for this execution and body.
func FuzzVerifyKeys(f *testing.F) {
	now := time.Unix(1777626000, 0)
	cur := Key{ID: "k20261126-77b0e4d2", Secret: []byte("sdk_cur")}
	prev := Key{ID: "k20261001-3f9a1c07", Secret: []byte("sdk_prev")}
	both := SignKeys([]Key{cur, prev}, now, "exec-1", []byte("body"))
	for _, h := range []string{
		both,
		SignKeys([]Key{cur}, now, "exec-1", []byte("body")),
		Sign(cur.Secret, now, "exec-1", []byte("body")),
		strings.Replace(both, cur.ID, prev.ID, 1),
		"t=1777626000,kid=,v1=00",
		"t=1777626000,kid=k,kid=" + cur.ID + ",v1=" + both[strings.Index(both, "v1=")+3:][:64],
		"kid=" + cur.ID,
		"",
	} {
		f.Add(h, "exec-1", []byte("body"))
	}
	keys := []Key{cur, prev}
	f.Fuzz(func(t *testing.T, header, execID string, body []byte) {
		err := VerifyKeys(keys, header, execID, body, now, time.Minute)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrExpired) && !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("VerifyKeys: %v is none of its errors", err)
			}
			return
		}
		unix, sigs, perr := parseKeyed(header)
		if perr != nil {
			t.Fatalf("VerifyKeys accepted a header parseKeyed refuses: %v", perr)
		}
		for _, s := range sigs {
			for _, k := range keys {
				if (s.kid == "" || s.kid == k.ID) && hmac.Equal(s.mac, mac(k.Secret, unix, execID, body)) {
					return
				}
			}
		}
		t.Fatalf("VerifyKeys accepted %q without a matching signature", header)
	})
}
