package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// Result is what a scenario reports: one table row (with its header),
// details below the table, and problems — correctness failures (lost or
// duplicated firings, bad deliveries) that fail the run whatever the speed.
type Result struct {
	Scenario string
	// Deployment names the flags of the deployment the scenario ran on
	// (deployment.describe), printed with every table.
	Deployment string
	Header     []string
	Row        []string
	Rows       [][]string // a scenario of several rows (chaos) has them here instead
	Details    []string
	Problems   []string
	// Figures are the rate scenarios' (steady, herd) measurements as
	// numbers, for callers that tabulate them their own way (the peers
	// comparison); nil for the other scenarios.
	Figures *Figures
}

// Figures are what a rate scenario measured.
type Figures struct {
	Rate     int
	Window   time.Duration // the measured window (from its first slot to its end)
	Lateness harness.Summary
	Expected int // firings due in the window
	Lost     int // of those, never arrived and not skipped by misfire policy
	// Skipped are the firings the workers skipped by their jobs' misfire
	// policy over the scenario (sundial_worker_firings_total{outcome=
	// "misfire_skipped"}): missing at the sink, but recorded, not lost.
	Skipped int
	Early   int // arrived before their fire instant
	// DuplicateEffects are slots that arrived as two executions; RawDuplicates
	// second deliveries of one execution (allowed: at least once).
	DuplicateEffects, RawDuplicates int
	// Cores each process used over the window, by name ("machine": the
	// whole machine, from /proc/stat).
	Cores map[string]float64
}

func (res *Result) detailf(format string, args ...any) {
	res.Details = append(res.Details, fmt.Sprintf(format, args...))
}

// jobSet is a set of registered jobs and what they fire.
type jobSet struct {
	jobs []*sundialv1.Job
	ids  map[uuid.UUID]bool
}

func newJobSet(jobs []*sundialv1.Job) *jobSet {
	return &jobSet{jobs: jobs, ids: jobIDs(jobs)}
}

// merge is the run of both runs' jobs.
func (run *jobSet) merge(o *jobSet) *jobSet {
	return newJobSet(append(append([]*sundialv1.Job(nil), run.jobs...), o.jobs...))
}

// perSecond is how many firings the run's jobs make each second (each of
// them fires every second).
func (run *jobSet) perSecond() int { return len(run.jobs) }

// slots is every slot the run's jobs fire from from through to.
func (run *jobSet) slots(from, to time.Time) (harness.Expected, error) {
	want := harness.Expected{}
	for _, j := range run.jobs {
		if _, err := want.AddJob(j, from, to); err != nil {
			return nil, err
		}
	}
	return want, nil
}

// registerRate registers rate jobs firing every second from start through
// end, spread by the runner's jitter.
func (d *deployment) registerRate(ctx context.Context, label string, rate int, start, end time.Time) (*jobSet, error) {
	return d.registerRateJitter(ctx, label, rate, start, end, d.r.opts.Jitter)
}

// registerRateJitter is registerRate with a jitter of its own (0: the herd,
// every job's firing of a second due at the whole second).
func (d *deployment) registerRateJitter(ctx context.Context, label string, rate int, start, end time.Time, jitter time.Duration) (*jobSet, error) {
	jobs, err := d.register(ctx, label, rate, func(i int) *sundialv1.Job {
		return rateJob(fmt.Sprintf("%s-%06d", label, i), d.sink.URL(), start, end, sundialv1.Priority_PRIORITY_MEDIUM, jitter)
	})
	if err != nil {
		return nil, err
	}
	return newJobSet(jobs), nil
}

// await waits (until deadline) for every slot of want, then quiet more for
// late duplicates. Slots still missing at the deadline are left to the
// analysis to count.
func (d *deployment) await(ctx context.Context, want harness.Expected, deadline time.Time, quiet time.Duration) error {
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := d.sink.Await(actx, want, quiet)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		d.r.log.Warn("firings still missing at the deadline", "err", err)
	}
	return nil
}

// analyze compares the sink with want, the slots of run's jobs scheduled
// from from through to. Deliveries of other jobs, or of run's jobs outside
// that stretch, belong to other measurements and are left out.
func (d *deployment) analyze(run *jobSet, want harness.Expected, from, to time.Time) harness.Analysis {
	return harness.Analyze(want, d.sink.Deliveries(), func(dl harness.Delivery) bool {
		return !run.ids[dl.JobID] || dl.Scheduled.Before(from) || dl.Scheduled.After(to)
	})
}

// problems turns an analysis's correctness failures into report lines.
// Firings missing at the sink that the workers skipped by misfire policy
// (skipped) are not failures: only those beyond them are lost.
func problems(what string, a harness.Analysis, skipped int) []string {
	lost := lostBeyond(a.Missing, skipped)
	if lost == 0 && a.DuplicateEffects == 0 && a.Unexpected == 0 && a.Invalid == 0 &&
		a.Mismatched == 0 && a.FenceReuse == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("%s: %d of %d firings lost (%d missing, %d skipped by misfire policy), %d duplicate effects, %d unexpected, %d invalid, %d mismatched, %d fence reuses",
		what, lost, a.Expected, a.Missing, skipped, a.DuplicateEffects, a.Unexpected, a.Invalid, a.Mismatched, a.FenceReuse)}
	for _, p := range a.Problems {
		out = append(out, what+": "+p)
	}
	return out
}

// analyzeSubset is analyze over the slots of all that keep accepts; the
// other slots of all are left out as well.
func (d *deployment) analyzeSubset(run *jobSet, all harness.Expected, keep func(harness.Slot) bool, from, to time.Time) harness.Analysis {
	want := all.Filter(keep)
	return harness.Analyze(want, d.sink.Deliveries(), func(dl harness.Delivery) bool {
		if !run.ids[dl.JobID] || dl.Scheduled.Before(from) || dl.Scheduled.After(to) {
			return true
		}
		_, other := all[dl.ExecutionID]
		return other
	})
}
