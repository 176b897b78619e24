package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/testkit/harness"
)

// secondStat is the lateness of the firings due in one second.
type secondStat struct {
	at       time.Time // the whole second the firings were due in
	n        int
	p99, max time.Duration
}

// bySecond groups the first arrival of every expected firing by the whole
// second it was due in, and summarizes each second's lateness (arrival −
// due instant). A herd's seconds are its herds; a jittered load's are
// its firings spread over the second.
func bySecond(want harness.Expected, deliveries []harness.Delivery) []secondStat {
	first := map[uuid.UUID]time.Time{}
	for _, dl := range deliveries {
		if _, ok := want[dl.ExecutionID]; !ok || dl.Err != nil {
			continue
		}
		if t, seen := first[dl.ExecutionID]; !seen || dl.Received.Before(t) {
			first[dl.ExecutionID] = dl.Received
		}
	}
	late := map[time.Time][]time.Duration{}
	for id, got := range first {
		s := want[id]
		sec := s.FireAt.Truncate(time.Second)
		late[sec] = append(late[sec], max(0, got.Sub(s.FireAt)))
	}
	out := make([]secondStat, 0, len(late))
	for sec, ls := range late {
		slices.Sort(ls)
		sum := harness.Summarize(ls)
		out = append(out, secondStat{at: sec, n: sum.N, p99: sum.P99, max: sum.Max})
	}
	slices.SortFunc(out, func(a, b secondStat) int { return a.at.Compare(b.at) })
	return out
}

// slowestSeconds says how the lateness was spread over the run's seconds:
// how many seconds had a p99 above limit, and the n worst, each by its
// offset from start. A p99 over the whole run can come from a few bad
// seconds or from every second being a little late; this tells which.
func slowestSeconds(stats []secondStat, start time.Time, limit time.Duration, n int) string {
	if len(stats) == 0 {
		return "no firing arrived"
	}
	over := 0
	for _, s := range stats {
		if s.p99 > limit {
			over++
		}
	}
	worst := slices.Clone(stats)
	slices.SortStableFunc(worst, func(a, b secondStat) int { return int(b.p99 - a.p99) })
	worst = worst[:min(n, len(worst))]
	parts := make([]string, len(worst))
	for i, s := range worst {
		parts[i] = fmt.Sprintf("+%ds p99 %s max %s (%d)", int(s.at.Sub(start)/time.Second), FormatLatency(s.p99), FormatLatency(s.max), s.n)
	}
	return fmt.Sprintf("%d of %d seconds with p99 above %s; the slowest: %s", over, len(stats), FormatLatency(limit), strings.Join(parts, "; "))
}
