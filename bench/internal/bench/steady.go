package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/harness"
)

// SteadyConfig is the steady scenario: Rate firings per second for
// Duration.
type SteadyConfig struct {
	Rate     int
	Duration time.Duration
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
		h = h.Add(wh)
	}
	return h
}
