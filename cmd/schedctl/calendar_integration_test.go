//go:build integration

package main

import (
	"strings"
	"testing"
	"time"
)

// The calendar commands against the real api binary and Postgres: import
// a file, create a calendar with a Friday-Saturday weekend, a job that
// names it, the server's preview with what the calendar moved, and a
// delete refused while the job uses it.
func TestIntegrationCalendarCommands(t *testing.T) {
	addr, _, _ := startAPI(t)
	do := schedctlAt(t, addr)

	_, stderr := do("calendar", "import", "de", "testdata/holidays.ics")
	if !strings.Contains(stderr, `skipped event "Office party"`) || !strings.Contains(stderr, "RRULE") {
		t.Fatalf("import stderr:\n%s", stderr)
	}
	out, _ := do("calendar", "show", "de")
	for _, want := range []string{"2026-12-25  Christmas, both days", "2026-12-26  Christmas, both days; Boxing Day", "SAT,SUN (default)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	do("calendar", "create", "ae", "--weekend", "FRI,SAT", "--holiday", "2026-12-02=National Day")
	out, _ = do("calendar", "list")
	if !strings.Contains(out, "ae") || !strings.Contains(out, "FRI,SAT") || !strings.Contains(out, "de") {
		t.Fatalf("list:\n%s", out)
	}

	out, _ = do("server-preview", "--cron", "0 8 * * *", "--timezone", "Asia/Dubai", "--calendar", "ae",
		"--calendar-policy", "MOVE_NEXT", "--from", "2026-12-01T00:00:00Z", "-n", "3")
	for _, want := range []string{"2026-12-01T04:00:00Z", "2026-12-03T04:00:00Z", "2026-12-06T04:00:00Z",
		"2026-12-02T04:00:00Z -> 2026-12-03T04:00:00Z  2026-12-02 is a holiday in calendar ae (National Day)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("server-preview lacks %q:\n%s", want, out)
		}
	}
	out, _ = do("create", "--name", "dubai", "--cron", "0 8 * * *", "--timezone", "Asia/Dubai", "--calendar", "ae", "--url", "http://127.0.0.1:9/hook")
	if !strings.Contains(out, "[calendar ae, SKIP]") {
		t.Fatalf("create:\n%s", out)
	}
	c, rest, _ := resolve([]string{"calendar", "delete", "ae"})
	var code int
	var errOut string
	{
		var so, se strings.Builder
		cio := cmdIO{Stdout: &so, Stderr: &se, Now: time.Now, Getenv: func(k string) string {
			return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": "cli-token"}[k]
		}}
		code = c.invoke(t.Context(), &env{io: cio, now: cio.now}, rest)
		errOut = se.String()
	}
	if code != 1 || !strings.Contains(errOut, "FailedPrecondition") {
		t.Fatalf("delete of a calendar in use: exit %d: %s", code, errOut)
	}
	do("calendar", "delete", "de")

	// The audit trail: the import, the create and the delete, newest
	// first, naming the caller; the refused delete is not there.
	out, _ = do("calendar", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "de        delete  1        acme/cli") ||
		!strings.Contains(lines[2], "ae        create  1        acme/cli") || !strings.Contains(lines[3], `"import": true`) {
		t.Fatalf("calendar audit:\n%s", out)
	}
	if out, _ = do("calendar", "audit", "ae"); strings.Count(strings.TrimSpace(out), "\n") != 1 {
		t.Fatalf("calendar audit ae:\n%s", out)
	}
}
