package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
)

func TestSinkPrintsOneLinePerRequest(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 5_000_000, time.UTC)
	var out bytes.Buffer
	s := &sink{out: &out, secret: []byte("k"), now: func() time.Time { return now }}
	body := []byte(`{"hello":1}`)
	send := func(sig string) {
		req := httptest.NewRequest(http.MethodPost, "/demo", bytes.NewReader(body))
		req.Header.Set(firing.HeaderExecutionID, "e-1")
		req.Header.Set(firing.HeaderJobID, "j-1")
		req.Header.Set(firing.HeaderScheduledAt, "2026-11-22T09:00:00Z")
		req.Header.Set(firing.HeaderSignature, sig)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
	send(signature.Sign([]byte("k"), now, "e-1", body))
	send(signature.Sign([]byte("other"), now, "e-1", body))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines:\n%s", len(lines), out.String())
	}
	for _, want := range []string{"execution=e-1", "job=j-1", "late=5ms", "signature=ok", "POST /demo"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q lacks %q", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], "signature=BAD(") {
		t.Errorf("a wrong signature was not flagged: %q", lines[1])
	}
}

func TestSinkBadAddress(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runCLI([]string{"sink", "--addr", "256.0.0.1:1"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
