package console

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Lines share the chart's scale (the highest value at the top), a step
// without a value is a gap in the path, and the table rows hold every step.
func TestDrawChart(t *testing.T) {
	nan := math.NaN()
	start := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	ss := []series{
		{Labels: map[string]string{"outcome": "succeeded"}, Values: []float64{10, 20, nan, 40, 0}},
		{Labels: map[string]string{"outcome": "failed"}, Values: []float64{1, nan, nan, nan, 2}},
	}
	ch := drawChart("c", "label", "firings", ss, func(s series) string { return s.Labels["outcome"] },
		func(v float64) string {
			return strings.TrimSuffix(strings.TrimSuffix(time.Duration(v).String(), "ns"), "s")
		}, start, time.Minute)
	if ch.Max != "40" || ch.Start != "04:00Z" || ch.End != "04:04Z" || len(ch.Steps) != 5 || ch.Steps[4] != "04:04" {
		t.Fatalf("%+v", ch)
	}
	// Sorted by name: failed first.
	failed, ok := ch.Lines[0], ch.Lines[1]
	if failed.Name != "failed" || failed.Color != "#b3261e" || failed.Path != "M0.0,117.0 l0,0 M600.0,114.0 l0,0" || failed.Total != "3" {
		t.Fatalf("failed: %+v", failed)
	}
	if ok.Path != "M0.0,90.0 l0,0 L150.0,60.0 M450.0,0.0 l0,0 L600.0,120.0" || strings.Join(ok.Values, " ") != "10 20 – 40 0" || ok.Total != "70" {
		t.Fatalf("succeeded: %+v", ok)
	}
	if drawChart("c", "l", "", nil, nil, nil, start, time.Minute) != nil {
		t.Fatal("a chart of nothing")
	}
}

// A tenant's name is a PromQL string literal, whatever it holds.
func TestPromString(t *testing.T) {
	if got := promString(`ac"me\`); got != `"ac\"me\\"` {
		t.Fatalf("%s", got)
	}
}
