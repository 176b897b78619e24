package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cli runs one invocation through the command table with a fixed clock.
func cli(t *testing.T, now time.Time, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{io: cmdIO{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}, now: func() time.Time { return now }}
	code = e.run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func lines(ts ...string) string { return strings.Join(ts, "\n") + "\n" }

func TestPreview(t *testing.T) {
	now := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"New York spring gap, SHIFT",
			[]string{"--cron", "30 2 * * *", "--tz", "America/New_York", "--from", "2026-03-07T12:00:00Z", "--count", "3"},
			lines("2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z")},
		{"New York spring gap, SKIP",
			[]string{"--cron", "30 2 * * *", "--tz", "America/New_York", "--from", "2026-03-07T12:00:00Z", "--count", "2", "--dst-gap", "skip"},
			lines("2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z")},
		{"New York fall repeat, BOTH",
			[]string{"--cron", "30 1 * * *", "--tz", "America/New_York", "--from", "2026-10-31T12:00:00Z", "--count", "3", "--dst-repeat", "BOTH"},
			lines("2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z")},
		{"New York fall repeat, LAST",
			[]string{"--cron", "30 1 * * *", "--tz", "America/New_York", "--from", "2026-10-31T12:00:00Z", "--count", "1", "--dst-repeat", "last"},
			lines("2026-11-01T06:30:00Z")},
		{"Lord Howe half-hour gap",
			[]string{"--cron", "15 2 * * *", "--tz", "Australia/Lord_Howe", "--from", "2026-10-03T00:00:00Z", "--count", "2"},
			lines("2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z")},
		{"defaults: UTC, from now, ten firings",
			[]string{"--cron", "@daily"},
			lines("2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", "2026-03-10T00:00:00Z", "2026-03-11T00:00:00Z", "2026-03-12T00:00:00Z",
				"2026-03-13T00:00:00Z", "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z", "2026-03-17T00:00:00Z")},
		{"six fields", []string{"--cron", "*/20 * * * * *", "--count", "2"},
			lines("2026-03-07T12:00:20Z", "2026-03-07T12:00:40Z")},
		{"@every anchored at --start",
			[]string{"--cron", "@every 90m", "--start", "2026-03-07T12:10:00Z", "--count", "2"},
			lines("2026-03-07T12:10:00Z", "2026-03-07T13:40:00Z")},
		{"single dash flags work too", []string{"-cron", "0 9 * * MON", "-count", "1"},
			lines("2026-03-09T09:00:00Z")},
		{"rrule: the second Tuesday of every month at 09:00",
			[]string{"--rrule", "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0;BYSECOND=0", "--tz", "America/New_York", "--count", "3"},
			lines("2026-03-10T13:00:00Z", "2026-04-14T13:00:00Z", "2026-05-12T13:00:00Z")},
		{"rrule: DTSTART is --start, which gives the time of day",
			[]string{"--rrule", "RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH EXDATE:20260312T083000", "--tz", "Europe/London",
				"--start", "2026-03-02T08:30:00Z", "--count", "3"},
			lines("2026-03-16T08:30:00Z", "2026-03-19T08:30:00Z", "2026-03-30T07:30:00Z")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := cli(t, now, append([]string{"preview"}, tc.args...)...)
			if code != 0 || out != tc.want || stderr != "" {
				t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, tc.want, stderr)
			}
		})
	}
}

func TestPreviewEndsEarly(t *testing.T) {
	code, out, stderr := cli(t, time.Now(), "preview", "--cron", "0 * * * *", "--from", "2026-01-01T00:00:00Z",
		"--end", "2026-01-01T02:00:00Z", "--count", "5")
	if code != 0 || out != lines("2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z") {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(stderr, "no more firings after the 2 shown") {
		t.Errorf("stderr %q", stderr)
	}
}

// Every mistake on the command line exits 2 with the reason on stderr and
// nothing on stdout.
func TestPreviewUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--cron", "0 0 32 * *"}, "schedctl preview: day-of-month: 32 is out of range 1-31"},
		{[]string{"--cron", "61 * * * *"}, "minute: 61 is out of range 0-59"},
		{[]string{"--cron", "* * *"}, `expression: "* * *" has 3 fields`},
		{[]string{"--cron", "@every 1.5s"}, "whole number of seconds"},
		{[]string{}, "--cron or --rrule is required"},
		{[]string{"--cron", "@daily", "--rrule", "FREQ=DAILY"}, "give only one of --cron and --rrule"},
		{[]string{"--rrule", "FREQ=MONTHLY;BYSETPOS=1"}, "schedctl preview: rrule: BYSETPOS needs another BY rule"},
		{[]string{"--cron", "0", "9", "*", "*", "*"}, "quote the expression"},
		{[]string{"--cron", "@daily", "--tz", "Mars/Olympus_Mons"}, `--tz: unknown time zone "Mars/Olympus_Mons"`},
		{[]string{"--cron", "@daily", "--from", "yesterday"}, `--from: "yesterday" is not an RFC 3339 instant`},
		{[]string{"--cron", "@daily", "--end", "2026-13-01T00:00:00Z"}, "--end:"},
		{[]string{"--cron", "@daily", "--count", "0"}, "--count must be at least 1"},
		{[]string{"--cron", "@daily", "--count", "many"}, `invalid value "many" for flag -count`},
		{[]string{"--cron", "@daily", "--dst-gap", "LATER"}, `unknown DST gap policy "LATER"`},
		{[]string{"--cron", "@daily", "--dst-repeat", "TWICE"}, `unknown DST repeat policy "TWICE"`},
		{[]string{"--cron", "@daily", "--verbose"}, "flag provided but not defined: -verbose"},
	}
	for _, tc := range tests {
		code, out, stderr := cli(t, time.Now(), append([]string{"preview"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("preview %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, stderr, tc.want)
		}
	}
}

func TestPreviewHelp(t *testing.T) {
	code, _, stderr := cli(t, time.Now(), "preview", "-h")
	if code != 0 || !strings.Contains(stderr, "--dst-repeat FIRST|LAST|BOTH") || !strings.Contains(stderr, "-tz string") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := cli(t, time.Now(), "help", "preview"); code != 0 || !strings.Contains(stderr, "usage: schedctl preview") {
		t.Errorf("help preview: exit %d, stderr %q", code, stderr)
	}
}

func TestCommandTable(t *testing.T) {
	// No command: usage on stderr, exit 2.
	code, out, stderr := cli(t, time.Now())
	if code != 2 || out != "" || !strings.Contains(stderr, "usage: schedctl COMMAND") {
		t.Errorf("no args: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// Help lists the offline and the gRPC commands, on stdout.
	for _, h := range []string{"help", "-h", "--help"} {
		code, out, _ := cli(t, time.Now(), h)
		if code != 0 || !strings.Contains(out, "preview ") || !strings.Contains(out, "server-preview") || !strings.Contains(out, "create ") {
			t.Errorf("%s: exit %d, stdout %q", h, code, out)
		}
	}
	code, _, stderr = cli(t, time.Now(), "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = cli(t, time.Now(), "help", "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("help unknown: exit %d, stderr %q", code, stderr)
	}
	// gRPC commands are reached through the table: without a token, list
	// stops before dialing.
	code, _, stderr = cli(t, time.Now(), "list")
	if code != 2 || !strings.Contains(stderr, "no token") {
		t.Errorf("list without a token: exit %d, stderr %q", code, stderr)
	}
}

func TestRunCLIUsesRealStreams(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runCLI([]string{"preview", "--cron", "0 0 1 1 *", "--from", "2026-06-01T00:00:00Z", "--count", "1"}, &out, &errOut)
	if code != 0 || out.String() != "2027-01-01T00:00:00Z\n" || errOut.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestBinary builds schedctl and runs it once as a user would, checking
// the output and the exit status of a bad expression.
func TestBinary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build schedctl: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "schedctl")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Env = os.Environ()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}

	cmd := exec.Command(bin, "preview", "--cron", "0,30 2 * * *", "--tz", "Australia/Lord_Howe",
		"--from", "2026-10-03T12:00:00Z", "--count", "3")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("schedctl preview: %v\n%s", err, errOut.String())
	}
	// 02:00 does not exist on 2026-10-04 and shifts to 02:30, which is
	// also a real match: one firing. Then 02:00 and 02:30 the next day.
	if want := lines("2026-10-03T15:30:00Z", "2026-10-04T15:00:00Z", "2026-10-04T15:30:00Z"); out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}

	cmd = exec.Command(bin, "preview", "--cron", "0 0 32 * *")
	errOut.Reset()
	cmd.Stderr = &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(errOut.String(), "day-of-month: 32 is out of range 1-31") {
		t.Errorf("bad expression: %v, stderr %q; want exit status 2 and the parse error", err, errOut.String())
	}
}
