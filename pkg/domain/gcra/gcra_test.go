package gcra_test

import (
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/gcra"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestPerSecond(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		want  gcra.Rate
	}{
		{10, 3, gcra.Rate{Interval: 100_000, Burst: 3}},
		{3, 0, gcra.Rate{Interval: 333_333, Burst: 1}},
		{5e6, 2, gcra.Rate{Interval: 1, Burst: 2}},
		{0, 5, gcra.Rate{}},
		{-1, 5, gcra.Rate{}},
	} {
		if got := gcra.PerSecond(c.rate, c.burst); got != c.want {
			t.Errorf("PerSecond(%g, %d) = %+v, want %+v", c.rate, c.burst, got, c.want)
		}
	}
	if (gcra.Rate{}).Limits() || !gcra.PerSecond(1, 1).Limits() {
		t.Fatal("Limits: only a rate with an interval limits")
	}
}

// Allow: the burst at once, then one per interval; a refused request is
// charged nothing, so it goes through after the wait it was told.
func TestAllowRefusesWithoutCharge(t *testing.T) {
	l, r := gcra.New(), gcra.PerSecond(10, 3)
	for i := range 3 {
		if w := l.Allow("a", r, t0); w != 0 {
			t.Fatalf("burst request %d waits %s", i, w)
		}
	}
	for range 2 {
		if w := l.Allow("a", r, t0); w != 100*time.Millisecond {
			t.Fatalf("over the burst: wait %s, want 100ms (and the same when asked again)", w)
		}
	}
	if w := l.Allow("a", r, t0.Add(100*time.Millisecond)); w != 0 {
		t.Fatalf("after the wait: %s", w)
	}
	if w := l.Allow("a", r, t0.Add(150*time.Millisecond)); w != 50*time.Millisecond {
		t.Fatalf("half an interval on: wait %s, want 50ms", w)
	}
	if w := l.Allow("b", r, t0); w != 0 {
		t.Fatalf("another key waits %s", w)
	}
}

// Reserve: a request that waits keeps its turn, so the next one waits an
// interval longer, and the one that waited is not asked again.
func TestReserveKeepsTheTurn(t *testing.T) {
	l, r := gcra.New(), gcra.PerSecond(10, 2)
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	for i, w := range want {
		if got := l.Reserve("a", r, t0); got != w {
			t.Fatalf("request %d waits %s, want %s", i, got, w)
		}
	}
	// 1 s later the key is idle again: a full burst.
	for i := range 2 {
		if got := l.Reserve("a", r, t0.Add(time.Second)); got != 0 {
			t.Fatalf("after idling, request %d waits %s", i, got)
		}
	}
}

func TestNoRateCountsNothing(t *testing.T) {
	l := gcra.New()
	for range 100 {
		if w := l.Reserve("a", gcra.Rate{}, t0); w != 0 {
			t.Fatalf("no rate: wait %s", w)
		}
	}
	if l.Len() != 0 {
		t.Fatalf("no rate held %d keys", l.Len())
	}
}

// Keys whose TAT has passed are forgotten; a busy key is kept.
func TestIdleKeysAreForgotten(t *testing.T) {
	l, r := gcra.New(), gcra.PerSecond(10, 3)
	l.Allow("a", r, t0)
	l.Allow("b", r, t0)
	l.Allow("c", r, t0.Add(2*time.Minute))
	if l.Len() != 1 {
		t.Fatalf("%d keys after a sweep, want 1", l.Len())
	}
}
