package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// FailoverConfig is the failover scenario: a steady Rate for Duration, with
// a prefetcher (the leader, or with Ranges one that leads ranges), a relay
// and a worker killed (SIGKILL) at 20 %, 40 % and 60 % of it.
type FailoverConfig struct {
	Rate     int
	Duration time.Duration
	// Window is how long after each kill the lateness is attributed to it.
	Window time.Duration
	// Prefetchers is how many prefetchers run (at least 2); Ranges their
	// --ranges (1: one leader and standbys).
	Prefetchers, Ranges int
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
		Header: []string{"rate/s", "duration", "CPU per firing: machine (per process, ms)", "firings", "lost", "skipped by misfire policy", "dup effects", "raw dups", "p99 before kills",
			"prefetcher kill: p99 / max", "relay kill: p99 / max", "worker kill: p99 / max", "prefetching served again after", "worker partitions owned again after"}}
	if len(d.prefetchers) < 2 || len(d.relays) < 2 || len(d.workers) < 2 {
		return res, fmt.Errorf("failover needs two prefetchers, relays and workers")
	}
	if cfg.Window <= 0 {
		cfg.Window = 15 * time.Second
	}
	mark := d.markMisfires(ctx)
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
	victim, served := prefetchVictim(ctx, d.prefetchers, cfg.Ranges)
	if victim == nil {
		return res, fmt.Errorf("no prefetcher leads")
	}
	if err := victim.Kill(); err != nil {
		return res, err
	}
	k := kill{what: victim.Name + map[bool]string{true: " (leading ranges)", false: " (leader)"}[cfg.Ranges > 1], at: r.clock.Now()}
	if took, ok, err := r.until(ctx, k.at, served); err != nil {
		return res, err
	} else if ok {
		takeover = FormatLatency(took)
		k.note = map[bool]string{true: "every range led again after ", false: "standby leads after "}[cfg.Ranges > 1] + took.Round(time.Millisecond).String()
	}
	kills = append(kills, k)

	// 2. a relay (the other keeps claiming the outbox: nothing moves),
	// 3. a worker (its partitions move to the other in a rebalance)
	owned := "–"
	for _, victim := range []struct {
		frac float64
		pr   *harness.Process
	}{{0.4, d.relays[0]}, {0.6, d.workers[0]}} {
		if err := sleepUntil(ctx, r.clock, at(victim.frac)); err != nil {
			return res, err
		}
		// The worker's skips so far count after it is gone.
		d.noteMisfires(ctx)
		if err := victim.pr.Kill(); err != nil {
			return res, err
		}
		k := kill{what: victim.pr.Name, at: r.clock.Now()}
		if victim.pr == d.workers[0] {
			took, ok, err := r.until(ctx, k.at, func() bool { return d.assignedPartitions(ctx) >= 4*d.r.topicPartitions })
			if err != nil {
				return res, err
			}
			if ok {
				owned = FormatLatency(took)
				k.note = "the survivors own every partition after " + took.Round(time.Millisecond).String()
			}
		}
		kills = append(kills, k)
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
	skipped := d.skippedSince(ctx, mark)
	base := d.analyzeSubset(run, want, func(s harness.Slot) bool { return s.FireAt.Before(kills[0].at) }, start, end)
	bs := harness.Summarize(base.Lateness)
	res.Row = []string{fmt.Sprint(cfg.Rate), cfg.Duration.String(), cpu, fmt.Sprint(all.Expected), fmt.Sprint(lostBeyond(all.Missing, skipped)), fmt.Sprint(skipped),
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
	res.Row = append(res.Row, takeover, owned)
	res.detailf("failover: all firings %s; before the first kill %s", harness.Summarize(all.Lateness), bs)
	res.Details = append(res.Details, skippedNote("failover", all.Missing, skipped))
	res.Problems = problems("failover", all, skipped)
	return res, nil
}

// prefetchVictim picks the prefetcher the failover kills — the first that
// leads a range (with --ranges 1, the leader) — and says when prefetching
// is served again: every range led by the others.
func prefetchVictim(ctx context.Context, ps []*harness.Process, ranges int) (*harness.Process, func() bool) {
	led := func(pr *harness.Process) float64 {
		if !pr.Alive() {
			return 0
		}
		m, err := pr.Metrics(ctx)
		if err != nil {
			return 0
		}
		v, _ := m.Value("sundial_prefetcher_ranges_led")
		return v
	}
	for _, pr := range ps {
		if led(pr) >= 1 {
			return pr, func() bool {
				total := 0.0
				for _, o := range ps {
					if o != pr {
						total += led(o)
					}
				}
				return total >= float64(ranges)
			}
		}
	}
	return nil, nil
}

// until polls done every 50 ms for up to 60 s after from and says how long
// after from it first held.
func (r *Runner) until(ctx context.Context, from time.Time, done func() bool) (time.Duration, bool, error) {
	for deadline := from.Add(60 * time.Second); r.clock.Now().Before(deadline); {
		if done() {
			return r.clock.Now().Sub(from), true, nil
		}
		if err := Sleep(ctx, r.clock, 50*time.Millisecond); err != nil {
			return 0, false, err
		}
	}
	return 0, false, nil
}

// assignedPartitions sums the partitions the live workers own.
func (d *deployment) assignedPartitions(ctx context.Context) int {
	total := 0.0
	for _, w := range d.workers {
		if !w.Alive() {
			continue
		}
		if m, err := w.Metrics(ctx); err == nil {
			v, _ := m.Value("sundial_worker_assigned_partitions")
			total += v
		}
	}
	return int(total)
}
