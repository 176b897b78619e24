package main

import (
	"slices"
	"testing"
)

// --expected-version reaches the api on update, pause, resume and delete,
// and is absent (0, any version) when not given.
func TestExpectedVersionPassesThrough(t *testing.T) {
	f, addr := startFake(t)
	if code, _, stderr := run(t, addr, nil, "update", "J1", "--name", "n", "--expected-version", "7"); code != 0 {
		t.Fatalf("update: exit %d: %s", code, stderr)
	}
	if got := f.update.GetExpectedVersion(); got != 7 {
		t.Fatalf("update sent expected_version %d, want 7", got)
	}
	if code, _, stderr := run(t, addr, nil, "update", "J1", "--name", "n"); code != 0 || f.update.GetExpectedVersion() != 0 {
		t.Fatalf("update without the flag: exit %d, expected_version %d: %s", code, f.update.GetExpectedVersion(), stderr)
	}
	for _, args := range [][]string{
		{"pause", "--expected-version", "3", "J1"},
		{"resume", "J1", "--expected-version", "4"},
		{"delete", "--expected-version", "5", "J1"},
		{"delete", "J2"},
	} {
		if code, _, stderr := run(t, addr, nil, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if want := []string{"pause J1@3", "resume J1@4", "delete J1@5", "delete J2"}; !slices.Equal(f.jobs.ids, want) {
		t.Fatalf("calls %v, want %v", f.jobs.ids, want)
	}
	// A negative version is a usage error, sent nowhere.
	for _, args := range [][]string{{"update", "J1", "--name", "n", "--expected-version", "-1"}, {"pause", "--expected-version", "-1", "J1"}} {
		if code, _, stderr := run(t, addr, nil, args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
	if len(f.jobs.ids) != 4 {
		t.Fatalf("a refused command called the api: %v", f.jobs.ids)
	}
}
