package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// FailoverConfig is the failover scenario: a steady Rate for Duration, with
// the prefetcher leader, a relay and a worker killed (SIGKILL) at 20 %,
// 40 % and 60 % of it.
type FailoverConfig struct {
	Rate     int
	Duration time.Duration
	// Window is how long after each kill the lateness is attributed to it.
	Window time.Duration
}

// kill is one process killed during the run.
type kill struct {
	what string
	at   time.Time
	note string
}

// Failover kills one process of each kind in turn under steady load, on a
// deployment with two of each, and checks that nothing was lost and no
// slot reached the sink as two executions.
func (r *Runner) Failover(ctx context.Context, d *deployment, cfg FailoverConfig) (Result, error) {
	res := Result{Scenario: "failover",
		Header: []string{"rate/s", "duration", "CPU per firing: machine (per process, ms)", "firings", "lost", "dup effects", "raw dups", "p99 before kills",
			"prefetcher leader kill: p99 / max", "relay kill: p99 / max", "worker kill: p99 / max", "leader takeover"}}
	if len(d.prefetchers) < 2 || len(d.relays) < 2 || len(d.workers) < 2 {
		return res, fmt.Errorf("failover needs two prefetchers, relays and workers")
	}
	if cfg.Window <= 0 {
		cfg.Window = 15 * time.Second
	}
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	end := start.Add(cfg.Duration - time.Second)
	run, err := d.registerRate(ctx, "failover", cfg.Rate, start, end.Add(r.tail()))
	if err != nil {
		return res, err
	}
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}
	at := func(frac float64) time.Time { return start.Add(time.Duration(frac * float64(cfg.Duration))) }
	if err := sleepUntil(ctx, r.clock, start); err != nil {
		return res, err
	}
	u0 := r.snapUsage(d)
	var kills []kill
	takeover := "–"

	// 1. the prefetcher leader
	if err := sleepUntil(ctx, r.clock, at(0.2)); err != nil {
		return res, err
	}
	old := leaderOf(ctx, d.prefetchers)
	if old == nil {
		return res, fmt.Errorf("no prefetcher leads")
	}
	if err := old.Kill(); err != nil {
		return res, err
	}
	k := kill{what: old.Name + " (leader)", at: r.clock.Now()}
	for deadline := k.at.Add(30 * time.Second); r.clock.Now().Before(deadline); {
		if leaderOf(ctx, d.prefetchers) != nil {
			took := r.clock.Now().Sub(k.at)
			takeover = FormatLatency(took)
			k.note = "standby leads after " + took.Round(time.Millisecond).String()
			break
		}
		if err := Sleep(ctx, r.clock, 50*time.Millisecond); err != nil {
			return res, err
		}
	}
	kills = append(kills, k)

	// 2. a relay, 3. a worker
	for _, victim := range []struct {
		frac float64
		pr   *harness.Process
	}{{0.4, d.relays[0]}, {0.6, d.workers[0]}} {
		if err := sleepUntil(ctx, r.clock, at(victim.frac)); err != nil {
			return res, err
		}
		if err := victim.pr.Kill(); err != nil {
			return res, err
		}
		kills = append(kills, kill{what: victim.pr.Name, at: r.clock.Now()})
	}
	for _, k := range kills {
		r.log.Info("failover: killed with SIGKILL", "process", k.what, "at", k.at.Format(time.TimeOnly+".000"), "note", k.note)
	}

	if err := sleepUntil(ctx, r.clock, end.Add(time.Second+r.opts.Jitter)); err != nil {
		return res, err
	}
	// The processes killed are left out: they are gone by now.
	cpu := CPUPerFiring(u0, r.snapUsage(d), float64(cfg.Rate))
	want, err := run.slots(start, end)
	if err != nil {
		return res, err
	}
	if err := d.await(ctx, want, end.Add(3*time.Minute), 5*time.Second); err != nil {
		return res, err
	}
	all := d.analyze(run, want, start, end)
	base := d.analyzeSubset(run, want, func(s harness.Slot) bool { return s.FireAt.Before(kills[0].at) }, start, end)
	bs := harness.Summarize(base.Lateness)
	res.Row = []string{fmt.Sprint(cfg.Rate), cfg.Duration.String(), cpu, fmt.Sprint(all.Expected), fmt.Sprint(all.Missing),
		fmt.Sprint(all.DuplicateEffects), fmt.Sprint(all.RawDuplicates), FormatLatency(bs.P99)}
	for i, k := range kills {
		// A kill's window ends at the next kill, so each effect is
		// attributed to one cause.
		until := k.at.Add(cfg.Window)
		if i+1 < len(kills) && kills[i+1].at.Before(until) {
			until = kills[i+1].at
		}
		w := d.analyzeSubset(run, want, func(s harness.Slot) bool { return !s.FireAt.Before(k.at) && s.FireAt.Before(until) }, start, end)
		ws := harness.Summarize(w.Lateness)
		res.Row = append(res.Row, FormatLatency(ws.P99)+" / "+FormatLatency(ws.Max))
		res.detailf("failover: %s killed at %s%s; firings due in the %s after: %s", k.what, k.at.Format(time.TimeOnly+".000"),
			map[bool]string{true: " (" + k.note + ")", false: ""}[k.note != ""], until.Sub(k.at).Round(time.Second), ws)
	}
	res.Row = append(res.Row, takeover)
	res.detailf("failover: all firings %s; before the first kill %s", harness.Summarize(all.Lateness), bs)
	res.Problems = problems("failover", all)
	return res, nil
}
