// Package logbuf is the log destination of tests that read back what a
// component logged: a buffer safe for the many goroutines writing to it
// while the test reads it.
package logbuf

import (
	"strings"
	"sync"
)

// Buffer collects writes; its zero value is ready. Pass it to
// slog.NewTextHandler (or as a process's stderr) and read it with String.
type Buffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
