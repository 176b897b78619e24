//go:build integration

package main

import (
	"regexp"
	"strings"
	"testing"
)

// schedctl audit against the real api binary and Postgres: changes to a
// job, a calendar, a signing key and a token come back in one table,
// newest first; --kind, --actor, --subject, --since/--until and a JOB_ID
// filter; a bad subject is the api's InvalidArgument naming it; a
// read-only token sees every trail but the tokens' and is refused the
// token trail naming its role; the aliases read the same trails.
func TestIntegrationAuditCommand(t *testing.T) {
	addr, _, _ := startAPI(t)
	do := schedctlAt(t, addr)

	out, _ := do("create", "--name", "audited", "--cron", "@hourly", "--url", "http://127.0.0.1:9/hook")
	jobID := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(out)
	if jobID == "" {
		t.Fatalf("create printed no id:\n%s", out)
	}
	do("pause", jobID)
	do("calendar", "create", "ops", "--holiday", "2026-12-25")
	do("signing-key", "create")
	out, _ = do("token", "create", "viewer", "--role", "read-only")
	viewer := field(out, "token:")

	out, _ = do("audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if strings.Join(strings.Fields(lines[0]), " ") != "TIME KIND SUBJECT ACTION VERSION ACTOR DETAIL" {
		t.Fatalf("header:\n%s", out)
	}
	// Newest first: the token, the key shown (made with the first job),
	// the calendar, the pause, then the key made for the job and the
	// create at the same instant.
	var kinds []string
	for _, l := range lines[1:] {
		kinds = append(kinds, strings.Fields(l)[1]+":"+strings.Fields(l)[3])
	}
	if len(kinds) != 6 || strings.Join(kinds[:4], " ") != "token:create signing-key:show calendar:create job:pause" ||
		!strings.Contains(strings.Join(kinds[4:], " "), "job:create") || !strings.Contains(strings.Join(kinds[4:], " "), "signing-key:create") {
		t.Fatalf("every trail, newest first: %v\n%s", kinds, out)
	}

	if out, _ = do("audit", "--kind", "calendar"); strings.Count(strings.TrimSpace(out), "\n") != 1 || !strings.Contains(out, "ops") {
		t.Fatalf("--kind calendar:\n%s", out)
	}
	if out, _ = do("audit", "--kind", "token,signing-key", "--actor", "acme/cli"); strings.Count(strings.TrimSpace(out), "\n") != 2 ||
		!strings.Contains(out, "viewer") || !strings.Contains(out, "show") {
		t.Fatalf("--kind token,signing-key --actor acme/cli:\n%s", out)
	}
	if out, _ = do("audit", "--action", "create"); strings.Count(strings.TrimSpace(out), "\n") != 4 || strings.Contains(out, "pause") ||
		!strings.Contains(out, "calendar") || !strings.Contains(out, "viewer") {
		t.Fatalf("--action create (the job, the first key, the calendar and the token; not the pause):\n%s", out)
	}
	out, _ = do("audit", jobID)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "pause") || !strings.Contains(lines[2], "create") ||
		strings.Contains(lines[0], "KIND") {
		t.Fatalf("audit JOB_ID:\n%s", out)
	}
	if out2, _ := do("audit", "--kind", "job", "--subject", jobID); out2 != out {
		t.Fatalf("--kind job --subject JOB_ID differs from audit JOB_ID:\n%s\n%s", out2, out)
	}
	if out, _ = do("audit", "--since", "1h"); strings.Count(strings.TrimSpace(out), "\n") != 6 {
		t.Fatalf("--since 1h:\n%s", out)
	}
	if out, _ = do("audit", "--until", "1h"); strings.TrimSpace(out) != "TIME  KIND  SUBJECT  ACTION  VERSION  ACTOR  DETAIL" {
		t.Fatalf("--until 1h ago:\n%s", out)
	}
	if code, _, stderr := schedctlCode(t, addr, "cli-token", "audit", "--action", "Pause"); code == 0 || !strings.Contains(stderr, "action") {
		t.Fatalf("--action Pause: exit %d, %s", code, stderr)
	}
	code, _, stderr := schedctlCode(t, addr, "cli-token", "audit", "--kind", "job", "--subject", "nightly")
	if code != 1 || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, "subject: must be a UUID") {
		t.Fatalf("bad subject: %d %s", code, stderr)
	}

	// Read-only: every trail but the tokens'.
	code, out, stderr = schedctlCode(t, addr, viewer, "audit")
	if code != 0 || strings.Count(strings.TrimSpace(out), "\n") != 5 || strings.Contains(out, "token ") {
		t.Fatalf("read-only's audit: %d\n%s%s", code, out, stderr)
	}
	code, _, stderr = schedctlCode(t, addr, viewer, "token", "audit")
	if code != 1 || !strings.Contains(stderr, "PermissionDenied") || !strings.Contains(stderr, "role read-only may not read the token trail") {
		t.Fatalf("read-only's token audit: %d %s", code, stderr)
	}

	// The aliases are the same reads.
	for alias, kind := range map[string]string{"calendar": "calendar", "signing-key": "signing-key", "token": "token"} {
		a, _ := do(alias, "audit")
		k, _ := do("audit", "--kind", kind)
		if a != k || a == "" {
			t.Fatalf("%s audit differs from audit --kind %s:\n%s\n%s", alias, kind, a, k)
		}
	}
}
