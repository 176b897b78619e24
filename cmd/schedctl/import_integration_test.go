//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// importAt runs schedctl import in-process against the api at addr as
// tenant acme and returns its exit status, stdout and stderr.
func importAt(addr string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	cio := cmdIO{Stdout: &stdout, Stderr: &stderr, Now: time.Now, Getenv: func(k string) string {
		return map[string]string{"SUNDIAL_ADDR": addr, "SUNDIAL_TOKEN": "cli-token"}[k]
	}}
	c, rest, _ := resolve(append([]string{"import"}, args...))
	code := c.invoke(context.Background(), &env{io: cio, now: cio.now}, rest)
	return code, stdout.String(), stderr.String()
}

// writeTestCrontab writes a crontab of n distinct jobs, the first 1,250 in
// Berlin and the rest in New York, and returns its path: a longer file
// starts with a shorter one's lines.
func writeTestCrontab(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# generated\nCRON_TZ=Europe/Berlin\n")
	for i := range n {
		if i == 1250 {
			b.WriteString("CRON_TZ=America/New_York\n")
		}
		fmt.Fprintf(&b, "%d %d * * * /opt/jobs/run --shard %d\n", i%60, (i/60)%24, i)
	}
	path := filepath.Join(t.TempDir(), "big.cron")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// schedctl import end to end against the real api binary and database:
// 2,500 crontab lines go in three CreateJobs calls; a second import of
// the same file creates nothing; a file with one bad line imports nothing
// and names the line; the quota counts jobs, not calls.
func TestIntegrationImportAgainstTheAPI(t *testing.T) {
	addr, conn, _ := startAPIWith(t, "--quota-max-jobs", "2600")
	tmpl := "http://127.0.0.1:9/run?cmd={{urlquery .Command}}"
	file := writeTestCrontab(t, 2500)

	code, out, stderr := importAt(addr, "--target-template", tmpl, file)
	if code != 0 || !strings.HasPrefix(out, "2500 job(s) created, 0 already there, 0 refused, in ") {
		t.Fatalf("import: exit %d\n%s%s", code, out, stderr)
	}
	var n, audit int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND labels->>'imported-from' = 'crontab'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM job_audit WHERE tenant = 'acme' AND action = 'create' AND actor = 'acme/cli'`).Scan(&audit); err != nil {
		t.Fatal(err)
	}
	if n != 2500 || audit != 2500 {
		t.Fatalf("%d jobs, %d audit rows; want 2500 of each", n, audit)
	}

	code, out, stderr = importAt(addr, "--target-template", tmpl, file)
	if code != 0 || !strings.HasPrefix(out, "0 job(s) created, 2500 already there, 0 refused") {
		t.Fatalf("import again: exit %d\n%s%s", code, out, stderr)
	}

	bad := filepath.Join(t.TempDir(), "bad.cron")
	if err := os.WriteFile(bad, []byte("0 1 * * * /bin/a\n@reboot /bin/b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = importAt(addr, "--target-template", tmpl, bad)
	if code != 1 || !strings.Contains(stderr, bad+":2: @reboot runs when the machine boots") {
		t.Fatalf("bad file: exit %d\n%s", code, stderr)
	}

	// max_jobs 2600: the 2,500 there replay (not counted), and the last
	// call's 101 new jobs are one too many: it is refused whole, naming
	// the line of the job past the limit.
	more := writeTestCrontab(t, 2601)
	code, _, stderr = importAt(addr, "--target-template", tmpl, more)
	if code != 1 || !strings.Contains(stderr, "quota max_jobs") || !strings.Contains(stderr, more+":") {
		t.Fatalf("past max_jobs: exit %d\n%s", code, stderr)
	}
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE tenant = 'acme'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2500 {
		t.Fatalf("%d jobs after a refused import, want 2500", n)
	}
}
