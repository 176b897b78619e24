package bench

import (
	"context"
	"fmt"
	"time"
)

// CancelConfig is the cancel scenario: Rate per-second jobs, measured
// firing for Window, then deleted and measured being discarded for Window.
type CancelConfig struct {
	Rate   int
	Window time.Duration
}

// Cancel prices a deleted job's firings against fired ones. Rate jittered
// per-second jobs fire for a window; then every one of them is deleted
// through the api while about two minutes of their firings are staged and
// held by the worker, and the next window measures the worker discarding
// them (each is found stale in the lease call of its batch, ahead of its
// instant, and recorded SKIPPED). It reports the CPU per fired firing and
// per discarded one, and any firing that reached the sink for an instant
// more than 100 ms after its job's deletion was acknowledged (there must be
// none).
func (r *Runner) Cancel(ctx context.Context, d *deployment, cfg CancelConfig) (Result, error) {
	const name = "cancel"
	res := Result{Scenario: name,
		Header: []string{"rate/s", "window", "CPU per fired firing: machine (per process, ms)", "discarded/s", "CPU per discarded firing: machine (per process, ms)",
			"delete took", "fired after delete", "worker RSS before / after"}}
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	// The jobs would fire long past the run: only the deletion ends them.
	run, err := d.registerRateJitter(ctx, name, cfg.Rate, start, start.Add(time.Hour), r.opts.Jitter)
	if err != nil {
		return res, err
	}
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}
	a0 := start.Add(5 * time.Second)
	if err := sleepUntil(ctx, r.clock, a0); err != nil {
		return res, err
	}
	stale := func() float64 { return sumCounter(ctx, d, "sundial_worker_firings_total", "outcome", "stale") }
	u0 := r.snapUsage(d)
	if err := Sleep(ctx, r.clock, cfg.Window); err != nil {
		return res, err
	}
	u1 := r.snapUsage(d)
	held := d.pipelineState(ctx)

	// Delete every job; its firings staged up to a window ahead are left
	// for the worker to discard.
	del0 := r.clock.Now()
	if err := d.deleteJobs(ctx, run.jobs); err != nil {
		return res, fmt.Errorf("delete the jobs: %w", err)
	}
	ack := r.clock.Now()
	s0, u2 := stale(), r.snapUsage(d)
	if err := Sleep(ctx, r.clock, cfg.Window); err != nil {
		return res, err
	}
	s1, u3 := stale(), r.snapUsage(d)
	discarded := (s1 - s0) / u3.window(u2).Seconds()

	// A change takes effect within the milliseconds the api takes to
	// announce it; an attempt already running at the deletion finishes.
	late := 0
	for _, dl := range d.sink.Deliveries() {
		if run.ids[dl.JobID] && dl.Received.After(ack.Add(100*time.Millisecond)) {
			late++
		}
	}
	rss := func(u usageSnap) string {
		for _, w := range d.workers {
			if p, ok := u[w.Name]; ok {
				return mib(p.RSS)
			}
		}
		return "–"
	}
	res.Figures = &Figures{Rate: cfg.Rate, Window: u1.window(u0), Cores: Cores(u2, u3)}
	res.Row = []string{fmt.Sprint(cfg.Rate), cfg.Window.String(), CPUPerFiring(u0, u1, float64(cfg.Rate)),
		fmt.Sprintf("%.0f", discarded), CPUPerFiring(u2, u3, discarded), ack.Sub(del0).Round(time.Millisecond).String(), fmt.Sprint(late),
		rss(u1) + " / " + rss(u3)}
	res.detailf("%s: before the deletion: %s", name, held)
	res.detailf("%s: while firing: CPU cores / RSS %s", name, usageLine(u0, u1))
	res.detailf("%s: while discarding (%.0f stale firings in %s): CPU cores / RSS %s", name, s1-s0, u3.window(u2).Round(time.Second), usageLine(u2, u3))
	res.detailf("%s: after: %s", name, d.pipelineState(ctx))
	if late > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d firings reached the sink more than 100 ms after their jobs' deletion was acknowledged", name, late))
	}
	if s1-s0 <= 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: the worker discarded nothing in the window after the deletion", name))
	}
	return res, nil
}

// sumCounter adds a counter (labels as in Metrics.Value) over the
// deployment's live workers.
func sumCounter(ctx context.Context, d *deployment, name string, labels ...string) float64 {
	total := 0.0
	for _, w := range d.workers {
		if !w.Alive() {
			continue
		}
		if m, err := w.Metrics(ctx); err == nil {
			v, _ := m.Value(name, labels...)
			total += v
		}
	}
	return total
}
