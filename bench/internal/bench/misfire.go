package bench

import (
	"context"
	"fmt"

	"github.com/sundialhq/sundial/testkit/harness"
)

// A worker that receives a firing more than --misfire-threshold after its
// instant judges it by its job's misfire policy: under RUN_ONCE (the
// default) only the job's newest late firing fires and the older ones are
// recorded SKIPPED in the ledger. Those never reach the sink, yet were not
// lost: the platform shed them as the jobs asked. The workers count each in
// misfireMetric{outcome=misfireOutcome}; the scenarios read it around their
// measurement and report the firings missing at the sink beyond it as lost.
const (
	misfireMetric  = "sundial_worker_firings_total"
	misfireOutcome = "misfire_skipped"
)

// misfires remembers the last misfire_skipped count read from each worker
// process of a deployment, so that a worker killed during a scenario still
// counts with what it had skipped when last read. A restarted worker is a
// new process whose counter starts at zero.
//
// It is used from the scenario's goroutine only, like d.workers.
type misfires struct {
	last map[*harness.Process]float64
}

// observe reads every running worker's count. A worker that cannot be read
// (killed, paused, cut off) keeps the count it was last read with.
func (m *misfires) observe(ctx context.Context, workers []*harness.Process) {
	if m.last == nil {
		m.last = map[*harness.Process]float64{}
	}
	for _, w := range workers {
		if !w.Alive() {
			continue
		}
		met, err := w.Metrics(ctx)
		if err != nil {
			continue
		}
		v, _ := met.Value(misfireMetric, "outcome", misfireOutcome)
		// A counter does not go down within one process.
		m.last[w] = max(m.last[w], v)
	}
}

// total is the sum of the last counts read, over every worker process seen.
func (m *misfires) total() float64 {
	t := 0.0
	for _, v := range m.last {
		t += v
	}
	return t
}

// misfireMark is the deployment's misfire_skipped total at one instant.
type misfireMark float64

// markMisfires reads the workers' misfire_skipped total, from which
// skippedSince counts. A scenario calls it before its first firing is due.
func (d *deployment) markMisfires(ctx context.Context) misfireMark {
	d.misfires.observe(ctx, d.workers)
	return misfireMark(d.misfires.total())
}

// noteMisfires reads the workers' counts now; a scenario calls it just
// before it kills a worker, whose count then stays as read.
func (d *deployment) noteMisfires(ctx context.Context) {
	d.misfires.observe(ctx, d.workers)
}

// skippedSince is how many firings the workers skipped by misfire policy
// since mark. The counter has no job label: on a deployment shared by
// several loads it counts every load's skips over the stretch.
func (d *deployment) skippedSince(ctx context.Context, mark misfireMark) int {
	d.misfires.observe(ctx, d.workers)
	return max(int(d.misfires.total()-float64(mark)+0.5), 0)
}

// lostBeyond is how many of missing firings (expected, never at the sink)
// were lost: those not accounted for by skipped firings the workers
// recorded SKIPPED by misfire policy. Never negative: the count of skips
// may include firings outside the measured stretch.
func lostBeyond(missing, skipped int) int {
	return max(missing-skipped, 0)
}

// skippedNote is the notes line that says how many firings the platform
// shed by misfire policy and what that leaves lost.
func skippedNote(what string, missing, skipped int) string {
	return fmt.Sprintf("%s: skipped by misfire policy: %d (%s{outcome=%q} over the workers); %d missing at the sink, so %d lost",
		what, skipped, misfireMetric, misfireOutcome, missing, lostBeyond(missing, skipped))
}

// spreadSkipped shares skipped out over several analyses' missing counts,
// in order, each taking at most its own: the counter cannot say whose
// firings it skipped, and no skip may excuse two missing firings. The
// shares sum to min(skipped, Σ missing).
func spreadSkipped(skipped int, missing ...int) []int {
	out := make([]int, len(missing))
	for i, m := range missing {
		out[i] = min(max(m, 0), skipped)
		skipped -= out[i]
	}
	return out
}
