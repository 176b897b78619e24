package main

import (
	"slices"
	"testing"
)

func TestCreateAndUpdateWithRRule(t *testing.T) {
	f, addr := startFake(t)
	rule := "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17;BYMINUTE=0;BYSECOND=0 EXDATE:20261231T170000"
	code, _, stderr := run(t, addr, nil, "create", "--name", "close the books", "--rrule", rule,
		"--timezone", "America/Chicago", "--url", "https://books.example/close")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s := f.create.GetJob().GetSchedule()
	if s.GetRrule() != rule || s.GetTimezone() != "America/Chicago" {
		t.Fatalf("schedule sent: %v", s)
	}

	code, _, stderr = run(t, addr, nil, "update", "J1", "--rrule", "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := f.update.GetUpdateMask().GetPaths(); !slices.Equal(got, []string{"schedule.rrule"}) {
		t.Fatalf("mask %v, want [schedule.rrule]", got)
	}
	if got := f.update.GetJob().GetSchedule().GetRrule(); got != "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH" {
		t.Fatalf("rule sent %q", got)
	}

	if code, _, stderr := run(t, addr, nil, "create", "--cron", "@daily", "--rrule", "FREQ=DAILY"); code != 2 {
		t.Fatalf("two schedules: exit %d, want 2 (%s)", code, stderr)
	}
}
