//go:build integration

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// schedctlCode runs a remote subcommand against addr with token and
// returns its exit status, stdout and stderr.
func schedctlCode(t *testing.T, addr, token string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cio := cmdIO{Stdout: &stdout, Stderr: &stderr, Now: time.Now, Getenv: func(k string) string {
		return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": token}[k]
	}}
	c, rest, ok := resolve(args)
	if !ok || !c.run.remote() {
		t.Fatalf("no command %q", args)
	}
	code := c.invoke(context.Background(), &env{io: cio, now: cio.now}, rest)
	return code, stdout.String(), stderr.String()
}

// token create, list, revoke and audit against the real api binary and
// Postgres: the printed token works at once with its role (a read-only
// one reads and is refused a change, naming its role), the api stores only
// a hash, and a revoked token is refused within the stated bound with no
// restart.
func TestIntegrationTokenCommands(t *testing.T) {
	addr, conn, _ := startAPI(t)
	do := schedctlAt(t, addr)

	out, stderr := do("token", "create", "viewer", "--role", "read-only", "--ttl", "24h")
	token, id := field(out, "token:"), field(out, "id:")
	if !strings.HasPrefix(token, "sdl_"+id+"_") || field(out, "role:") != "read-only" || !strings.Contains(stderr, "not shown again") {
		t.Fatalf("create:\n%s%s", out, stderr)
	}
	var hash string
	if err := conn.QueryRow(context.Background(), `SELECT secret_hash FROM api_tokens WHERE id = $1`, id).Scan(&hash); err != nil || !strings.HasPrefix(hash, "$argon2id$") {
		t.Fatalf("stored %q %v", hash, err)
	}

	if code, out, stderr := schedctlCode(t, addr, token, "list"); code != 0 {
		t.Fatalf("read-only list: %d\n%s%s", code, out, stderr)
	}
	code, _, stderr := schedctlCode(t, addr, token, "create", "--name", "x", "--cron", "@hourly", "--url", "http://127.0.0.1:9/")
	if code != 1 || !strings.Contains(stderr, "PermissionDenied") || !strings.Contains(stderr, "role read-only may not call sundial.v1.JobService/CreateJob") {
		t.Fatalf("read-only create: %d %s", code, stderr)
	}
	if code, _, stderr := schedctlCode(t, addr, token, "token", "create", "escalate", "--role", "admin"); code != 1 || !strings.Contains(stderr, "PermissionDenied") {
		t.Fatalf("read-only token create: %d %s", code, stderr)
	}

	out, _ = do("token", "list")
	if !strings.Contains(out, id) || !strings.Contains(out, "viewer") || strings.Contains(out, token) {
		t.Fatalf("list:\n%s", out)
	}
	out, _ = do("token", "revoke", id)
	if !strings.Contains(out, "revoked "+id+" (viewer)") || !strings.Contains(out, "by acme/cli") {
		t.Fatalf("revoke:\n%s", out)
	}
	revoked := time.Now()
	for {
		code, _, stderr := schedctlCode(t, addr, token, "list")
		if code == 1 && strings.Contains(stderr, "Unauthenticated") {
			break
		}
		if time.Since(revoked) > 3*time.Second {
			t.Fatalf("revoked token still accepted after %s: %d %s", time.Since(revoked), code, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ = do("token", "list", "--all")
	if !strings.Contains(out, "revoked by acme/cli") {
		t.Fatalf("list --all:\n%s", out)
	}
	out, _ = do("token", "audit")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "revoke") || !strings.Contains(lines[2], "create") || !strings.Contains(lines[2], "acme/cli") {
		t.Fatalf("audit:\n%s", out)
	}
}
