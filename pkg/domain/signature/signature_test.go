package signature_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/signature"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	secret = []byte("s3cret")
	at     = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	execID = "0b8a1c4e-6f2d-5a33-9d1e-2c4b5a6d7e8f"
	body   = []byte(`{"hello":"world"}`)
)

func TestSignFormat(t *testing.T) {
	h := signature.Sign(secret, at, execID, body)
	want := fmt.Sprintf("t=%d,v1=", at.Unix())
	if !strings.HasPrefix(h, want) || len(h) != len(want)+64 {
		t.Fatalf("header %q, want prefix %q and 64 hex digits", h, want)
	}
	// Deterministic: same inputs, same header.
	if h2 := signature.Sign(secret, at, execID, body); h2 != h {
		t.Fatalf("not deterministic: %q vs %q", h, h2)
	}
}

func TestVerify(t *testing.T) {
	h := signature.Sign(secret, at, execID, body)
	tests := []struct {
		name    string
		secret  []byte
		header  string
		exec    string
		body    []byte
		now     time.Time
		tol     time.Duration
		wantErr error
	}{
		{name: "ok", secret: secret, header: h, exec: execID, body: body, now: at.Add(time.Minute), tol: 5 * time.Minute},
		{name: "ok, verifier clock behind", secret: secret, header: h, exec: execID, body: body, now: at.Add(-time.Minute), tol: 5 * time.Minute},
		{name: "no tolerance check", secret: secret, header: h, exec: execID, body: body, now: at.Add(24 * time.Hour)},
		{name: "too old", secret: secret, header: h, exec: execID, body: body, now: at.Add(6 * time.Minute), tol: 5 * time.Minute, wantErr: signature.ErrExpired},
		{name: "wrong secret", secret: []byte("other"), header: h, exec: execID, body: body, now: at, tol: time.Minute, wantErr: signature.ErrMismatch},
		{name: "other execution", secret: secret, header: h, exec: "another", body: body, now: at, tol: time.Minute, wantErr: signature.ErrMismatch},
		{name: "tampered body", secret: secret, header: h, exec: execID, body: []byte(`{"hello":"World"}`), now: at, tol: time.Minute, wantErr: signature.ErrMismatch},
		{name: "empty body signed as non-empty", secret: secret, header: h, exec: execID, body: nil, now: at, tol: time.Minute, wantErr: signature.ErrMismatch},
		{name: "empty header", secret: secret, header: "", exec: execID, body: body, now: at, wantErr: signature.ErrMalformed},
		{name: "no timestamp", secret: secret, header: h[strings.Index(h, ",")+1:], exec: execID, body: body, now: at, wantErr: signature.ErrMalformed},
		{name: "no signature", secret: secret, header: fmt.Sprintf("t=%d", at.Unix()), exec: execID, body: body, now: at, wantErr: signature.ErrMalformed},
		{name: "bad hex", secret: secret, header: fmt.Sprintf("t=%d,v1=zz", at.Unix()), exec: execID, body: body, now: at, wantErr: signature.ErrMalformed},
		{name: "bad timestamp", secret: secret, header: "t=soon,v1=" + strings.Repeat("0", 64), exec: execID, body: body, now: at, wantErr: signature.ErrMalformed},
		{name: "unknown scheme ignored, rotation", secret: secret, header: h + ",v2=abc,v1=" + strings.Repeat("0", 64), exec: execID, body: body, now: at, tol: time.Minute},
		{name: "timestamp swapped", secret: secret, header: strings.Replace(h, fmt.Sprint(at.Unix()), fmt.Sprint(at.Unix()+1), 1), exec: execID, body: body, now: at, tol: time.Minute, wantErr: signature.ErrMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := signature.Verify(tc.secret, tc.header, tc.exec, tc.body, tc.now, tc.tol)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(signature.Sign(secret, at, execID, body), execID, body)
	f.Add("t=1,v1=00", "x", []byte{})
	f.Add(",,,=", "", []byte(nil))
	f.Fuzz(func(t *testing.T, header, exec string, b []byte) {
		// Never panics, and accepts a header only when it carries the MAC
		// Sign would produce for its own timestamp.
		if err := signature.Verify(secret, header, exec, b, at, 0); err == nil {
			var ts int64
			if _, err := fmt.Sscanf(header, "t=%d", &ts); err != nil {
				return // t= was not the first element; still a valid header
			}
			want := signature.Sign(secret, time.Unix(ts, 0), exec, b)
			// Hex digits may come in either case: they are the same MAC.
			if !strings.Contains(strings.ToLower(header), want[strings.Index(want, ",")+1:]) {
				t.Fatalf("accepted %q without the expected MAC", header)
			}
		}
	})
}
