package console

import (
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
)

// The rollup's hour: a minute without a row is 0 firings and a gap in
// lateness; only the outcomes that counted anything get a line, besides
// succeeded and dead; a minute's p50/p99 come from its buckets.
func TestRollupCharts(t *testing.T) {
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	m := &minuteCounts{lateness: make([]int64, firingstats.Buckets)}
	m.outcomes[firingstats.Succeeded], m.outcomes[firingstats.Retried] = 9, 1
	m.lateness[3], m.lateness[6] = 8, 2
	charts := rollupCharts(map[int64]*minuteCounts{start.Add(2 * time.Minute).Unix(): m}, start, "", "yours")
	if len(charts) != 2 {
		t.Fatalf("%d charts, want firings and lateness", len(charts))
	}
	var names []string
	for _, l := range charts[0].Lines {
		names = append(names, l.Name)
	}
	if len(names) != 3 || names[0] != "dead" || names[1] != "retried" || names[2] != "succeeded" {
		t.Errorf("firings lines %v, want dead, retried, succeeded", names)
	}
	succ := charts[0].Lines[2]
	if succ.Values[0] != "0" || succ.Values[2] != "9" || succ.Total != "9" {
		t.Errorf("succeeded per minute %v (total %s)", succ.Values[:3], succ.Total)
	}
	p50 := charts[1].Lines[0]
	if p50.Name != "p50" || p50.Values[0] != "–" || p50.Values[2] != "1.8ms" {
		t.Errorf("p50 per minute %v", p50.Values[:3])
	}
}

func TestNumbersOfAWindow(t *testing.T) {
	a := &minuteCounts{lateness: make([]int64, firingstats.Buckets)}
	a.outcomes[firingstats.Succeeded], a.outcomes[firingstats.Dead], a.outcomes[firingstats.Other] = 3, 1, 2
	a.lateness[0] = 4
	n := numbersOf(map[int64]*minuteCounts{0: a}, 60)
	if n.Firings != "6" || n.SuccessRate != "75.0%" || n.PerMinute != "0.1" || n.P99 == "–" {
		t.Errorf("%+v", n)
	}
	if e := numbersOf(nil, 60); e.SuccessRate != "–" || e.P50 != "–" || e.Firings != "0" {
		t.Errorf("an empty window: %+v", e)
	}
}
