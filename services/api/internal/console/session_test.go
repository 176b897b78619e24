package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSessionSealOpen(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	s, err := newSessions(key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	v, err := s.seal("tok-acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "tok-acme") {
		t.Fatal("the cookie carries the token in clear")
	}
	if got, ok := s.open(v, now.Add(59*time.Minute)); !ok || got != "tok-acme" {
		t.Fatalf("open = %q %v", got, ok)
	}
	if _, ok := s.open(v, now.Add(time.Hour)); ok {
		t.Fatal("an expired session opened")
	}
	tampered := []byte(v)
	tampered[len(tampered)/2] ^= 1
	if _, ok := s.open(string(tampered), now); ok {
		t.Fatal("a tampered cookie opened")
	}
	other, _ := newSessions(bytes.Repeat([]byte("x"), 32), time.Hour)
	if _, ok := other.open(v, now); ok {
		t.Fatal("another key opened the cookie")
	}
	if _, err := newSessions([]byte("short"), time.Hour); err == nil {
		t.Fatal("a short key was accepted")
	}
}

func TestCSRFBoundToSession(t *testing.T) {
	s, _ := newSessions(bytes.Repeat([]byte("k"), 32), time.Hour)
	a, b := s.csrf("cookie-a"), s.csrf("cookie-b")
	if !s.checkCSRF("cookie-a", a) || s.checkCSRF("cookie-a", b) || s.checkCSRF("cookie-a", "") {
		t.Fatal("a CSRF token works only for its own session")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{"/jobs?x=1": "/jobs?x=1", "//evil.example": "/", "https://evil.example": "/", "/\\evil": "/", "": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
