package bench

import (
	"context"
	"fmt"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// BurstConfig is the burst scenario: Jobs one-off jobs due at the same
// instant, plus Critical CRITICAL ones spread over that second.
type BurstConfig struct {
	Jobs     int
	Critical int
}

// Burst registers the herd through the api, then waits for the instant.
// The herd is MEDIUM priority and due at exactly one instant (a top-of-
// the-minute herd of `0 * * * *` jobs looks like this); the CRITICAL jobs
// are due at evenly spread instants of the same second, the first one at
// the herd's instant.
func (r *Runner) Burst(ctx context.Context, d *deployment, cfg BurstConfig) (Result, error) {
	res := Result{Scenario: "burst",
		Header: []string{"jobs", "CRITICAL", "CPU per firing: machine (per process, ms)", "last fired after", "p50", "p99", "CRITICAL p50", "CRITICAL p99", "CRITICAL max", "lost", "skipped by misfire policy", "dup effects", "raw dups"}}
	n := cfg.Jobs + cfg.Critical
	mark := d.markMisfires(ctx)
	if err := d.calibrate(ctx, n); err != nil {
		return res, err
	}
	at := r.clock.Now().Add(r.lead(n)).Truncate(time.Second)
	herdJobs, err := d.register(ctx, "burst", cfg.Jobs, func(i int) *sundialv1.Job {
		return onceJob(fmt.Sprintf("burst-%06d", i), d.sink.URL(), at, sundialv1.Priority_PRIORITY_MEDIUM)
	})
	if err != nil {
		return res, err
	}
	critJobs, err := d.register(ctx, "burst-critical", cfg.Critical, func(i int) *sundialv1.Job {
		return onceJob(fmt.Sprintf("burst-critical-%03d", i), d.sink.URL(), at.Add(time.Duration(i)*time.Second/time.Duration(cfg.Critical)), sundialv1.Priority_PRIORITY_CRITICAL)
	})
	if err != nil {
		return res, err
	}
	if err := r.checkLead(at, 2*time.Second); err != nil {
		return res, err
	}
	herd, crit := newJobSet(herdJobs), newJobSet(critJobs)
	all := herd.merge(crit)
	from, to := at, at.Add(time.Second)
	want, err := all.slots(from, to)
	if err != nil {
		return res, err
	}
	r.log.Info("burst: waiting for the instant", "jobs", cfg.Jobs, "critical", cfg.Critical, "at", at.Format(time.TimeOnly))
	if err := sleepUntil(ctx, r.clock, at.Add(-time.Second)); err != nil {
		return res, err
	}
	held := 0.0
	for _, w := range d.workers {
		if m, err := w.Metrics(ctx); err == nil {
			v, _ := m.Value("sundial_worker_held_firings")
			held += v
		}
	}
	res.detailf("burst: one second before the instant the workers held %.0f of the %d firings (the rest were not staged and published yet)", held, n)
	u0 := r.snapUsage(d)
	wait := r.profiles(ctx, d, "burst", 30*time.Second)
	actx, cancel := context.WithDeadline(ctx, at.Add(10*time.Minute))
	defer cancel()
	if err := d.sink.Await(actx, want, 0); err != nil && ctx.Err() != nil {
		return res, ctx.Err()
	}
	u1 := r.snapUsage(d)
	if err := Sleep(ctx, r.clock, 3*time.Second); err != nil { // late duplicates
		return res, err
	}
	files := wait()
	completedAfter, u2 := r.awaitCompleted(ctx, d, at)
	wantHerd, _ := herd.slots(from, to)
	wantCrit, _ := crit.slots(from, to)
	everything := d.analyze(all, want, from, to)
	skipped := d.skippedSince(ctx, mark)
	hs := harness.Summarize(d.analyze(herd, wantHerd, from, to).Lateness)
	cs := harness.Summarize(d.analyze(crit, wantCrit, from, to).Lateness)
	// The window runs from a second before the instant until the last
	// arrival: its CPU over the firings in it.
	cpu := CPUPerFiring(u0, u1, float64(n)/max(u1.window(u0).Seconds(), 1e-3))
	res.Row = []string{fmt.Sprint(cfg.Jobs), fmt.Sprint(cfg.Critical), cpu, FormatLatency(hs.Max), FormatLatency(hs.P50), FormatLatency(hs.P99),
		FormatLatency(cs.P50), FormatLatency(cs.P99), FormatLatency(cs.Max), fmt.Sprint(lostBeyond(everything.Missing, skipped)), fmt.Sprint(skipped), fmt.Sprint(everything.DuplicateEffects), fmt.Sprint(everything.RawDuplicates)}
	if hs.Max > 0 {
		res.detailf("burst: the herd drained at %.0f firings/s on average (jobs / time until the last fired)", float64(cfg.Jobs)/hs.Max.Seconds())
	}
	res.detailf("burst: herd lateness %s; CRITICAL lateness %s", hs, cs)
	res.Details = append(res.Details, skippedNote("burst", everything.Missing, skipped))
	res.detailf("burst: CPU cores / RSS from one second before the instant until the last arrival: %s", usageLine(u0, u1))
	if completedAfter > 0 {
		// The jobs are completed after their firings, at the workers'
		// --completion-rate: that work is the burst's too.
		res.detailf("burst: every job completed %s after the instant; from one second before the instant until then: CPU per firing %s; CPU cores / RSS from the last arrival until then: %s",
			FormatLatency(completedAfter), CPUPerFiring(u0, u2, float64(n)/max(u2.window(u0).Seconds(), 1e-3)), usageLine(u1, u2))
	} else {
		res.detailf("burst: the jobs were not all completed within 10 minutes of the instant")
	}
	for _, f := range files {
		res.detailf("burst: profile %s", f)
	}
	res.Problems = problems("burst", everything, skipped)
	return res, nil
}

// awaitCompleted waits until no job is active with its last slot staged
// (next_fire_at cleared): every one-off job of the burst completed; the
// calibration's jobs are due in 30 days. It gives up ten minutes after
// at. It answers how long after at that was (0: not within the ten
// minutes) and the usage then. The count is an index scan
// (jobs_active_next_fire), so looking each second costs Postgres little.
func (r *Runner) awaitCompleted(ctx context.Context, d *deployment, at time.Time) (time.Duration, usageSnap) {
	for {
		var active int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'active' AND next_fire_at IS NULL`).Scan(&active)
		now := r.clock.Now()
		if err == nil && active == 0 {
			return now.Sub(at), r.snapUsage(d)
		}
		if now.After(at.Add(10*time.Minute)) || Sleep(ctx, r.clock, time.Second) != nil {
			return 0, r.snapUsage(d)
		}
	}
}
