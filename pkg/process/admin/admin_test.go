package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	s := New("127.0.0.1:0", slog.New(slog.DiscardHandler), NewRegistry(), false)
	var dbErr error
	s.AddCheck("postgres", func(context.Context) error { return dbErr })
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	base := "http://" + s.Addr()

	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, "postgres: ok") {
		t.Fatalf("readyz = %d %q", code, body)
	}
	dbErr = errors.New("connection refused")
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "postgres: connection refused") {
		t.Fatalf("readyz with a failing check = %d %q", code, body)
	}
	dbErr = nil
	s.SetDraining()
	if code, _ := get(t, base+"/readyz"); code != 503 {
		t.Fatalf("readyz while draining = %d", code)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("healthz while draining = %d", code)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics = %d", code)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 404 {
		t.Fatalf("pprof served while disabled: %d", code)
	}
}
