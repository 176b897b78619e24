package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// SteadyConfig is the steady scenario: Rate firings per second for
// Duration.
type SteadyConfig struct {
	Rate     int
	Duration time.Duration
}

// Steady fires cfg.Rate jobs every second for cfg.Duration, each firing at
// its own jittered offset within the second (Options.Jitter), and reports
// the lateness at the sink and what each process spent per firing.
func (r *Runner) Steady(ctx context.Context, d *deployment, cfg SteadyConfig) (Result, error) {
	return r.rate(ctx, d, "steady", cfg, r.opts.Jitter)
}

// Herd is Steady without jitter: all cfg.Rate firings of each second are
// due at the whole second, a herd of cfg.Rate every second.
func (r *Runner) Herd(ctx context.Context, d *deployment, cfg SteadyConfig) (Result, error) {
	return r.rate(ctx, d, "herd", cfg, 0)
}

// rate is the steady and herd scenarios: cfg.Rate jobs firing every second,
// spread by jitter.
func (r *Runner) rate(ctx context.Context, d *deployment, name string, cfg SteadyConfig, jitter time.Duration) (Result, error) {
	res := Result{Scenario: name,
		Header: []string{"rate/s", "duration", "CPU per firing: machine (per process, ms)", "firings", "lost", "skipped by misfire policy", "dup effects", "raw dups", "p50", "p99", "p99.9", "max",
			"api cores/RSS", "prefetcher", "relay", "worker"}}
	mark := d.markMisfires(ctx)
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	end := start.Add(cfg.Duration - time.Second)
	// The jobs go on for a window past the measurement, so the prefetcher
	// and relay keep staging and publishing throughout it, as in a steady
	// state that never ends.
	run, err := d.registerRateJitter(ctx, name, cfg.Rate, start, end.Add(r.tail()), jitter)
	if err != nil {
		return res, err
	}
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}
	r.log.Info("waiting for the first slot", "scenario", name, "rate", cfg.Rate, "first", start.Format(time.TimeOnly), "last", end.Format(time.TimeOnly))
	if err := sleepUntil(ctx, r.clock, start); err != nil {
		return res, err
	}
	res.detailf("%s: at the first slot: %s", name, d.pipelineState(ctx))
	u0 := r.snapUsage(d)
	redis0 := r.snapRedis(ctx)
	conns0 := d.sink.Connections()
	timer0 := d.workerLateness(ctx, "timer")
	wait := r.profiles(ctx, d, name, cfg.Duration)
	gauges := r.sampleGauges(ctx, d)
	if err := sleepUntil(ctx, r.clock, end.Add(time.Second+jitter)); err != nil {
		return res, err
	}
	u1 := r.snapUsage(d)
	redis1 := r.snapRedis(ctx)
	conns := d.sink.Connections() - conns0
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
	skipped := d.skippedSince(ctx, mark)
	lost := lostBeyond(a.Missing, skipped)
	s := harness.Summarize(a.Lateness)
	res.Figures = &Figures{Rate: cfg.Rate, Window: u1.window(u0), Lateness: s, Expected: a.Expected, Lost: lost, Skipped: skipped, Early: a.Early,
		DuplicateEffects: a.DuplicateEffects, RawDuplicates: a.RawDuplicates, Cores: Cores(u0, u1)}
	res.Row = append([]string{
		fmt.Sprint(cfg.Rate), cfg.Duration.String(), CPUPerFiring(u0, u1, float64(cfg.Rate)),
		fmt.Sprint(a.Expected), fmt.Sprint(lost), fmt.Sprint(skipped),
		fmt.Sprint(a.DuplicateEffects), fmt.Sprint(a.RawDuplicates),
		FormatLatency(s.P50), FormatLatency(s.P99), FormatLatency(s.P999), FormatLatency(s.Max),
	}, serviceUsageCells(u0, u1)...)
	res.detailf("%s: lateness at the sink %s; early arrivals %d", name, s, a.Early)
	res.detailf("%s: by the second due: %s", name, slowestSeconds(a.Timeline, start, end, 500*time.Millisecond, 5))
	res.Details = append(res.Details, skippedNote(name, a.Missing, skipped))
	res.detailf("%s: worker timer-stage lateness (holder release − fire instant, from its histogram) p50 %s p99 %s", name,
		FormatLatency(harness.Seconds(timer.Quantile(0.5))), FormatLatency(harness.Seconds(timer.Quantile(0.99))))
	res.detailf("%s: CPU cores / RSS over the measured window: %s", name, usageLine(u0, u1))
	res.detailf("%s: sampled every second: %s", name, sampled)
	res.detailf("%s: Redis over the measured window: %s", name, redisGrowth(redis0, redis1, a.Expected, cfg.Rate, d.markerTTL()))
	res.detailf("%s: connections the target accepted over the window: %d (for %d firings)", name, conns, a.Expected)
	for _, f := range files {
		res.detailf("%s: profile %s", name, f)
	}
	res.Problems = problems(name, a, skipped)
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
