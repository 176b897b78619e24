//go:build integration

package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/testkit/testinfra"

	"github.com/sundialhq/sundial/services/worker/internal/recorder"
)

// nopLedger stands in for Cassandra; the test never records.
type nopLedger struct{ recorder.Ledger }

// The --redis-* credentials reach the client the worker's leases use: its
// readiness check passes as an ACL user with the right password and fails
// with a wrong one.
func TestRedisCredentialsReachTheLeaseClient(t *testing.T) {
	admin, prefix := testinfra.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user := "sundial_" + testinfra.UniqueName(t, 40)
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">worker-password", "~"+prefix+"*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	check := func(password string) error {
		file := filepath.Join(t.TempDir(), "redis-password")
		if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := load(t, []string{
			"--signing-secret", "s", "--postgres-dsn", "", "--kafka-brokers", "127.0.0.1:1",
			"--redis-addr", testinfra.RedisAddr(t), "--redis-key-prefix", prefix,
		}, map[string]string{"SUNDIAL_REDIS_USERNAME": user, "SUNDIAL_REDIS_PASSWORD_FILE": file})
		if err != nil {
			t.Fatal(err)
		}
		w, err := New(ctx, cfg, Deps{Ledger: nopLedger{}}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for i := len(w.Services) - 1; i >= 0; i-- {
				w.Services[i].Stop() // never started: each is stoppable before Start
			}
		}()
		return w.Checks["redis"](ctx)
	}
	if err := check("worker-password"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := check("not-the-password"); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v, want WRONGPASS", err)
	}
}
