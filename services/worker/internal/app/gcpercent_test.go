package app

import (
	"flag"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// gcPercent reads the collector's target in force.
func gcPercent() int {
	cur := debug.SetGCPercent(100)
	debug.SetGCPercent(cur)
	return cur
}

// --gc-percent sets the collector's target (200 by default), 0 leaves it,
// the GOGC variable wins over it, and a negative value is refused by name.
func TestGCPercent(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var c Config
	c.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.GCPercent != 200 {
		t.Fatalf("--gc-percent defaults to %d, want 200", c.GCPercent)
	}

	debug.SetGCPercent(100)
	applyGCPercent(c, logger)
	if got := gcPercent(); got != 200 {
		t.Fatalf("after --gc-percent 200 the target is %d", got)
	}

	debug.SetGCPercent(100)
	c.GCPercent = 0
	applyGCPercent(c, logger)
	if got := gcPercent(); got != 100 {
		t.Fatalf("--gc-percent 0 changed the target to %d", got)
	}

	t.Setenv("GOGC", "300")
	c.GCPercent = 200
	applyGCPercent(c, logger)
	if got := gcPercent(); got != 100 {
		t.Fatalf("with GOGC set, --gc-percent changed the target to %d", got)
	}

	c.GCPercent = -1
	var p config.Problems
	c.Validate(&p)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "gc-percent") {
		t.Fatalf("--gc-percent -1: %v, want a problem naming gc-percent", err)
	}
}
