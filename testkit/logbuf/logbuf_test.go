package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAreAllKept: lines written from many goroutines while
// the buffer is read all end up whole in it.
func TestConcurrentWritesAreAllKept(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %d\n", g, i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	if !strings.Contains(b.String(), "g7 line 99\n") {
		t.Fatal("the last line of goroutine 7 is missing")
	}
}
