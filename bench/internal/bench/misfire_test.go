package bench

import (
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

func TestLostBeyondSkipped(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		missing, skipped, lost int
	}{
		{"nothing missing", 0, 0, 0},
		{"missing, none skipped", 7, 0, 7},
		{"all missing were skipped", 96806, 96806, 0},
		{"some lost beyond the skipped", 10, 4, 6},
		{"more skipped than missing (other loads' skips)", 3, 9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostBeyond(tc.missing, tc.skipped); got != tc.lost {
				t.Errorf("lostBeyond(%d, %d) = %d, want %d", tc.missing, tc.skipped, got, tc.lost)
			}
		})
	}
}

func TestProblemsLeaveMisfireSkipsOut(t *testing.T) {
	a := harness.Analysis{Expected: 300000, Arrived: 203194, Missing: 96806}
	if p := problems("herd", a, 96806); p != nil {
		t.Errorf("every missing firing skipped by misfire policy: want no problem, got %q", p)
	}
	if p := problems("herd", a, 96805); len(p) != 1 {
		t.Errorf("one firing lost beyond the skipped: want one problem, got %q", p)
	}
	if p := problems("herd", a, 0); len(p) != 1 {
		t.Errorf("nothing skipped: want the missing reported lost, got %q", p)
	}
	dup := harness.Analysis{Expected: 10, Arrived: 8, Missing: 2, DuplicateEffects: 1}
	if p := problems("herd", dup, 2); len(p) != 1 {
		t.Errorf("a duplicate effect is a problem whatever was skipped, got %q", p)
	}
}

func TestSpreadSkipped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		skipped int
		missing []int
		want    []int
	}{
		{"none skipped", 0, []int{1, 2}, []int{0, 0}},
		{"covers all", 5, []int{1, 2, 2}, []int{1, 2, 2}},
		{"runs out in order", 2, []int{1, 3}, []int{1, 1}},
		{"more than missing", 9, []int{1, 0}, []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spreadSkipped(tc.skipped, tc.missing...)
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Fatalf("spreadSkipped(%d, %v) = %v, want %v", tc.skipped, tc.missing, got, tc.want)
				}
			}
		})
	}
}

// A firing that never reached the sink may have been skipped by its job's
// misfire policy: the 10-second breakdown must not call it lost.
func TestByTenSecondsCallsMissingFiringsNotDelivered(t *testing.T) {
	from := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	tl := []harness.Late{
		{FireAt: from, Lateness: 5 * time.Millisecond},
		{FireAt: from.Add(time.Second), Lateness: Never},
		{FireAt: from.Add(2 * time.Second), Lateness: Never},
		{FireAt: from.Add(11 * time.Second), Lateness: 40 * time.Millisecond},
	}
	got := byTenSeconds(tl, from, from.Add(20*time.Second))
	want := "+0s p99 5.00 ms (2 not delivered), +10s p99 40.0 ms"
	if got != want {
		t.Fatalf("byTenSeconds = %q, want %q", got, want)
	}
}
