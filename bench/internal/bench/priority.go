package bench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// PriorityConfig is the priority scenario: LowJobs LOW one-off jobs due at
// one instant whose target answers each request Slow after it arrived, and,
// from two seconds later, Critical CRITICAL and High HIGH jobs firing every
// second for Duration.
type PriorityConfig struct {
	LowJobs  int
	Slow     time.Duration
	Critical int
	High     int
	Duration time.Duration
}

// Priority is priority isolation under saturation: the LOW herd's slow
// requests take every executor LOW may occupy (--low-executors-percent)
// and queue behind them for longer than the window, while the CRITICAL
// and HIGH firings due meanwhile must start at once on the executors LOW
// may not take. It reports each priority's lateness at the sink and what
// was lost or duplicated; the LOW lateness is the queue the herd waited
// in, by design.
func (r *Runner) Priority(ctx context.Context, d *deployment, cfg PriorityConfig) (Result, error) {
	res := Result{Scenario: "priority",
		Header: []string{"LOW jobs (answer in)", "CRITICAL + HIGH /s", "duration", "CRITICAL p50", "CRITICAL p99", "CRITICAL max",
			"HIGH p50", "HIGH p99", "HIGH max", "LOW p50", "LOW p99", "LOW max", "lost (C/H/L)", "skipped by misfire policy", "dup effects (C/H/L)", "raw dups"}}
	n := cfg.LowJobs + cfg.Critical + cfg.High
	mark := d.markMisfires(ctx)
	if err := d.calibrate(ctx, n); err != nil {
		return res, err
	}
	lowAt := r.clock.Now().Add(r.lead(n)).Truncate(time.Second)
	// The LOW herd is in its executors before the first measured slot.
	first := lowAt.Add(2 * time.Second)
	end := first.Add(cfg.Duration - time.Second)
	lowJobs, err := d.register(ctx, "priority-low", cfg.LowJobs, func(i int) *sundialv1.Job {
		j := onceJob(fmt.Sprintf("priority-low-%05d", i), d.sink.SlowURL(cfg.Slow), lowAt, sundialv1.Priority_PRIORITY_LOW)
		// The slow answer is a success, not a timeout.
		j.AttemptTimeout = durationpb.New(2*cfg.Slow + 10*time.Second)
		return j
	})
	if err != nil {
		return res, err
	}
	rateOf := func(label string, jobs int, p sundialv1.Priority) (*jobSet, error) {
		js, err := d.register(ctx, label, jobs, func(i int) *sundialv1.Job {
			return rateJob(fmt.Sprintf("%s-%04d", label, i), d.sink.URL(), first, end, p, r.opts.Jitter)
		})
		if err != nil {
			return nil, err
		}
		return newJobSet(js), nil
	}
	crit, err := rateOf("priority-critical", cfg.Critical, sundialv1.Priority_PRIORITY_CRITICAL)
	if err != nil {
		return res, err
	}
	high, err := rateOf("priority-high", cfg.High, sundialv1.Priority_PRIORITY_HIGH)
	if err != nil {
		return res, err
	}
	if err := r.checkLead(lowAt, 2*time.Second); err != nil {
		return res, err
	}
	low := newJobSet(lowJobs)
	wantLow, err := low.slots(lowAt, lowAt)
	if err != nil {
		return res, err
	}
	wantCrit, err := crit.slots(first, end)
	if err != nil {
		return res, err
	}
	wantHigh, err := high.slots(first, end)
	if err != nil {
		return res, err
	}
	r.log.Info("priority: waiting for the LOW herd", "low", cfg.LowJobs, "slow", cfg.Slow, "at", lowAt.Format(time.TimeOnly),
		"critical", cfg.Critical, "high", cfg.High, "first", first.Format(time.TimeOnly), "last", end.Format(time.TimeOnly))
	if err := sleepUntil(ctx, r.clock, lowAt.Add(-time.Second)); err != nil {
		return res, err
	}
	res.detailf("priority: one second before the LOW herd: %s", d.pipelineState(ctx))
	u0 := r.snapUsage(d)
	wait := r.profiles(ctx, d, "priority", cfg.Duration)
	if err := sleepUntil(ctx, r.clock, first); err != nil {
		return res, err
	}
	gauges := r.sampleGauges(ctx, d)
	if err := sleepUntil(ctx, r.clock, end.Add(time.Second+r.opts.Jitter)); err != nil {
		return res, err
	}
	sampled := gauges()
	u1 := r.snapUsage(d)
	files := wait()

	all := harness.Expected{}
	for _, w := range []harness.Expected{wantLow, wantCrit, wantHigh} {
		for k, v := range w {
			all[k] = v
		}
	}
	// Every LOW firing arrives once the herd has drained, LOW's share of
	// the executors at a time.
	if err := d.await(ctx, all, end.Add(10*time.Minute), 3*time.Second); err != nil {
		return res, err
	}
	ca := d.analyze(crit, wantCrit, first, end)
	ha := d.analyze(high, wantHigh, first, end)
	la := d.analyze(low, wantLow, lowAt, lowAt)
	skipped := d.skippedSince(ctx, mark)
	sk := spreadSkipped(skipped, ca.Missing, ha.Missing, la.Missing)
	cs, hs, ls := harness.Summarize(ca.Lateness), harness.Summarize(ha.Lateness), harness.Summarize(la.Lateness)
	res.Row = []string{fmt.Sprintf("%d (%s)", cfg.LowJobs, cfg.Slow), fmt.Sprintf("%d + %d", cfg.Critical, cfg.High), cfg.Duration.String(),
		FormatLatency(cs.P50), FormatLatency(cs.P99), FormatLatency(cs.Max),
		FormatLatency(hs.P50), FormatLatency(hs.P99), FormatLatency(hs.Max),
		FormatLatency(ls.P50), FormatLatency(ls.P99), FormatLatency(ls.Max),
		fmt.Sprintf("%d/%d/%d", ca.Missing-sk[0], ha.Missing-sk[1], la.Missing-sk[2]), fmt.Sprint(skipped),
		fmt.Sprintf("%d/%d/%d", ca.DuplicateEffects, ha.DuplicateEffects, la.DuplicateEffects),
		fmt.Sprint(ca.RawDuplicates + ha.RawDuplicates + la.RawDuplicates)}
	res.detailf("priority: CRITICAL lateness %s; HIGH lateness %s; LOW lateness %s (the LOW herd queues for its share of the executors by design)", cs, hs, ls)
	target := 50 * time.Millisecond
	res.detailf("priority: CRITICAL p99 %s and HIGH p99 %s against the 50 ms target: %s", FormatLatency(cs.P99), FormatLatency(hs.P99),
		map[bool]string{true: "met", false: "NOT met"}[cs.P99 <= target && hs.P99 <= target])
	// The herd's last request started ls.Max after the herd's instant and
	// held its executor cfg.Slow more.
	if took := ls.Max + cfg.Slow; ls.Max > 0 {
		res.detailf("priority: the LOW herd took %s to be answered: about %.0f LOW requests at a time", took.Round(100*time.Millisecond),
			float64(cfg.LowJobs)*cfg.Slow.Seconds()/took.Seconds())
	}
	alive := 0
	for _, w := range d.workers {
		if w.Alive() {
			alive++
		}
	}
	res.detailf("priority: sampled every second from the first CRITICAL/HIGH slot (%d workers of %d executors each, plus their --critical-executors): %s", alive, r.opts.Executors, sampled)
	res.detailf("priority: CPU cores / RSS from one second before the LOW herd until the end of the window: %s", usageLine(u0, u1))
	for _, f := range files {
		res.detailf("priority: profile %s", f)
	}
	res.Details = append(res.Details, skippedNote("priority", ca.Missing+ha.Missing+la.Missing, skipped))
	res.Problems = append(append(problems("priority CRITICAL", ca, sk[0]), problems("priority HIGH", ha, sk[1])...), problems("priority LOW", la, sk[2])...)
	return res, nil
}
