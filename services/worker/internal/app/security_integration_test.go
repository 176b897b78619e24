//go:build integration

package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/testkit/testinfra"
	"github.com/sundialhq/sundial/testkit/tlstest"

	"github.com/sundialhq/sundial/services/worker/internal/recorder"
)

// nopLedger stands in for Cassandra; the test never records.
type nopLedger struct{ recorder.Ledger }

// The --redis-* credentials reach the client the worker's leases use: its
// readiness check passes as an ACL user with the right password, and a
// wrong one stops the worker at start, the error naming Redis.
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
			"--postgres-dsn", testinfra.PostgresDSN(t), "--kafka-brokers", "127.0.0.1:1",
			"--redis-addr", testinfra.RedisAddr(t), "--redis-key-prefix", prefix,
		}, map[string]string{"SUNDIAL_REDIS_USERNAME": user, "SUNDIAL_REDIS_PASSWORD_FILE": file})
		if err != nil {
			t.Fatal(err)
		}
		return newAndCheckRedis(ctx, t, cfg)
	}
	if err := check("worker-password"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := check("not-the-password"); err == nil || !strings.HasPrefix(err.Error(), "redis at ") ||
		!strings.Contains(err.Error(), "WRONGPASS") || !errors.Is(err, connsec.ErrRefused) {
		t.Fatalf("wrong password: %v, want a refusal naming redis, WRONGPASS", err)
	}
}

// newAndCheckRedis builds a worker from cfg (New's error if it fails) and
// runs its Redis readiness check.
func newAndCheckRedis(ctx context.Context, t *testing.T, cfg Config) error {
	w, err := New(ctx, cfg, Deps{Ledger: nopLedger{}}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer func() {
		for i := len(w.Services) - 1; i >= 0; i-- {
			w.Services[i].Stop() // never started: each is stoppable before Start
		}
	}()
	return w.Checks["redis"](ctx)
}

// Against the TLS port and ACL user of the local Redis (deploy/local/infra.sh):
// the worker starts with the right settings; a wrong password or a CA that
// did not sign Redis's certificate stops it at start within seconds, the
// error naming Redis.
func TestWorkerStartsOnlyWithTheRightRedisSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := testinfra.SecureCredentials()
	start := func(password, caFile string) (time.Duration, error) {
		cfg, err := load(t, []string{
			"--postgres-dsn", testinfra.PostgresDSN(t), "--kafka-brokers", "127.0.0.1:1",
			"--redis-addr", testinfra.SecureRedisAddr(t), "--redis-key-prefix", "t:" + testinfra.UniqueName(t, 40) + ":",
			"--redis-tls", "--redis-tls-ca-file", caFile, "--redis-username", cred.Username,
		}, map[string]string{"SUNDIAL_REDIS_PASSWORD": password})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err = newAndCheckRedis(ctx, t, cfg)
		return time.Since(t0), err
	}
	if _, err := start(cred.Password, testinfra.SecureCAFile(t)); err != nil {
		t.Fatalf("right settings: %v", err)
	}
	for name, c := range map[string]struct{ password, ca, want string }{
		"wrong password": {"not-the-password", testinfra.SecureCAFile(t), "WRONGPASS"},
		"untrusted CA":   {cred.Password, tlstest.NewCA(t, "other").CertFile, "certificate signed by unknown authority"},
	} {
		took, err := start(c.password, c.ca)
		if err == nil || !strings.HasPrefix(err.Error(), "redis at ") || !strings.Contains(err.Error(), c.want) || !errors.Is(err, connsec.ErrRefused) {
			t.Errorf("%s: %v, want a refusal naming redis, %s", name, err, c.want)
		}
		if took > 10*time.Second {
			t.Errorf("%s: refused only after %v", name, took)
		}
		t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
}
