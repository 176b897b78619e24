package versions

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/clock"
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
