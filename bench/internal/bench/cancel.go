package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/testkit/harness"
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
// held by the worker, and the next window measures the platform dropping
// them (the relay's outbox rows in the deletion's transaction, the
// worker's held firings in one pass on the version's announcement, each
// job's recorded as one SKIPPED summary). It reports the CPU per fired
// firing and per dropped one, and any firing of a deleted job that
// reached the sink when it should not have (firedAfterDelete; there must
// be none).
func (r *Runner) Cancel(ctx context.Context, d *deployment, cfg CancelConfig) (Result, error) {
	const name = "cancel"
	res := Result{Scenario: name,
		Header: []string{"rate/s", "window", "CPU per fired firing: machine (per process, ms)", "discarded/s", "CPU per discarded firing: machine (per process, ms)",
			"delete took", "fired after delete: due after it / arriving 1 s after it", "worker RSS before / after"}}
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
	u0 := r.snapUsage(d)
	if err := Sleep(ctx, r.clock, cfg.Window); err != nil {
		return res, err
	}
	u1 := r.snapUsage(d)
	held := d.pipelineState(ctx)
	staged := stagedAhead(ctx, d)

	// Delete every job; its firings staged up to a window ahead are left
	// for the worker to discard.
	del0 := r.clock.Now()
	if err := d.deleteJobs(ctx, run.jobs); err != nil {
		return res, fmt.Errorf("delete the jobs: %w", err)
	}
	ack := r.clock.Now()
	u2 := r.snapUsage(d)
	if err := Sleep(ctx, r.clock, cfg.Window); err != nil {
		return res, err
	}
	u3 := r.snapUsage(d)
	// Every firing staged at the deletion was the deleted jobs'; what is
	// left staged a window later was not dropped.
	dropped := max(staged-stagedAhead(ctx, d), 0)
	discarded := dropped / u3.window(u2).Seconds()

	late, lingered := firedAfterDelete(d.sink.Deliveries(), run.ids, ack, r.opts.Jitter)
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
		fmt.Sprintf("%.0f", discarded), CPUPerFiring(u2, u3, discarded), ack.Sub(del0).Round(time.Millisecond).String(), fmt.Sprintf("%d / %d", late, lingered),
		rss(u1) + " / " + rss(u3)}
	res.detailf("%s: before the deletion: %s", name, held)
	res.detailf("%s: while firing: CPU cores / RSS %s", name, usageLine(u0, u1))
	res.detailf("%s: while discarding (%.0f of %.0f staged firings dropped in %s): CPU cores / RSS %s", name, dropped, staged, u3.window(u2).Round(time.Second), usageLine(u2, u3))
	res.detailf("%s: after: %s", name, d.pipelineState(ctx))
	if late > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d firings due more than %s after their jobs' deletion was acknowledged reached the sink", name, late, deleteReach))
	}
	if lingered > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d firings reached the sink more than %s after their jobs' deletion was acknowledged", name, lingered, inFlight))
	}
	if dropped <= 0 {
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

const (
	// deleteReach is how long a deletion may take to reach every worker:
	// the api announces it within milliseconds of the commit.
	deleteReach = 100 * time.Millisecond
	// inFlight bounds how long a request the worker sent before it learned
	// of the deletion may take to reach the sink on a saturated machine.
	inFlight = time.Second
)

// firedAfterDelete counts the deliveries of the deleted jobs (ids) that
// break the deletion's promise, acknowledged at ack. late: a firing due
// (its slot plus the job's deterministic jitter) more than deleteReach
// after the ack — the deletion had reached the worker before its instant.
// lingered: a firing of any instant received more than inFlight after the
// ack — one that was late at the deletion and was not dropped with the
// rest. A request already sent when the announcement landed finishes, so
// a firing due just before the ack may arrive a little after it.
func firedAfterDelete(dls []harness.Delivery, ids map[uuid.UUID]bool, ack time.Time, jitter time.Duration) (late, lingered int) {
	for _, dl := range dls {
		if !ids[dl.JobID] {
			continue
		}
		due := dl.Scheduled.Add(firing.Jitter(dl.JobID, dl.Scheduled, jitter))
		switch {
		case due.After(ack.Add(deleteReach)):
			late++
		case dl.Received.After(ack.Add(inFlight)):
			lingered++
		}
	}
	return late, lingered
}
