package work

import (
	"testing"
	"unsafe"
)

// The worker holds 100,000 and more items: splitting Item into its parts
// must not make it larger than the flat struct it was (320 bytes; the
// worker is built for 64-bit platforms only).
func TestItemSize(t *testing.T) {
	if got := unsafe.Sizeof(Item{}); got > 320 {
		t.Fatalf("unsafe.Sizeof(Item{}) = %d, want at most 320", got)
	}
	t.Logf("unsafe.Sizeof(Item{}) = %d", unsafe.Sizeof(Item{}))
}
