package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// slowestSeconds says how the lateness was spread over the seconds from
// start through end (timeline: an analysis's first deliveries, by the
// second each was due in): how many seconds had a p99 above limit, and the
// n worst, each by its offset from start. A p99 over the whole run can
// come from a few bad seconds or from every second being a little late;
// this tells which.
func slowestSeconds(timeline []harness.Late, start, end time.Time, limit time.Duration, n int) string {
	type second struct {
		offset int
		harness.Summary
	}
	var secs []second
	for i, s := range harness.ByPeriod(timeline, start, time.Second, int(end.Sub(start)/time.Second)+1) {
		if s.N > 0 {
			secs = append(secs, second{i, s})
		}
	}
	if len(secs) == 0 {
		return "no firing arrived"
	}
	over := 0
	for _, s := range secs {
		if s.P99 > limit {
			over++
		}
	}
	worst := slices.Clone(secs)
	slices.SortStableFunc(worst, func(a, b second) int { return int(b.P99 - a.P99) })
	worst = worst[:min(n, len(worst))]
	parts := make([]string, len(worst))
	for i, s := range worst {
		parts[i] = fmt.Sprintf("+%ds p99 %s max %s (%d)", s.offset, FormatLatency(s.P99), FormatLatency(s.Max), s.N)
	}
	return fmt.Sprintf("%d of %d seconds with p99 above %s; the slowest: %s", over, len(secs), FormatLatency(limit), strings.Join(parts, "; "))
}
