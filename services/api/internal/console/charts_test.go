package console

import (
	"cmp"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
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
	// The newest minute per second: 2 a minute is 0.03/s, 0 is 0.00/s;
	// a line whose newest minute has no value gets none.
	perSecond(ch)
	if ch.Lines[0].PerSecond != "0.03" || ch.Lines[1].PerSecond != "0.00" {
		t.Fatalf("per second: %q %q", ch.Lines[0].PerSecond, ch.Lines[1].PerSecond)
	}
	gap := drawChart("g", "l", "", []series{{Labels: map[string]string{}, Values: []float64{90, nan}}}, func(series) string { return "x" },
		func(v float64) string { return "" }, start, time.Minute)
	if perSecond(gap); gap.Lines[0].PerSecond != "" {
		t.Fatalf("a gap at the newest minute: %q", gap.Lines[0].PerSecond)
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

// The overview's dead letters per hour: each in its clock hour, the
// current one so far; the tiles count the last hour and the day. When the
// api listed only the newest of the day's, the hours before the oldest
// listed are gaps and the counts lower bounds.
func TestDeadLettersPerHour(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 30, 0, 0, time.UTC)
	dl := func(ago time.Duration) *sundialv1.DeadLetter {
		return &sundialv1.DeadLetter{DeadTime: timestamppb.New(now.Add(-ago))}
	}
	// Newest first, as ListDeadLetters answers.
	dls := []*sundialv1.DeadLetter{dl(time.Minute), dl(20 * time.Minute), dl(45 * time.Minute), dl(3 * time.Hour), dl(23*time.Hour + 10*time.Minute)}

	got := deadLettersPerHour(dls, false, now)
	if got.hour != "3" || got.day != "5" {
		t.Fatalf("tiles %q in the hour, %q in the day; want 3 and 5", got.hour, got.day)
	}
	vals := got.chart.Lines[0].Values
	if len(vals) != 24 || len(got.chart.Steps) != 24 || got.chart.Steps[0] != "11:00" || got.chart.Steps[23] != "10:00" || got.chart.Per != "hour" {
		t.Fatalf("steps %v (per %s)", got.chart.Steps, got.chart.Per)
	}
	// 10:00 holds 10:29 and 10:10; 09:00 holds 09:45; 07:00 holds 07:30;
	// 23h10m ago is 11:20 yesterday, the first hour.
	want := map[int]string{23: "2", 22: "1", 20: "1", 0: "1"}
	for i, v := range vals {
		if w, ok := want[i]; ok && v != w || !ok && v != "0" {
			t.Errorf("hour %s: %s, want %s", got.chart.Steps[i], v, cmp.Or(w, "0"))
		}
	}

	// Capped: only the four newest listed, the oldest at 07:30.
	got = deadLettersPerHour(dls[:4], true, now)
	if got.hour != "3" || got.day != "4+" {
		t.Fatalf("capped tiles %q, %q; want 3 and 4+", got.hour, got.day)
	}
	vals = got.chart.Lines[0].Values
	if vals[23] != "2" || vals[22] != "1" || vals[21] != "0" || vals[20] != "–" || vals[0] != "–" {
		t.Fatalf("capped hours %v: want 08:00 onwards counted, 07:00 (partial) and earlier gaps", vals)
	}
	// All of the capped list within the hour: the hour's count is a bound too.
	if got = deadLettersPerHour(dls[:2], true, now); got.hour != "2+" {
		t.Fatalf("capped within the hour: %q, want 2+", got.hour)
	}
}
