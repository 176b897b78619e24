package firingstats

import (
	"math"
	"testing"
)

func TestBucketEdges(t *testing.T) {
	for _, c := range []struct {
		s    float64
		want int
	}{{0, 0}, {0.0005, 0}, {0.0006, 1}, {0.002, 3}, {60, 19}, {61, 20}} {
		if got := Bucket(c.s); got != c.want {
			t.Errorf("Bucket(%v) = %d, want %d", c.s, got, c.want)
		}
	}
}

func TestQuantileInterpolatesInsideTheBucket(t *testing.T) {
	b := make([]int64, Buckets)
	// 100 firings: 90 in (1 ms, 1.5 ms], 10 in (5 ms, 7.5 ms].
	b[2], b[6] = 90, 10
	if got := Quantile(b, 0.5); math.Abs(got-0.001-0.0005*50/90) > 1e-9 {
		t.Errorf("p50 = %v", got)
	}
	if got := Quantile(b, 0.99); math.Abs(got-0.005-0.0025*9/10) > 1e-9 {
		t.Errorf("p99 = %v", got)
	}
	if !math.IsNaN(Quantile(make([]int64, Buckets), 0.5)) {
		t.Error("an empty histogram has no quantile")
	}
	b = make([]int64, Buckets)
	b[len(Bounds)] = 3
	if got := Quantile(b, 0.99); got != 60 {
		t.Errorf("above the last bound: %v, want 60", got)
	}
}

func TestColumnsCoverTheAttemptEnds(t *testing.T) {
	for w, c := range map[string]int{"succeeded": Succeeded, "failed": Failed, "retry_scheduled": Retried, "dead": Dead,
		"overlap_skipped": Skipped, "cancelled": Cancelled, "fenced": Other, "stale": Other} {
		if Column(w) != c {
			t.Errorf("Column(%q) = %s, want %s", w, Columns[Column(w)], Columns[c])
		}
	}
}
