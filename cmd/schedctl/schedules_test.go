package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestCreateWithAlsoCronExcludeAndMaxRuns(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "create", "--name", "hourly", "--cron", "0 * * * *", "--timezone", "Europe/Berlin",
		"--also-cron", "30 2 * * *", "--also-cron", "15 9 * * MON",
		"--exclude", "02:00-04:00 #backups", "--exclude", "SAT,sun 2026-12-24..2026-12-26", "--exclude", "2027-01-01",
		"--max-runs", "100", "--url", "https://example.com/hook")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	job := f.create.GetJob()
	s := job.GetSchedule()
	var also []string
	for _, a := range s.GetAdditionalSchedules() {
		also = append(also, a.GetCron())
	}
	if !slices.Equal(also, []string{"30 2 * * *", "15 9 * * MON"}) || job.GetMaxRuns() != 100 {
		t.Fatalf("sent %v, max_runs %d", s, job.GetMaxRuns())
	}
	want := []*sundialv1.Exclusion{
		{Start: "02:00", End: "04:00", Note: "backups"},
		{Weekdays: []sundialv1.Weekday{sundialv1.Weekday_WEEKDAY_SATURDAY, sundialv1.Weekday_WEEKDAY_SUNDAY}, StartDate: "2026-12-24", EndDate: "2026-12-26"},
		{StartDate: "2027-01-01", EndDate: "2027-01-01"},
	}
	if got := s.GetExclusions(); len(got) != len(want) {
		t.Fatalf("exclusions %v", got)
	}
	for i, x := range s.GetExclusions() {
		if x.String() != want[i].String() {
			t.Errorf("exclusions[%d] = %v, want %v", i, x, want[i])
		}
	}

	code, _, stderr = run(t, addr, nil, "update", "J1", "--exclude", "22:00-06:00", "--max-runs", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := f.update.GetUpdateMask().GetPaths(); !slices.Equal(got, []string{"max_runs", "schedule.exclusions"}) {
		t.Fatalf("mask %v", got)
	}

	if code, _, stderr := run(t, addr, nil, "create", "--cron", "@daily", "--exclude", "sometimes"); code != 2 || !strings.Contains(stderr, "is not a window, a date or a weekday") {
		t.Fatalf("bad --exclude: exit %d (%s)", code, stderr)
	}
}

func TestServerPreviewSendsMaxRuns(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "server-preview", "--cron", "0 * * * *", "--exclude", "02:00-04:00", "--max-runs", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := f.calls().preview; r.GetMaxRuns() != 3 || len(r.GetSchedule().GetExclusions()) != 1 {
		t.Fatalf("request %v", f.calls().preview)
	}
}

func TestPreviewUnionExclusionsAndMaxRuns(t *testing.T) {
	code, out, stderr := cli(t, time.Now(), "preview", "--cron", "0 * * * *", "--tz", "America/New_York", "--also-cron", "30 2,5 * * *",
		"--exclude", "02:00-04:00 #backups", "--from", "2026-11-26T05:30:00Z", "--count", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "2026-11-26T06:00:00Z\n2026-11-26T09:00:00Z\n2026-11-26T10:00:00Z\n2026-11-26T10:30:00Z\n2026-11-26T11:00:00Z\n"; out != want {
		t.Fatalf("stdout %q, want %q", out, want)
	}
	wantErr := "skipped 2026-11-26T07:00:00Z  excluded by exclusions[0] (02:00-04:00): backups; skipped\n" +
		"skipped 2026-11-26T07:30:00Z  excluded by exclusions[0] (02:00-04:00): backups; skipped\n" +
		"skipped 2026-11-26T08:00:00Z  excluded by exclusions[0] (02:00-04:00): backups; skipped\n"
	if stderr != wantErr {
		t.Fatalf("stderr %q, want %q", stderr, wantErr)
	}

	code, out, stderr = cli(t, time.Now(), "preview", "--cron", "0 * * * *", "--max-runs", "2", "--from", "2026-11-26T05:30:00Z")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(stderr, "max_runs 2 reached: the job completes after its 2nd run") {
		t.Fatalf("max-runs: exit %d\n%s%s", code, out, stderr)
	}

	code, _, stderr = cli(t, time.Now(), "preview", "--cron", "0 * * * *", "--exclude", "09:00-09:00")
	if code != 2 || !strings.Contains(stderr, "schedule.exclusions[0].end: equals start") {
		t.Fatalf("bad exclusion: exit %d (%s)", code, stderr)
	}
}

// What get shows of an exclusion reads back as the same --exclude.
func TestExclusionTextRoundTrips(t *testing.T) {
	for _, v := range []string{"02:00-04:00 #backups", "SAT,SUN 2026-12-24..2026-12-26", "2027-01-01", "22:00-06:00 FRI ..2027-03-01"} {
		x, err := parseExclusion(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := exclusionText(x); got != v {
			t.Errorf("%q shows as %q", v, got)
		}
	}
}
