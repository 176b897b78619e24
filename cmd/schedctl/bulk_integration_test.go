//go:build integration

package main

import (
	"strings"
	"testing"
)

// bulk pause and resume against the real api and database: the count, the
// change of every match (and only those), and a repeat that changes
// nothing.
func TestIntegrationBulkAgainstTheAPI(t *testing.T) {
	addr, conn, _ := startAPI(t)
	do := schedctlAt(t, addr)
	for _, team := range []string{"billing", "billing", "billing", "ops"} {
		do("create", "--name", "job-"+team, "--cron", "@hourly", "--url", "http://127.0.0.1:9/hook", "--label", "team="+team)
	}
	if out, _ := do("bulk", "pause", "--label", "team=billing", "--dry-run"); !strings.HasPrefix(out, "3 job(s) match; the first 3:") {
		t.Fatalf("dry run:\n%s", out)
	}
	if out, _ := do("bulk", "pause", "--label", "team=billing", "--yes"); out != "Paused 3 job(s); 0 already so; 0 refused\n" {
		t.Fatalf("pause:\n%s", out)
	}
	var paused, active int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'paused'), count(*) FILTER (WHERE status = 'active') FROM jobs`).Scan(&paused, &active); err != nil {
		t.Fatal(err)
	}
	if paused != 3 || active != 1 {
		t.Fatalf("%d paused, %d active; want 3 and 1", paused, active)
	}
	if out, _ := do("bulk", "pause", "--label", "team=billing", "--yes"); out != "Paused 0 job(s); 3 already so; 0 refused\n" {
		t.Fatalf("again:\n%s", out)
	}
	if out, _ := do("bulk", "resume", "--status", "paused", "--yes"); out != "Resumed 3 job(s); 0 already so; 0 refused\n" {
		t.Fatalf("resume:\n%s", out)
	}
}
