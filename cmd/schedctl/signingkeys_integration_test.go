//go:build integration

package main

import (
	"context"
	"strings"
	"testing"
)

// signing-key create, rotate and list against the real api and Postgres:
// the secret is printed once and stored sealed; a second create is
// refused; rotation keeps the previous key listed until its expiry.
func TestIntegrationSigningKeyCommands(t *testing.T) {
	addr, conn, _ := startAPI(t)
	do := schedctlAt(t, addr)

	out, stderr := do("signing-key", "create")
	secret := field(out, "secret:")
	first := field(out, "key_id:")
	if !strings.HasPrefix(secret, "sdk_") || first == "" || !strings.Contains(stderr, "not shown again") {
		t.Fatalf("create:\n%s%s", out, stderr)
	}
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM signing_keys WHERE tenant = 'acme' AND position(convert_to($1, 'UTF8') IN sealed) = 0`, secret).Scan(&n); err != nil || n != 1 {
		t.Fatalf("stored key: %d %v", n, err)
	}
	out, _ = do("signing-key", "rotate", "--overlap", "2h")
	second := field(out, "key_id:")
	if second == "" || second == first || field(out, "secret:") == secret || !strings.Contains(out, first+", valid until") {
		t.Fatalf("rotate:\n%s", out)
	}
	out, _ = do("signing-key", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], second) || !strings.Contains(lines[1], "current") ||
		!strings.HasPrefix(lines[2], first) || !strings.Contains(lines[2], "previous") || strings.Contains(out, "sdk_") {
		t.Fatalf("list:\n%s", out)
	}
	// Both changes in the audit trail, newest first, naming the caller
	// and the key, never a secret; paged one at a time.
	out, _ = do("signing-key", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "rotate") || !strings.Contains(lines[1], second) || !strings.Contains(lines[1], "acme/cli") ||
		!strings.Contains(lines[1], `"previous_key_id": "`+first+`"`) || !strings.Contains(lines[2], "create") || !strings.Contains(lines[2], first) ||
		strings.Contains(out, "sdk_") {
		t.Fatalf("audit:\n%s", out)
	}
	out, stderr = do("signing-key", "audit", "--page-size", "1")
	token, ok := strings.CutPrefix(strings.TrimSpace(stderr), "more: --page-token ")
	if !ok || !strings.Contains(out, second) || strings.Contains(out, "create") {
		t.Fatalf("audit first page:\n%s%s", out, stderr)
	}
	if out, stderr = do("signing-key", "audit", "--page-size", "1", "--page-token", token); !strings.Contains(out, first) || stderr != "" {
		t.Fatalf("audit second page:\n%s%s", out, stderr)
	}
}

// field returns the value of the "name:" line of a key's table.
func field(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
