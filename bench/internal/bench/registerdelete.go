package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/testkit/harness"
)

// RegisterDeleteConfig is the register-delete scenario: Base jittered
// per-second jobs fire throughout; Baseline after their first slot, Herd
// more per-second jobs (a herd: no jitter) are registered with their first
// slot Ahead, fire for Fire and are bulk-deleted; the base is measured
// until After past the delete.
type RegisterDeleteConfig struct {
	Base, Herd                   int
	Baseline, Ahead, Fire, After time.Duration
}

// RegisterDelete is a platform team's bad hour on a quiet machine: a herd
// is registered next to jobs already firing (its windows staged into the
// same partitions), fires, and is deleted with its window staged. It
// reports how late the base jobs were beyond their jitter in each phase —
// while the herd was registered and staged, while it fired, after the
// delete — and when they were back on time.
func (r *Runner) RegisterDelete(ctx context.Context, d *deployment, cfg RegisterDeleteConfig) (res Result, err error) {
	const name = "register-delete"
	res = Result{Scenario: name, Header: []string{"base (jittered) + herd", "registering the herd took", "base while the herd is registered and staged: p99 / max",
		"base while the herd fires: p99 / max", "delete took", "base in the 30 s after the delete: p99 / max", "base back to normal after the delete",
		"lost", "skipped by misfire policy", "dup effects", "poison"}}
	if err := d.calibrate(ctx, cfg.Base+cfg.Herd); err != nil {
		return res, err
	}
	label := name + "-" + uuid.NewString()[:8]
	herdLabel := label + "-herd"
	defer func() {
		for _, lb := range []string{label, herdLabel} {
			if derr := d.bulkDelete(context.WithoutCancel(ctx), lb); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	start := r.clock.Now().Add(r.lead(cfg.Base)).Truncate(time.Second)
	far := start.Add(6 * time.Hour)
	base, err := d.registerLabelled(ctx, label, cfg.Base, start, far, r.opts.Jitter)
	if err != nil {
		return res, err
	}
	mark := d.markMisfires(ctx)
	track := r.trackUsage(ctx, d)
	tracking := true
	defer func() {
		if tracking {
			track()
		}
	}()
	if err := sleepUntil(ctx, r.clock, start.Add(cfg.Baseline)); err != nil {
		return res, err
	}
	reg0 := r.clock.Now()
	herdStart := reg0.Add(cfg.Ahead).Truncate(time.Second)
	r.log.Info("registering the herd", "scenario", name, "jobs", cfg.Herd, "first", herdStart.Format(time.TimeOnly))
	herd, err := d.registerLabelled(ctx, herdLabel, cfg.Herd, herdStart, far, 0)
	if err != nil {
		return res, err
	}
	regTook := r.clock.Now().Sub(reg0)
	if err := sleepUntil(ctx, r.clock, herdStart.Add(cfg.Fire)); err != nil {
		return res, err
	}
	del0 := r.clock.Now()
	r.log.Info("deleting the herd", "scenario", name)
	if err := d.bulkDelete(ctx, herdLabel); err != nil {
		return res, err
	}
	delTook := r.clock.Now().Sub(del0)
	end := del0.Add(cfg.After).Truncate(time.Second)
	if err := sleepUntil(ctx, r.clock, end); err != nil {
		return res, err
	}
	snaps := track()
	tracking = false

	want, err := base.slots(start, end.Add(-time.Second))
	if err != nil {
		return res, err
	}
	if err := d.await(ctx, want, r.clock.Now().Add(time.Minute), 3*time.Second); err != nil {
		return res, err
	}
	a := d.analyze(base, want, start, end.Add(-time.Second))
	skipped := d.skippedSince(ctx, mark)
	tl := d.withLost(a.Timeline, want)
	phase := func(from, to time.Time) string {
		var ls []time.Duration
		lost := 0
		for _, l := range tl {
			if l.FireAt.Before(from) || !l.FireAt.Before(to) {
				continue
			}
			if l.Lateness == Never {
				lost++
				continue
			}
			ls = append(ls, l.Lateness)
		}
		slices.Sort(ls)
		s := harness.Summarize(ls)
		out := FormatLatency(s.P99) + " / " + FormatLatency(s.Max)
		if lost > 0 {
			out += fmt.Sprintf(" (%d not delivered)", lost)
		}
		return out
	}
	back, ok := BackToNormal(tl, del0, end, NormalWindow, normalStep, NormalP99)
	backCell := "not within the run"
	switch {
	case ok && back == 0:
		backCell = "0 (on time throughout)"
	case ok:
		backCell = FormatLatency(back) + " after the delete began"
	}
	poison, err := d.poison(ctx, base.merge(herd))
	if err != nil {
		return res, err
	}
	res.Row = []string{fmt.Sprintf("%d + %d", cfg.Base, cfg.Herd), FormatLatency(regTook), phase(reg0, herdStart), phase(herdStart, del0),
		FormatLatency(delTook), phase(del0, del0.Add(30*time.Second)), backCell,
		fmt.Sprint(lostBeyond(a.Missing, skipped)), fmt.Sprint(skipped), fmt.Sprint(a.DuplicateEffects), fmt.Sprint(poison)}
	res.detailf("%s: the base's lateness by 10 s from its first slot (the herd registered at +%ds, first slot +%ds, deleted at +%ds): %s", name,
		int(reg0.Sub(start).Seconds()), int(herdStart.Sub(start).Seconds()), int(del0.Sub(start).Seconds()), byTenSeconds(tl, start, end))
	for _, p := range []struct {
		what     string
		from, to time.Time
	}{{"the herd registered and staged", reg0, herdStart}, {"the herd firing", herdStart, del0}, {"after the delete", del0, end}} {
		if pa, pb, ok := snapsAround(snaps, p.from, p.to); ok {
			res.detailf("%s: %s: CPU cores / RSS %s", name, p.what, usageLine(pa, pb))
		}
	}
	res.Details = append(res.Details, skippedNote(name+" (base jobs)", a.Missing, skipped))
	res.Problems = append(res.Problems, problems(name+" (base jobs)", a, skipped)...)
	if poison > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d healthy firings dead-lettered as poison", name, poison))
	}
	return res, nil
}
