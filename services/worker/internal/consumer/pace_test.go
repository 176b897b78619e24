package consumer

import (
	"testing"
	"time"
)

// A recovery's catch-ups, spaced 10 ms apart by the prefetcher (100/s),
// reach the worker 1.7 s after the first was due: released as they came,
// the first 171 would go out at once. Paced, they keep their spacing, held
// back by the first one's lateness, and no second holds more than 100.
func TestLateCatchUpsKeepTheirRate(t *testing.T) {
	ms := int64(time.Millisecond)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	p := newPacer(100)
	arrive := t0 + 1700*ms
	var rel []int64
	for i := range int64(500) {
		rel = append(rel, p.release(t0+i*10*ms, arrive))
	}
	if rel[0] != arrive {
		t.Fatalf("first released %d ms after arrival", (rel[0]-arrive)/ms)
	}
	for i := 1; i < len(rel); i++ {
		if d := rel[i] - rel[i-1]; d < 10*ms {
			t.Fatalf("catch-ups %d and %d released %s apart, under 1/rate", i-1, i, time.Duration(d))
		}
	}
	for i := range rel {
		n := 0
		for j := i; j < len(rel) && rel[j] < rel[i]+int64(time.Second); j++ {
			n++
		}
		if n > 100 {
			t.Fatalf("%d catch-ups released within a second from #%d", n, i)
		}
	}
	if last := time.Duration(rel[499] - arrive); last < 4900*time.Millisecond || last > 5100*time.Millisecond {
		t.Fatalf("the 500th released %s after arrival, want about 5 s (500 at 100/s)", last)
	}
}

// Catch-ups that arrive ahead of their instants, already spaced by the
// prefetcher, are not delayed; a burst long after the last one is paced
// from its own lateness.
func TestCatchUpsOnTimeAreNotDelayed(t *testing.T) {
	ms := int64(time.Millisecond)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	p := newPacer(100)
	for i := range int64(50) {
		at := t0 + i*20*ms
		if got := p.release(at, t0-time.Second.Nanoseconds()); got != at {
			t.Fatalf("on-time catch-up %d held back %s", i, time.Duration(got-at))
		}
	}
	later := t0 + time.Minute.Nanoseconds()
	if got := p.release(later-300*ms, later); got != later {
		t.Fatalf("a new burst's first catch-up released %s after arrival", time.Duration(got-later))
	}
	if got := newPacer(0).release(t0, t0+time.Second.Nanoseconds()); got != t0 {
		t.Fatal("rate 0 paces")
	}
}
