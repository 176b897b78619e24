package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/harness"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Result is what a scenario reports: one table row (with its header),
// details below the table, and problems — correctness failures (lost or
// duplicated firings, bad deliveries) that fail the run whatever the speed.
type Result struct {
	Scenario string
	Header   []string
	Row      []string
	Details  []string
	Problems []string
}

func (res *Result) detailf(format string, args ...any) {
	res.Details = append(res.Details, fmt.Sprintf(format, args...))
}

// SteadyConfig is the steady scenario: Rate firings per second for
// Duration.
type SteadyConfig struct {
	Rate     int
	Duration time.Duration
}

// rateRun is a set of registered jobs.
type rateRun struct {
	jobs []*sundialv1.Job
	ids  map[uuid.UUID]bool
}

func newRun(jobs []*sundialv1.Job) *rateRun {
	return &rateRun{jobs: jobs, ids: jobIDs(jobs)}
}

// merge is the run of both runs' jobs.
func (run *rateRun) merge(o *rateRun) *rateRun {
	return newRun(append(append([]*sundialv1.Job(nil), run.jobs...), o.jobs...))
}

// slots is every slot the run's jobs fire from from through to.
func (run *rateRun) slots(from, to time.Time) (harness.Expected, error) {
	want := harness.Expected{}
	for _, j := range run.jobs {
		if _, err := want.AddJob(j, from, to); err != nil {
			return nil, err
		}
	}
	return want, nil
}

// registerRate registers rate jobs firing every second from start through
// end.
func (d *deployment) registerRate(ctx context.Context, label string, rate int, start, end time.Time) (*rateRun, error) {
	jobs, err := d.register(ctx, label, rate, func(i int) *sundialv1.Job {
		return d.r.rateJob(fmt.Sprintf("%s-%06d", label, i), d.sink.URL(), start, end, sundialv1.Priority_PRIORITY_MEDIUM)
	})
	if err != nil {
		return nil, err
	}
	return newRun(jobs), nil
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
func (d *deployment) analyze(run *rateRun, want harness.Expected, from, to time.Time) harness.Analysis {
	return harness.Analyze(want, d.sink.Deliveries(), func(dl harness.Delivery) bool {
		return !run.ids[dl.JobID] || dl.Scheduled.Before(from) || dl.Scheduled.After(to)
	})
}

// problems turns an analysis's correctness failures into report lines.
func problems(what string, a harness.Analysis) []string {
	if a.Clean() {
		return nil
	}
	out := []string{fmt.Sprintf("%s: %d of %d firings lost, %d duplicate effects, %d unexpected, %d invalid, %d mismatched, %d fence reuses",
		what, a.Missing, a.Expected, a.DuplicateEffects, a.Unexpected, a.Invalid, a.Mismatched, a.FenceReuse)}
	for _, p := range a.Problems {
		out = append(out, what+": "+p)
	}
	return out
}

// Steady fires cfg.Rate jobs every second for cfg.Duration and reports the
// lateness at the sink and what each process spent.
func (r *Runner) Steady(ctx context.Context, d *deployment, cfg SteadyConfig) (Result, error) {
	res := Result{Scenario: "steady",
		Header: []string{"rate/s", "duration", "firings", "lost", "dup effects", "raw dups", "p50", "p99", "p99.9", "max",
			"api cores/RSS", "prefetcher", "relay", "worker"}}
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	end := start.Add(cfg.Duration - time.Second)
	// The jobs go on for a window past the measurement, so the prefetcher
	// and relay keep staging and publishing throughout it, as in a steady
	// state that never ends.
	run, err := d.registerRate(ctx, "steady", cfg.Rate, start, end.Add(r.tail()))
	if err != nil {
		return res, err
	}
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}
	r.log.Info("steady: waiting for the first slot", "rate", cfg.Rate, "first", start.Format(time.TimeOnly), "last", end.Format(time.TimeOnly))
	if err := sleepUntil(ctx, r.clock, start); err != nil {
		return res, err
	}
	res.detailf("steady: at the first slot: %s", d.pipelineState(ctx))
	u0 := r.snapUsage(d)
	timer0 := d.workerLateness(ctx, "timer")
	wait := r.profiles(ctx, d, "steady", cfg.Duration)
	gauges := r.sampleGauges(ctx, d)
	if err := sleepUntil(ctx, r.clock, end.Add(time.Second+r.opts.Jitter)); err != nil {
		return res, err
	}
	u1 := r.snapUsage(d)
	timer := d.workerLateness(ctx, "timer").Sub(timer0)
	sampled := gauges()
	files := wait()

	want, err := run.slots(start, end)
	if err != nil {
		return res, err
	}
	if err := d.await(ctx, want, end.Add(90*time.Second), 2*time.Second); err != nil {
		return res, err
	}
	a := d.analyze(run, want, start, end)
	s := harness.Summarize(a.Lateness)
	res.Row = append([]string{
		fmt.Sprint(cfg.Rate), cfg.Duration.String(), fmt.Sprint(a.Expected), fmt.Sprint(a.Missing),
		fmt.Sprint(a.DuplicateEffects), fmt.Sprint(a.RawDuplicates),
		fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.P999), fmtDur(s.Max),
	}, serviceUsageCells(u0, u1)...)
	res.detailf("steady: lateness at the sink %s; early arrivals %d", s, a.Early)
	res.detailf("steady: worker timer-stage lateness (holder release − fire instant, from its histogram) p50 %s p99 %s",
		fmtDur(harness.Seconds(timer.Quantile(0.5))), fmtDur(harness.Seconds(timer.Quantile(0.99))))
	res.detailf("steady: CPU cores / RSS over the measured window: %s", usageLine(u0, u1))
	res.detailf("steady: sampled every second: %s", sampled)
	for _, f := range files {
		res.detailf("steady: profile %s", f)
	}
	res.Problems = problems("steady", a)
	return res, nil
}

// workerLateness is the workers' fire-lateness histogram at stage (timer or
// target), merged over workers and priorities.
func (d *deployment) workerLateness(ctx context.Context, stage string) harness.Histogram {
	var h harness.Histogram
	for _, w := range d.workers {
		if !w.Alive() {
			continue
		}
		wh := histogram(ctx, w, "sundial_worker_fire_lateness_seconds", "stage", stage)
		h = mergeHist(h, wh)
	}
	return h
}

// mergeHist adds two histograms with the same bounds (either may be zero).
func mergeHist(a, b harness.Histogram) harness.Histogram {
	if a.Count == 0 && len(a.Bounds) == 0 {
		return b
	}
	if len(b.Bounds) != len(a.Bounds) {
		return a
	}
	out := harness.Histogram{Count: a.Count + b.Count, Sum: a.Sum + b.Sum, Bounds: a.Bounds}
	for i := range a.Counts {
		out.Counts = append(out.Counts, a.Counts[i]+b.Counts[i])
	}
	return out
}

// analyzeSubset is analyze over the slots of all that keep accepts; the
// other slots of all are left out as well.
func (d *deployment) analyzeSubset(run *rateRun, all harness.Expected, keep func(harness.Slot) bool, from, to time.Time) harness.Analysis {
	want := all.Filter(keep)
	return harness.Analyze(want, d.sink.Deliveries(), func(dl harness.Delivery) bool {
		if !run.ids[dl.JobID] || dl.Scheduled.Before(from) || dl.Scheduled.After(to) {
			return true
		}
		_, other := all[dl.ExecutionID]
		return other
	})
}
