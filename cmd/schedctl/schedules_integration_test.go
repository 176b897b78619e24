//go:build integration

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Against the real api: a job with two schedules, an exclusion and a
// run-count limit is stored as sent, get shows them and the runs left, and
// server-preview lists what the exclusion removed and where the limit
// ends, the same instants as the offline preview.
func TestIntegrationSchedulesExclusionsAndMaxRuns(t *testing.T) {
	addr, conn, _ := startAPI(t)
	do := schedctlAt(t, addr)
	out, _ := do("create", "--name", "union", "--cron", "0 * * * *", "--timezone", "America/New_York",
		"--also-cron", "30 2,5 * * *", "--exclude", "02:00-04:00 #backups", "--max-runs", "5",
		"--url", "http://127.0.0.1:9/hook", "-o", "json")
	var created sundialv1.Job
	decode(t, out, &created)
	s := created.GetSchedule()
	if len(s.GetAdditionalSchedules()) != 1 || s.GetAdditionalSchedules()[0].GetTimezone() != "America/New_York" ||
		s.GetExclusions()[0].GetNote() != "backups" || created.GetMaxRuns() != 5 || created.GetRemainingRuns() != 5 {
		t.Fatalf("created:\n%s", out)
	}
	if _, err := conn.Exec(context.Background(), `UPDATE jobs SET runs_staged = 2 WHERE id = $1`, created.GetId()); err != nil {
		t.Fatal(err)
	}
	out, _ = do("get", created.GetId())
	f := fields(t, out)
	if f["Runs left"] != "3 of 5" || f["Also"] != "30 2,5 * * * (America/New_York)" || f["Except"] != "02:00-04:00 #backups" {
		t.Fatalf("get:\n%s", out)
	}

	args := []string{"--cron", "0 * * * *", "--timezone", "America/New_York", "--also-cron", "30 2,5 * * *",
		"--exclude", "02:00-04:00 #backups", "--from", "2026-11-26T05:30:00Z"}
	out, _ = do(append([]string{"server-preview", "-n", "5", "--max-runs", "4"}, args...)...)
	want := strings.Join([]string{
		"2026-11-26T06:00:00Z  Thu 2026-11-26 01:00:00 EST",
		"2026-11-26T09:00:00Z  Thu 2026-11-26 04:00:00 EST",
		"2026-11-26T10:00:00Z  Thu 2026-11-26 05:00:00 EST",
		"2026-11-26T10:30:00Z  Thu 2026-11-26 05:30:00 EST",
		"skipped or moved:",
		"  2026-11-26T07:00:00Z removed  excluded by exclusions[0] (02:00-04:00): backups; skipped",
		"  2026-11-26T07:30:00Z removed  excluded by exclusions[0] (02:00-04:00): backups; skipped",
		"  2026-11-26T08:00:00Z removed  excluded by exclusions[0] (02:00-04:00): backups; skipped",
		"max_runs 4 reached: the job completes after its 4th run",
	}, "\n") + "\n"
	if _, rest, _ := strings.Cut(out, "\n"); rest != want {
		t.Fatalf("server-preview:\n%s\nwant (after the description):\n%s", out, want)
	}
	code, offline, stderr := cli(t, time.Now(), append([]string{"preview", "--cron", "0 * * * *", "--tz", "America/New_York", "--count", "4"}, args[4:]...)...)
	if code != 0 || offline != "2026-11-26T06:00:00Z\n2026-11-26T09:00:00Z\n2026-11-26T10:00:00Z\n2026-11-26T10:30:00Z\n" {
		t.Fatalf("offline preview: exit %d\n%s%s", code, offline, stderr)
	}
}
