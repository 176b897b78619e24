package harness

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Analysis compares what a sink received with what was expected.
type Analysis struct {
	Expected int // slots expected
	Arrived  int // of those, slots with at least one delivery
	Missing  int // Expected − Arrived: firings lost (or not yet arrived)
	Raw      int // deliveries of expected slots
	// RawDuplicates counts deliveries beyond the first of an execution: what
	// a target that does not dedupe would see twice.
	RawDuplicates int
	// DuplicateEffects counts slots (job, scheduled instant) that arrived
	// under more than one execution id: duplicates that a target deduping by
	// Idempotency-Key would still act on twice.
	DuplicateEffects int
	Unexpected       int // deliveries of executions nobody expected
	Invalid          int // deliveries with a bad identity or signature (Delivery.Err)
	Mismatched       int // deliveries whose job, slot or channel differ from the expected slot's
	FenceReuse       int // deliveries whose fence token an earlier delivery of the same job had
	Early            int // first deliveries received before their fire instant
	// Lateness is received − fire instant of each expected slot's first
	// delivery, sorted.
	Lateness []time.Duration
	// Timeline is each first delivery's fire instant and lateness, in
	// arrival order, to see when in a run the late ones were due.
	Timeline []Late
	// Problems describes the first few deliveries behind the counts above.
	Problems []string
}

// Clean reports whether nothing was lost, duplicated in effect, unexpected,
// invalid, mismatched or fenced twice. Raw duplicates are allowed: the
// platform is at least once, and targets dedupe by Idempotency-Key.
func (a Analysis) Clean() bool {
	return a.Missing == 0 && a.DuplicateEffects == 0 && a.Unexpected == 0 && a.Invalid == 0 &&
		a.Mismatched == 0 && a.FenceReuse == 0
}

const maxProblems = 20

func (a *Analysis) problem(format string, args ...any) {
	if len(a.Problems) < maxProblems {
		a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
	}
}

// Analyze compares got (deliveries in arrival order) with want. Deliveries
// of executions outside want are Unexpected unless ignore says they belong
// to a slot someone else is measuring (nil ignores none).
func Analyze(want Expected, got []Delivery, ignore func(Delivery) bool) Analysis {
	a := Analysis{Expected: len(want)}
	type slotKey struct {
		job uuid.UUID
		at  int64
	}
	first := make(map[uuid.UUID]Delivery, len(want))
	idsOfSlot := map[slotKey]uuid.UUID{}
	dupSlots := map[slotKey]bool{}
	fences := map[uuid.UUID]map[int64]uuid.UUID{}
	for _, d := range got {
		w, ok := want[d.ExecutionID]
		if !ok {
			if ignore != nil && ignore(d) {
				continue
			}
			a.Unexpected++
			a.problem("unexpected execution %s arrived (job %s slot %s)", d.ExecutionID, d.JobID, d.Scheduled.Format(time.RFC3339Nano))
		}
		k := slotKey{d.JobID, d.Scheduled.UnixNano()}
		if prev, seen := idsOfSlot[k]; !seen {
			idsOfSlot[k] = d.ExecutionID
		} else if prev != d.ExecutionID && !dupSlots[k] {
			dupSlots[k] = true
			a.DuplicateEffects++
			a.problem("job %s slot %s arrived as two executions, %s and %s", d.JobID, d.Scheduled.Format(time.RFC3339Nano), prev, d.ExecutionID)
		}
		if d.Err != nil {
			a.Invalid++
			a.problem("execution %s: %v", d.ExecutionID, d.Err)
		}
		if fs := fences[d.JobID]; fs == nil {
			fences[d.JobID] = map[int64]uuid.UUID{d.Fence: d.ExecutionID}
		} else if other, dup := fs[d.Fence]; dup {
			a.FenceReuse++
			a.problem("job %s: fence %d given to both %s and %s", d.JobID, d.Fence, other, d.ExecutionID)
		} else {
			fs[d.Fence] = d.ExecutionID
		}
		if !ok {
			continue
		}
		a.Raw++
		if d.JobID != w.JobID || !d.Scheduled.Equal(w.Scheduled) || d.Via != w.Via {
			a.Mismatched++
			a.problem("execution %s arrived as job %s slot %s over %s, want job %s slot %s over %s",
				d.ExecutionID, d.JobID, d.Scheduled.Format(time.RFC3339Nano), d.Via, w.JobID, w.Scheduled.Format(time.RFC3339Nano), w.Via)
		}
		if _, seen := first[d.ExecutionID]; seen {
			a.RawDuplicates++
			continue
		}
		first[d.ExecutionID] = d
		late := d.Received.Sub(w.FireAt)
		if late < 0 {
			a.Early++
		}
		a.Lateness = append(a.Lateness, late)
		a.Timeline = append(a.Timeline, Late{ExecutionID: d.ExecutionID, FireAt: w.FireAt, Lateness: late})
	}
	a.Arrived = len(first)
	a.Missing = a.Expected - a.Arrived
	if a.Missing > 0 {
		// Named, so a loss can be followed through the components (the
		// earliest first: where a loss starts is the clue).
		var missing []uuid.UUID
		for id := range want {
			if _, ok := first[id]; !ok {
				missing = append(missing, id)
			}
		}
		slices.SortFunc(missing, func(x, y uuid.UUID) int { return want[x].FireAt.Compare(want[y].FireAt) })
		for _, id := range missing {
			w := want[id]
			a.problem("execution %s (job %s slot %s, due %s) never arrived", id, w.JobID, w.Scheduled.Format(time.RFC3339Nano), w.FireAt.Format("15:04:05.000"))
		}
	}
	slices.Sort(a.Lateness)
	return a
}

// Late is one first delivery's fire instant and lateness.
type Late struct {
	// ExecutionID names the firing (Analyze sets it), so a late one can be
	// followed through the components.
	ExecutionID uuid.UUID
	FireAt      time.Time
	Lateness    time.Duration
}

// ByPeriod summarizes the lateness of the firings due in each period from
// start on (the last period takes what is left).
func ByPeriod(timeline []Late, start time.Time, period time.Duration, periods int) []Summary {
	if periods <= 0 || period <= 0 {
		return nil
	}
	buckets := make([][]time.Duration, periods)
	for _, l := range timeline {
		k := int(l.FireAt.Sub(start) / period)
		k = max(0, min(k, periods-1))
		buckets[k] = append(buckets[k], l.Lateness)
	}
	out := make([]Summary, periods)
	for k, b := range buckets {
		slices.Sort(b)
		out[k] = Summarize(b)
	}
	return out
}

// Summary is a latency distribution's usual points.
type Summary struct {
	N                             int
	Min, P50, P90, P99, P999, Max time.Duration
}

// Summarize reads the points off sorted durations.
func Summarize(sorted []time.Duration) Summary {
	if len(sorted) == 0 {
		return Summary{}
	}
	return Summary{
		N:    len(sorted),
		Min:  sorted[0],
		P50:  Percentile(sorted, 0.50),
		P90:  Percentile(sorted, 0.90),
		P99:  Percentile(sorted, 0.99),
		P999: Percentile(sorted, 0.999),
		Max:  sorted[len(sorted)-1],
	}
}

// Percentile is the p-quantile (0..1) of sorted durations, nearest rank
// below.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

func (s Summary) String() string {
	if s.N == 0 {
		return "no deliveries"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s p99.9=%s max=%s", s.N, r(s.P50), r(s.P90), r(s.P99), r(s.P999), r(s.Max))
}
