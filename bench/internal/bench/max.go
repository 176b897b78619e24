package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// MaxConfig is the max-sustained scenario: a ladder of rates, each held for
// Step, stopping at the first that the platform does not hold.
type MaxConfig struct {
	Rates []int
	Step  time.Duration
	// MaxP99 is the lateness p99 a step may reach and still count as held.
	MaxP99 time.Duration
	// Grace is how long after a step's last slot every firing of the step
	// must have arrived; later ones have fallen behind.
	Grace time.Duration
}

// Max raises the rate step by step. Step k adds rate[k] − rate[k−1] jobs
// firing every second from the step's start until a window after the last
// step, all registered up front, so each rate is open-loop, the staging
// and publishing ahead keep going throughout, and a backlog of one step
// carries into the next, as it would in production.
func (r *Runner) Max(ctx context.Context, d *deployment, cfg MaxConfig) (Result, error) {
	res := Result{Scenario: "max",
		Header: []string{"ladder (firings/s)", "step", "highest rate held", "its p99", "CPU per firing there: machine (per process, ms)", "first rate not held", "its p99", "behind at its end", "busiest process at that rate"}}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	for k := 1; k < len(cfg.Rates); k++ {
		if cfg.Rates[k] <= cfg.Rates[k-1] {
			return res, fmt.Errorf("the ladder must rise: %d after %d", cfg.Rates[k], cfg.Rates[k-1])
		}
	}
	top := cfg.Rates[len(cfg.Rates)-1]
	if err := d.calibrate(ctx, top); err != nil {
		return res, err
	}
	mark := d.markMisfires(ctx)
	first := r.clock.Now().Add(r.lead(top)).Truncate(time.Second)
	stepStart := func(k int) time.Time { return first.Add(time.Duration(k) * cfg.Step) }
	stepEnd := func(k int) time.Time { return stepStart(k).Add(cfg.Step - time.Second) }
	last := stepEnd(len(cfg.Rates) - 1)
	run := newJobSet(nil)
	prev := 0
	for k, rate := range cfg.Rates {
		inc, err := d.registerRate(ctx, fmt.Sprintf("max%d", rate), rate-prev, stepStart(k), last.Add(r.tail()))
		if err != nil {
			return res, err
		}
		run = run.merge(inc)
		prev = rate
	}
	if err := r.checkLead(first, 2*time.Second); err != nil {
		return res, err
	}
	var ladder []string
	for _, rate := range cfg.Rates {
		ladder = append(ladder, fmt.Sprint(rate))
	}
	held, heldP99, heldCPU := 0, time.Duration(0), "–"
	failed, failedP99, behind, busiest := "–", "–", "–", "–"
	// evaluate judges step k once its grace has passed; the next step is
	// running by then.
	type measured struct {
		u0, u1  usageSnap
		sampled string
		files   []string
	}
	evaluate := func(k int, m measured) bool {
		rate := cfg.Rates[k]
		want, err := run.slots(stepStart(k), stepEnd(k))
		if err != nil {
			r.log.Error("max: slots of a step", "err", err)
			return false
		}
		a := d.analyze(run, want, stepStart(k), stepEnd(k))
		s := harness.Summarize(a.Lateness)
		// A step whose firings the workers skipped by misfire policy fell
		// more than the threshold behind: not held, though not lost.
		ok := a.Missing == 0 && s.P99 <= cfg.MaxP99
		res.detailf("max: %d/s for %s: %d of %d arrived within %s of the step's end, lateness %s; %s; CPU: %s; per firing %s; sampled: %s",
			rate, cfg.Step, a.Arrived, a.Expected, cfg.Grace, s, map[bool]string{true: "held", false: "NOT held"}[ok], usageLine(m.u0, m.u1),
			CPUPerFiring(m.u0, m.u1, float64(rate)), m.sampled)
		if periods := int(cfg.Step / time.Minute); periods > 1 {
			var by []string
			for _, p := range harness.ByPeriod(a.Timeline, stepStart(k), time.Minute, periods) {
				by = append(by, fmt.Sprintf("%s/%s", FormatLatency(p.P99), FormatLatency(p.Max)))
			}
			res.detailf("max: %d/s, lateness p99/max of the firings due in each minute of the step: %s", rate, strings.Join(by, ", "))
		}
		for _, f := range m.files {
			res.detailf("max: profile %s", f)
		}
		if ok {
			held, heldP99 = rate, s.P99
			heldCPU = CPUPerFiring(m.u0, m.u1, float64(rate))
			return true
		}
		failed, failedP99 = fmt.Sprint(rate), FormatLatency(s.P99)
		// The skips counted so far: the ladder's earlier steps held, so
		// they are this step's (or the next one's, running by now).
		skipped := d.skippedSince(ctx, mark)
		behind = fmt.Sprintf("%d of %d (skipped by misfire policy: %d)", a.Missing, a.Expected, skipped)
		res.Details = append(res.Details, skippedNote(fmt.Sprintf("max: %d/s", rate), a.Missing, skipped))
		busiest = busiestProcess(m.u0, m.u1)
		return false
	}
	allHeld := true
	var pending *measured // the previous step, not judged yet
	for k, rate := range cfg.Rates {
		if err := sleepUntil(ctx, r.clock, stepStart(k)); err != nil {
			return res, err
		}
		if k == 0 {
			res.detailf("max: at the first slot: %s", d.pipelineState(ctx))
		}
		m := measured{u0: r.snapUsage(d)}
		wait := r.profiles(ctx, d, fmt.Sprintf("max-%d", rate), cfg.Step)
		gauges := r.sampleGauges(ctx, d)
		if pending != nil {
			err := sleepUntil(ctx, r.clock, stepEnd(k-1).Add(cfg.Grace))
			if err == nil && !evaluate(k-1, *pending) {
				allHeld = false
			}
			if err != nil || !allHeld {
				gauges()
				wait()
				if err != nil {
					return res, err
				}
				break
			}
		}
		if err := sleepUntil(ctx, r.clock, stepEnd(k).Add(time.Second+r.opts.Jitter)); err != nil {
			return res, err
		}
		m.u1 = r.snapUsage(d)
		m.sampled = gauges()
		m.files = wait()
		pending = &m
	}
	if allHeld && pending != nil {
		if err := sleepUntil(ctx, r.clock, stepEnd(len(cfg.Rates)-1).Add(cfg.Grace)); err != nil {
			return res, err
		}
		allHeld = evaluate(len(cfg.Rates)-1, *pending)
	}
	heldCell := "none"
	if held > 0 {
		heldCell = fmt.Sprintf("%d/s", held)
	}
	heldP99Cell := "–"
	if held > 0 {
		heldP99Cell = FormatLatency(heldP99)
	}
	res.Row = []string{strings.Join(ladder, ", "), cfg.Step.String(), heldCell, heldP99Cell, heldCPU, failed, failedP99, behind, busiest}
	if allHeld {
		// Every step held: check nothing was lost over the whole ladder.
		want, err := run.slots(stepStart(0), last)
		if err != nil {
			return res, err
		}
		if err := d.await(ctx, want, last.Add(60*time.Second), time.Second); err != nil {
			return res, err
		}
		a := d.analyze(run, want, stepStart(0), last)
		skipped := d.skippedSince(ctx, mark)
		res.Details = append(res.Details, skippedNote("max", a.Missing, skipped))
		res.Problems = problems("max", a, skipped)
	} else {
		res.detailf("max: the ladder stopped at the first rate not held; its firings were not awaited, so losses are not checked in this scenario")
	}
	return res, nil
}

// busiestProcess names the process that used the most CPU between a and b.
func busiestProcess(a, b usageSnap) string {
	best, bestCores := "", -1.0
	for n := range b {
		if n == machineKey {
			continue
		}
		if c, ok := cpuOf(a, b, n); ok && c > bestCores {
			best, bestCores = n, c
		}
	}
	if best == "" {
		return "–"
	}
	return fmt.Sprintf("%s (%.2f cores)", best, bestCores)
}
