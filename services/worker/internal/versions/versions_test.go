package versions

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewerOnlyAboveAndForgottenAfterKeep(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w := New(nil, "", clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.Note("j", 5)
	w.Note("j", 4) // a late announcement never lowers it
	if v, ok := w.Newer("j", 4); !ok || v != 5 {
		t.Fatalf("Newer(j, 4) = %d, %v; want 5, true", v, ok)
	}
	if _, ok := w.Newer("j", 5); ok {
		t.Fatal("a firing of the announced version is not stale")
	}
	if _, ok := w.Newer("other", 1); ok {
		t.Fatal("a job never announced is not stale")
	}
	clk.Advance(Keep + time.Minute)
	w.Note("k", 1) // noting prunes what is past Keep
	if _, ok := w.Newer("j", 4); ok {
		t.Fatal("an announcement older than Keep is still remembered")
	}
}

func TestChangedIsToldOfEveryRaiseOnly(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	type change struct {
		id string
		v  int64
	}
	var got []change
	w := New(nil, "", clk, slog.New(slog.NewTextHandler(io.Discard, nil)), WithChanged(func(id string, v int64) {
		got = append(got, change{id, v})
	}))
	w.Note("j", 2)
	w.Note("j", 2) // the same announcement again: not a change
	w.Note("j", 1) // a late, lower one: not a change
	w.Note("k", 7)
	w.Note("j", 3)
	want := []change{{"j", 2}, {"k", 7}, {"j", 3}}
	if len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("changes %v, want %v", got, want)
		}
	}
}
