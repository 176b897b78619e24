package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// The overload and recovery scenarios put the platform behind on purpose
// — more due firings than it fires, a worker killed, a core taken, a
// window of firings of deleted jobs — and report how it comes back: the
// time back to normal (BackToNormal), the catch-up rate while behind
// (BacklogOf), the platform's CPU per firing behind and on time, the
// workers' peak memory, and what must stay zero whatever happened: lost
// firings, duplicate effects and firings dead-lettered as poison.

// OverloadConfig is the overload scenario: a herd of per-second jobs at
// half the held rate, then twice it for Surge, then half again until back
// to normal.
type OverloadConfig struct {
	// Held is the rate (firings/s) the platform is taken to hold; the
	// surge offers 2×Held, before and after it 0.5×Held.
	Held     int
	Surge    time.Duration
	Baseline time.Duration // 0.5×Held alone before the surge
	MaxWait  time.Duration // the most waited for normal after the surge
}

// WorkerKillConfig is the worker-kill scenario: Rate jittered per-second
// jobs on two workers, one killed -9 and replaced as a supervisor would.
type WorkerKillConfig struct {
	Rate              int
	Baseline, MaxWait time.Duration
}

// CPUHogConfig is the cpu-hog scenario: Rate jittered per-second jobs
// while a busy-loop process takes one core for Hog.
type CPUHogConfig struct {
	Rate                   int
	Hog, Baseline, MaxWait time.Duration
}

// DeleteStagedConfig is the delete-staged scenario: Jobs per-second jobs
// fire for Fire (their window staged ahead all along), are bulk-deleted,
// and NewJobs per-second jobs created meanwhile are measured for After.
type DeleteStagedConfig struct {
	Jobs    int
	Fire    time.Duration
	NewJobs int
	After   time.Duration
}

// recoveryHeader is the columns every recovery scenario's row starts with.
var recoveryHeader = []string{"offered", "disturbance", "back to normal (p99 ≤ 1 s over 5 s)", "catch-up rate (while behind)",
	"CPU per firing behind: machine (per process, ms)", "CPU per firing on time", "worker peak RSS", "lost", "skipped by misfire policy", "dup effects", "poison"}

// recoveryLoad is one recovery scenario's load and disturbance.
type recoveryLoad struct {
	name  string
	label string // the jobs' bench label, for the bulk delete that ends them
	jobs  *jobSet
	start time.Time // the first slot
	// jitter is the jobs' max_jitter: a firing's slot is known a jitter
	// after its second at the latest.
	jitter   time.Duration
	baseline time.Duration
	maxWait  time.Duration
	// staged, when set, reports whether the firings the disturbance brings
	// are staged and published already (a surge's window): the on-time CPU
	// is measured from when it first does, so the platform's work of
	// staging what is to come is not counted as its on-time cost.
	staged func(ctx context.Context) (bool, error)
	// disturb applies the disturbance and returns once it is over.
	disturb func(ctx context.Context) (note string, err error)
}

// recoveryOutcome is what recover measured.
type recoveryOutcome struct {
	// start is the first slot measured (later than the load's when
	// registration ran late).
	start                time.Time
	disturbed, over, end time.Time
	// staged is when the load's staged probe first said yes (zero: it
	// never did before the disturbance, or the load has none).
	staged time.Time
	note   string
	want   harness.Expected
	all    harness.Analysis
	// skipped are the firings the workers skipped by misfire policy over
	// the run: of all.Missing, those not lost.
	skipped int
	// timeline is all's, with each firing not delivered as Never.
	timeline []harness.Late
	back     time.Duration
	backOK   bool
	backlog  Backlog
	snaps    []UsageSnap
	gauges   string
	poison   int
}

// recover runs l on d: the baseline, the disturbance, the wait for normal
// (at most maxWait), then every firing due until then is awaited (a
// minute at most), the load deleted and the firings analysed.
func (r *Runner) recover(ctx context.Context, d *deployment, l recoveryLoad) (o recoveryOutcome, err error) {
	if err := r.checkLead(l.start, 2*time.Second); err != nil {
		// Registration ran late (a busy machine registers slower than the
		// lead assumed): the measurement starts once every job is
		// registered, the earlier slots left out, rather than not at all.
		l.start = r.clock.Now().Add(2*time.Second + l.jitter).Truncate(time.Second)
		r.log.Warn("registration ran past the first slot; the measurement starts later", "scenario", l.name, "first", l.start.Format(time.TimeOnly))
	}
	o.start = l.start
	mark := d.markMisfires(ctx)
	defer func() {
		// The load ends with the scenario, also on a shared deployment
		// and whatever went wrong.
		if derr := d.bulkDelete(context.WithoutCancel(ctx), l.label); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	r.log.Info("waiting for the first slot", "scenario", l.name, "first", l.start.Format(time.TimeOnly), "jobs", len(l.jobs.jobs))
	if err := sleepUntil(ctx, r.clock, l.start); err != nil {
		return o, err
	}
	track := r.trackUsage(ctx, d)
	gauges := r.sampleGauges(ctx, d)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			o.snaps, o.gauges = track(), gauges()
		}
	}
	defer stop()
	if l.staged != nil {
		if o.staged, err = r.awaitStaged(ctx, l, l.start.Add(l.baseline)); err != nil {
			return o, err
		}
	}
	if err := sleepUntil(ctx, r.clock, l.start.Add(l.baseline)); err != nil {
		return o, err
	}
	o.disturbed = r.clock.Now()
	r.log.Info("disturbance", "scenario", l.name)
	if o.note, err = l.disturb(ctx); err != nil {
		return o, err
	}
	o.over = r.clock.Now()
	r.log.Info("disturbance over; waiting for normal", "scenario", l.name, "note", o.note, "at_most", l.maxWait)
	normal, err := r.awaitNormal(ctx, d, l, o.over)
	if err != nil {
		return o, err
	}
	o.end = r.clock.Now().Truncate(time.Second)
	if !normal.IsZero() {
		// The run ends with the last slot found normal: the seconds after
		// it were not judged yet, and a firing late among them would make
		// the run not back to normal after all (BackToNormal judges up to
		// the end).
		o.end = normal.Add(time.Second).Truncate(time.Second)
	}
	stop()

	if o.want, err = l.jobs.slots(l.start, o.end.Add(-time.Second)); err != nil {
		return o, err
	}
	// Every firing wanted is awaited before the load is deleted: the
	// delete drops the firings its jobs still hold, so a straggler it
	// dropped would be counted lost when it was only late.
	if err := d.await(ctx, o.want, r.clock.Now().Add(time.Minute), 3*time.Second); err != nil {
		return o, err
	}
	if err := d.bulkDelete(ctx, l.label); err != nil {
		return o, err
	}
	// (to is the last slot wanted: the load fired on until its delete)
	o.all = d.analyze(l.jobs, o.want, l.start, o.end.Add(-time.Second))
	o.skipped = d.skippedSince(ctx, mark)
	o.timeline = d.withLost(o.all.Timeline, o.want)
	o.back, o.backOK = BackToNormal(o.timeline, o.over, o.end, NormalWindow, normalStep, NormalP99)
	o.backlog = BacklogOf(o.timeline, NormalP99)
	o.poison, err = d.poison(ctx, l.jobs)
	return o, err
}

// awaitStaged polls l.staged until it says yes, and returns when it
// first did; zero when it had not by until. A failing probe is logged and
// given up on (zero): the on-time figure is then not reported.
func (r *Runner) awaitStaged(ctx context.Context, l recoveryLoad, until time.Time) (time.Time, error) {
	for {
		ok, err := l.staged(ctx)
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if err != nil {
			r.log.Warn("could not tell whether the disturbance's firings are staged; no on-time CPU", "scenario", l.name, "err", err)
			return time.Time{}, nil
		}
		now := r.clock.Now()
		if ok {
			return now, nil
		}
		if !now.Before(until) {
			return time.Time{}, nil
		}
		if err := Sleep(ctx, r.clock, stagedPoll); err != nil {
			return time.Time{}, err
		}
	}
}

// stagedPoll is how often awaitStaged asks.
const stagedPoll = 500 * time.Millisecond

// onTimeWindow is where a recovery run's on-time CPU is measured: from 2 s
// after its first slot (from when the disturbance's firings were staged,
// if that was later) to the disturbance. ok is false when the load probes
// its staging and it was not done before the disturbance.
func onTimeWindow(o recoveryOutcome, probed bool) (from, to time.Time, ok bool) {
	from, to = o.start.Add(2*time.Second), o.disturbed
	if !probed {
		return from, to, true
	}
	if o.staged.IsZero() {
		return from, to, false
	}
	if o.staged.After(from) {
		from = o.staged
	}
	return from, to, true
}

// awaitNormal waits until the firings of the slots in the last
// NormalWindow whose fire instants have all passed arrived with p99 ≤
// NormalP99, or maxWait after over. It returns the last slot instant it
// judged normal, or zero when it gave up waiting.
func (r *Runner) awaitNormal(ctx context.Context, d *deployment, l recoveryLoad, over time.Time) (time.Time, error) {
	deadline := over.Add(l.maxWait)
	for {
		now := r.clock.Now()
		to := now.Add(-time.Second - l.jitter)
		if from := to.Add(-NormalWindow); !from.Before(over) {
			want, err := l.jobs.slots(from, to)
			if err != nil {
				return time.Time{}, err
			}
			a := d.analyze(l.jobs, want, from, to)
			if a.Missing == 0 && harness.Summarize(a.Lateness).P99 <= NormalP99 {
				return to, nil
			}
		}
		if now.After(deadline) {
			r.log.Warn("not back to normal within the bounded wait", "scenario", l.name, "waited", now.Sub(over).Round(time.Second))
			return time.Time{}, nil
		}
		if err := Sleep(ctx, r.clock, time.Second); err != nil {
			return time.Time{}, err
		}
	}
}

// withLost is timeline plus every slot of want that never arrived, as
// Never late.
func (d *deployment) withLost(timeline []harness.Late, want harness.Expected) []harness.Late {
	arrived := map[uuid.UUID]bool{}
	for _, dl := range d.sink.Deliveries() {
		arrived[dl.ExecutionID] = true
	}
	out := append([]harness.Late(nil), timeline...)
	for id, s := range want {
		if !arrived[id] {
			out = append(out, harness.Late{FireAt: s.FireAt, Lateness: Never})
		}
	}
	return out
}

// latest names the n firings of timeline (an analysis's, of want) that
// arrived latest, latest first, so a straggler can be followed through the
// components by its execution id.
func latest(timeline []harness.Late, want harness.Expected, n int) []string {
	tl := slices.Clone(timeline)
	slices.SortFunc(tl, func(x, y harness.Late) int { return cmp.Compare(y.Lateness, x.Lateness) })
	out := make([]string, 0, n)
	for _, l := range tl[:min(n, len(tl))] {
		out = append(out, fmt.Sprintf("%s (job %s, due %s, %s late)", l.ExecutionID, want[l.ExecutionID].JobID, l.FireAt.Format("15:04:05.000"), FormatLatency(l.Lateness)))
	}
	return out
}

// poison counts the executions of jobs dead-lettered with the error class
// poison: a healthy firing must never be.
func (d *deployment) poison(ctx context.Context, jobs *jobSet) (int, error) {
	ids := make([]string, 0, len(jobs.jobs))
	for _, j := range jobs.jobs {
		ids = append(ids, j.GetId())
	}
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE error_class = 'poison' AND job_id = ANY($1::uuid[])`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("bench: count poison dead letters: %w", err)
	}
	return n, nil
}

// bulkDelete deletes every job carrying the bench label value through
// BulkJobAction, as `schedctl bulk delete --label` does, page by page.
func (d *deployment) bulkDelete(ctx context.Context, label string) error {
	token := ""
	for {
		resp, err := d.client.BulkJobAction(ctx, &sundialv1.BulkJobActionRequest{
			Action: sundialv1.BulkAction_BULK_ACTION_DELETE, Labels: map[string]string{benchLabel: label}, Limit: 10000, PageToken: token})
		if err != nil {
			return fmt.Errorf("bench: bulk delete of %s: %w", label, err)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

// labelStaged reports whether every slot up to last of the jobs labelled
// label is staged and published: none of them has a slot left to stage by
// then, and none has a row left in the outbox.
func (d *deployment) labelStaged(ctx context.Context, label string, last time.Time) (bool, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM jobs j
 WHERE j.labels @> jsonb_build_object($1::text, $2::text)
   AND ((j.status = 'active' AND j.next_fire_at <= $3) OR EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = j.id))`,
		benchLabel, label, last).Scan(&n)
	return n == 0, err
}

// benchLabel is the label key a recovery scenario's jobs carry, its value
// naming the run, so one bulk delete ends them.
const benchLabel = "bench-load"

// registerLabelled registers n per-second jobs from start through end
// with jitter, labelled for bulkDelete.
func (d *deployment) registerLabelled(ctx context.Context, label string, n int, start, end time.Time, jitter time.Duration) (*jobSet, error) {
	jobs, err := d.register(ctx, label, n, func(i int) *sundialv1.Job {
		j := rateJob(fmt.Sprintf("%s-%06d", label, i), d.sink.URL(), start, end, sundialv1.Priority_PRIORITY_MEDIUM, jitter)
		j.Labels = map[string]string{benchLabel: label}
		return j
	})
	if err != nil {
		return nil, err
	}
	return newJobSet(jobs), nil
}

// trackUsage samples every process's usage each second until stop, which
// returns the samples in time order.
func (r *Runner) trackUsage(ctx context.Context, d *deployment) (stop func() []UsageSnap) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var snaps []UsageSnap
	go func() {
		defer close(done)
		for {
			snaps = append(snaps, r.snapUsage(d))
			if Sleep(sctx, r.clock, time.Second) != nil {
				return
			}
		}
	}()
	return func() []UsageSnap {
		cancel()
		<-done
		// one more at the stop, so the samples cover every instant before it
		return append(snaps, r.snapUsage(d))
	}
}

// cpuBetween is CPUPerFiring over [from, to] from the samples, the firings
// being those of timeline that arrived in the samples' span; "–" when the
// samples do not cover it or it is under two seconds.
func cpuBetween(snaps []UsageSnap, timeline []harness.Late, from, to time.Time) string {
	if to.Sub(from) < 2*time.Second {
		return "–"
	}
	a, b, ok := snapsAround(snaps, from, to)
	if !ok {
		return "–"
	}
	w := b.window(a)
	n := arrivalsBetween(timeline, a[machineKey].At, b[machineKey].At)
	return CPUPerFiring(a, b, float64(n)/w.Seconds())
}

// peakWorkerRSS is the highest resident set any worker reached (its own
// high-water mark, VmHWM) over the samples, with the worker's name.
func peakWorkerRSS(snaps []UsageSnap) string {
	best, name := int64(0), ""
	for _, s := range snaps {
		for n, u := range s {
			if strings.HasPrefix(n, "worker") && max(u.PeakRSS, u.RSS) > best {
				best, name = max(u.PeakRSS, u.RSS), n
			}
		}
	}
	if name == "" {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", mib(best), name)
}

// recoveryCells renders the common columns of a recovery row, and adds
// its details and problems to res.
func (r *Runner) recoveryCells(res *Result, name, offered, disturbance string, l recoveryLoad, o recoveryOutcome) []string {
	back := "not within " + l.maxWait.String()
	switch {
	case o.backOK && o.back == 0:
		back = "0 (on time throughout)"
	case o.backOK:
		back = FormatLatency(o.back)
	}
	catchUp, behindCPU := "– (never behind)", "–"
	if !o.backlog.From.IsZero() {
		catchUp = fmt.Sprintf("%.0f/s over %s", o.backlog.Rate(), o.backlog.Span().Round(100*time.Millisecond))
		behindCPU = cpuBetween(o.snaps, o.timeline, o.backlog.From, o.backlog.To)
	}
	onTime := "– (the disturbance's firings were still being staged)"
	if from, to, ok := onTimeWindow(o, l.staged != nil); ok {
		onTime = cpuBetween(o.snaps, o.timeline, from, to)
		if l.staged != nil {
			res.detailf("%s: on-time CPU measured from %s, once the disturbance's firings were staged and published, to %s",
				name, from.Format(time.TimeOnly), to.Format(time.TimeOnly))
		}
	}
	s := harness.Summarize(o.all.Lateness)
	res.detailf("%s: disturbance from %s to %s (%s): %s", name, o.disturbed.Format(time.TimeOnly), o.over.Format(time.TimeOnly),
		o.over.Sub(o.disturbed).Round(100*time.Millisecond), o.note)
	res.detailf("%s: every firing due from %s to %s: %s; lost %d, skipped by misfire policy %d, duplicate effects %d, raw duplicates %d, early %d",
		name, o.start.Format(time.TimeOnly), o.end.Format(time.TimeOnly), s, lostBeyond(o.all.Missing, o.skipped), o.skipped,
		o.all.DuplicateEffects, o.all.RawDuplicates, o.all.Early)
	res.Details = append(res.Details, skippedNote(name, o.all.Missing, o.skipped))
	if !o.backlog.From.IsZero() {
		res.detailf("%s: behind (firings arriving more than %s late) from %s to %s: %d firings delivered meanwhile", name,
			FormatLatency(NormalP99), o.backlog.From.Format(time.TimeOnly), o.backlog.To.Format(time.TimeOnly), o.backlog.Delivered)
	}
	res.detailf("%s: lateness by 10 s of fire instants from the disturbance: %s", name, byTenSeconds(o.timeline, o.disturbed, o.end))
	res.detailf("%s: sampled every second: %s", name, o.gauges)
	if len(o.snaps) > 1 {
		res.detailf("%s: CPU cores / RSS over the whole run: %s", name, usageLine(o.snaps[0], o.snaps[len(o.snaps)-1]))
	}
	res.Problems = append(res.Problems, problems(name, o.all, o.skipped)...)
	if o.poison > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d healthy firings dead-lettered as poison", name, o.poison))
	}
	return []string{offered, disturbance, back, catchUp, behindCPU, onTime, peakWorkerRSS(o.snaps),
		fmt.Sprint(lostBeyond(o.all.Missing, o.skipped)), fmt.Sprint(o.skipped), fmt.Sprint(o.all.DuplicateEffects), fmt.Sprint(o.poison)}
}

// byTenSeconds renders the p99 (and how many never reached the sink) of
// the firings due in each 10 s from from to to: the shape of the fall and
// the recovery. A firing not delivered was lost or skipped by its job's
// misfire policy; the timeline cannot tell which, the run's totals can.
func byTenSeconds(timeline []harness.Late, from, to time.Time) string {
	n := max(int(to.Sub(from)/(10*time.Second)), 1)
	var missing = make([]int, n)
	var kept []harness.Late
	for _, l := range timeline {
		if l.FireAt.Before(from) || !l.FireAt.Before(to) {
			continue
		}
		if l.Lateness == Never {
			missing[min(int(l.FireAt.Sub(from)/(10*time.Second)), n-1)]++
			continue
		}
		kept = append(kept, l)
	}
	var parts []string
	for i, s := range harness.ByPeriod(kept, from, 10*time.Second, n) {
		p := "+" + strconv.Itoa(10*i) + "s p99 " + FormatLatency(s.P99)
		if missing[i] > 0 {
			p += fmt.Sprintf(" (%d not delivered)", missing[i])
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// Overload offers 2× the held rate as a herd for cfg.Surge, between
// stretches of 0.5×: held/2 jobs fire throughout, 3×held/2 more only
// during the surge (their schedules start and end with it).
func (r *Runner) Overload(ctx context.Context, d *deployment, cfg OverloadConfig) (Result, error) {
	const name = "overload"
	res := Result{Scenario: name, Header: recoveryHeader}
	base, surge := max(cfg.Held/2, 1), max(2*cfg.Held-cfg.Held/2, 1)
	if err := d.calibrate(ctx, base+surge); err != nil {
		return res, err
	}
	label := name + "-" + uuid.NewString()[:8]
	start := r.clock.Now().Add(r.lead(base + surge)).Truncate(time.Second)
	surgeFrom := start.Add(cfg.Baseline)
	surgeTo := surgeFrom.Add(cfg.Surge - time.Second) // the last surge slot
	far := start.Add(6 * time.Hour)                   // the bulk delete ends them
	baseJobs, err := d.registerLabelled(ctx, label, base, start, far, 0)
	if err != nil {
		return res, err
	}
	surgeJobs, err := d.registerLabelled(ctx, label+"-surge", surge, surgeFrom, surgeTo, 0)
	if err != nil {
		return res, err
	}
	l := recoveryLoad{name: name, label: label, jobs: baseJobs.merge(surgeJobs), start: start, baseline: cfg.Baseline, maxWait: cfg.MaxWait,
		staged: func(ctx context.Context) (bool, error) { return d.labelStaged(ctx, label+"-surge", surgeTo) },
		disturb: func(ctx context.Context) (string, error) {
			if err := sleepUntil(ctx, r.clock, surgeTo.Add(time.Second)); err != nil {
				return "", err
			}
			return fmt.Sprintf("%d/s offered as a herd for %s (then %d/s)", base+surge, cfg.Surge, base), nil
		}}
	o, err := r.recover(ctx, d, l)
	if derr := d.bulkDelete(context.WithoutCancel(ctx), label+"-surge"); derr != nil {
		err = errors.Join(err, derr)
	}
	if err != nil {
		return res, err
	}
	res.Row = r.recoveryCells(&res, name, fmt.Sprintf("%d/s, %d/s, %d/s (herd)", base, base+surge, base),
		fmt.Sprintf("2× the held %d/s for %s", cfg.Held, cfg.Surge), l, o)
	if o.backlog.Rate() > 0 {
		res.detailf("%s: the backlog at the surge's end was about %.0f firings; the issue's target is back within backlog ÷ the burst scenario's drain rate + 10 s",
			name, backlogAt(o.timeline, o.over))
	}
	return res, nil
}

// backlogAt is how many firings due before t had not arrived by t.
func backlogAt(timeline []harness.Late, t time.Time) float64 {
	n := 0
	for _, l := range timeline {
		if l.FireAt.Before(t) && (l.Lateness == Never || l.FireAt.Add(l.Lateness).After(t)) {
			n++
		}
	}
	return float64(n)
}

// WorkerKill kills -9 one of the deployment's workers under cfg.Rate
// jittered per-second firings and starts a replacement, as a supervisor
// would; it reports, besides the usual, the lateness of the firings of the
// partitions the killed worker owned.
func (r *Runner) WorkerKill(ctx context.Context, d *deployment, cfg WorkerKillConfig) (Result, error) {
	const name = "worker-kill"
	res := Result{Scenario: name, Header: append(append([]string(nil), recoveryHeader...), "its partitions' firings: p99 / max")}
	if len(d.workers) < 2 {
		return res, fmt.Errorf("bench: %s needs two workers, the deployment has %d", name, len(d.workers))
	}
	if err := d.calibrate(ctx, cfg.Rate); err != nil {
		return res, err
	}
	label := name + "-" + uuid.NewString()[:8]
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	jobs, err := d.registerLabelled(ctx, label, cfg.Rate, start, start.Add(6*time.Hour), r.opts.Jitter)
	if err != nil {
		return res, err
	}
	var (
		victim *harness.Process
		owned  map[int32]bool
	)
	l := recoveryLoad{name: name, label: label, jobs: jobs, start: start, jitter: r.opts.Jitter, baseline: cfg.Baseline, maxWait: cfg.MaxWait,
		disturb: func(ctx context.Context) (string, error) {
			var note string
			var err error
			victim, owned, note, err = d.killWorker(ctx)
			return note, err
		}}
	o, err := r.recover(ctx, d, l)
	if err != nil {
		return res, err
	}
	cells := r.recoveryCells(&res, name, fmt.Sprintf("%d/s (jittered)", cfg.Rate), "kill -9 "+victim.Name+" of two, replaced", l, o)
	mine := o.want.Filter(func(s harness.Slot) bool {
		return !s.FireAt.Before(o.disturbed.Add(-2*time.Second)) && owned[jobPartition(s.JobID.String(), r.topicPartitions)]
	})
	a := d.analyze(jobs, mine, o.start, o.end.Add(-time.Second))
	late := d.withLost(a.Timeline, mine)
	s := harness.Summarize(a.Lateness)
	its := FormatLatency(s.P99) + " / " + FormatLatency(s.Max)
	// The skip counter has no partition label: every skip of the run
	// counts against the victim's partitions' missing firings.
	if lost := lostBeyond(a.Missing, o.skipped); lost > 0 {
		its += fmt.Sprintf(" (%d lost)", lost)
		// Where the living workers say their firings went, to follow the
		// missing ones (named among the problems).
		for _, w := range d.workers {
			if !w.Alive() {
				continue
			}
			if met, err := w.Metrics(ctx); err == nil {
				res.detailf("%s: %s's firings by outcome: %v", name, w.Name, met.ByLabel(misfireMetric, "outcome"))
			}
		}
	}
	res.Row = append(cells, its)
	res.detailf("%s: %s owned partitions %v of the MEDIUM topic; its firings due from 2 s before the kill: %s; by 10 s: %s",
		name, victim.Name, sortedPartitions(owned), s, byTenSeconds(late, o.disturbed, o.end))
	res.detailf("%s: the latest of them: %s", name, strings.Join(latest(a.Timeline, mine, 5), "; "))
	return res, nil
}

// killWorker kills -9 the deployment's first live worker, starts a
// replacement with the same arguments and waits until the group owns
// every partition again. owned are the MEDIUM topic's partitions the
// victim owned at the kill.
func (d *deployment) killWorker(ctx context.Context) (victim *harness.Process, owned map[int32]bool, note string, err error) {
	for _, w := range d.workers {
		if w.Alive() {
			victim = w
			id, err := workerID(w)
			if err != nil {
				return nil, nil, "", err
			}
			topic := firing.Topics{Prefix: d.ns.TopicPrefix}.Fire(sundialv1.Priority_PRIORITY_MEDIUM)
			if owned, err = d.victimPartitions(ctx, id, topic); err != nil {
				return nil, nil, "", err
			}
			break
		}
	}
	if victim == nil {
		return nil, nil, "", errors.New("bench: no worker running")
	}
	// The victim's skips so far count after it is gone.
	d.noteMisfires(ctx)
	if err := victim.Kill(); err != nil {
		return nil, nil, "", err
	}
	killed := d.r.clock.Now()
	id := "w" + strconv.Itoa(len(d.workers)+1)
	args := append([]string{"--worker-id", id, "--executors", strconv.Itoa(d.r.opts.Executors)}, d.r.opts.WorkerArgs...)
	args = append(args, d.topo.workerArgs...)
	pr, err := d.plat.Start(ctx, "worker-"+strconv.Itoa(len(d.workers)+1), "worker", args...)
	if err != nil {
		return nil, nil, "", err
	}
	d.workers = append(d.workers, pr)
	ready := d.r.clock.Now()
	if err := d.awaitGroup(ctx, 1); err != nil {
		return nil, nil, "", err
	}
	return victim, owned, fmt.Sprintf("%s killed (it owned %d MEDIUM partitions); %s ready after %s, the group whole again after %s",
		victim.Name, len(owned), pr.Name, ready.Sub(killed).Round(100*time.Millisecond), d.r.clock.Now().Sub(killed).Round(100*time.Millisecond)), nil
}

// workerID is a running worker's --worker-id, its consumer group client
// id, read off its command line.
func workerID(w *harness.Process) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid()))
	if err != nil {
		return "", fmt.Errorf("bench: read %s's command line: %w", w.Name, err)
	}
	id := flagValue(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), "worker-id")
	if id == "" {
		return "", fmt.Errorf("bench: %s runs without --worker-id", w.Name)
	}
	return id, nil
}

func sortedPartitions(m map[int32]bool) []int32 {
	return slices.Sorted(maps.Keys(m))
}

// CPUHog takes one core with a busy-loop process for cfg.Hog under
// cfg.Rate jittered per-second firings.
func (r *Runner) CPUHog(ctx context.Context, d *deployment, cfg CPUHogConfig) (Result, error) {
	const name = "cpu-hog"
	res := Result{Scenario: name, Header: recoveryHeader}
	if err := d.calibrate(ctx, cfg.Rate); err != nil {
		return res, err
	}
	label := name + "-" + uuid.NewString()[:8]
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	jobs, err := d.registerLabelled(ctx, label, cfg.Rate, start, start.Add(6*time.Hour), r.opts.Jitter)
	if err != nil {
		return res, err
	}
	l := recoveryLoad{name: name, label: label, jobs: jobs, start: start, jitter: r.opts.Jitter, baseline: cfg.Baseline, maxWait: cfg.MaxWait,
		disturb: func(ctx context.Context) (string, error) { return r.hog(ctx, cfg.Hog) }}
	o, err := r.recover(ctx, d, l)
	if err != nil {
		return res, err
	}
	res.Row = r.recoveryCells(&res, name, fmt.Sprintf("%d/s (jittered)", cfg.Rate), fmt.Sprintf("one core busy for %s", cfg.Hog), l, o)
	return res, nil
}

// hog runs a busy loop in a child process for d and always stops it: on
// return, and (Pdeathsig) if the benchmark itself dies first.
func (r *Runner) hog(ctx context.Context, d time.Duration) (string, error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(hctx, "sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("bench: start the CPU hog: %w", err)
	}
	pid := cmd.Process.Pid
	u0, _ := harness.ReadUsage(pid, false, r.clock.Now())
	sleepErr := Sleep(ctx, r.clock, d)
	u1, uerr := harness.ReadUsage(pid, false, r.clock.Now())
	cancel()
	_ = cmd.Wait() // killed by the cancel: its exit status says so
	if sleepErr != nil {
		return "", sleepErr
	}
	note := fmt.Sprintf("a busy loop (pid %d) ran %s", pid, d)
	if uerr == nil {
		note += fmt.Sprintf(", using %.2f cores", u1.Cores(u0))
	}
	return note, nil
}

// DeleteStaged fires cfg.Jobs per-second jobs for cfg.Fire (the
// prefetcher stages a window ahead of them all along), bulk-deletes them,
// and meanwhile creates cfg.NewJobs per-second jobs: it reports the
// platform CPU spent discarding the deleted jobs' staged firings, the
// workers' memory over the minute after, and the new jobs' lateness.
func (r *Runner) DeleteStaged(ctx context.Context, d *deployment, cfg DeleteStagedConfig) (res Result, err error) {
	const name = "delete-staged"
	res = Result{Scenario: name, Header: []string{"deleted jobs", "staged at the delete", "delete took", "found stale at their lease", "platform CPU discarding: s (per staged firing)",
		"worker RSS before / at delete / peak / +60 s", "new jobs", "new jobs p50 / p99 / max", "new jobs back to normal", "lost", "skipped by misfire policy", "dup effects", "poison"}}
	if err := d.calibrate(ctx, cfg.Jobs); err != nil {
		return res, err
	}
	label := name + "-" + uuid.NewString()[:8]
	newLabel := label + "-new"
	defer func() {
		for _, lb := range []string{label, newLabel} {
			if derr := d.bulkDelete(context.WithoutCancel(ctx), lb); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	track := r.trackUsage(ctx, d)
	var snaps []UsageSnap
	tracking := true
	defer func() {
		if tracking {
			track()
		}
	}()
	start := r.clock.Now().Add(r.lead(cfg.Jobs)).Truncate(time.Second)
	old, err := d.registerLabelled(ctx, label, cfg.Jobs, start, start.Add(6*time.Hour), r.opts.Jitter)
	if err != nil {
		return res, err
	}
	if err := sleepUntil(ctx, r.clock, start.Add(cfg.Fire)); err != nil {
		return res, err
	}
	staged := d.pipelineState(ctx)
	// What the delete drops: every firing of the jobs staged ahead — in the
	// outbox, in Kafka not yet fetched, held by the workers.
	droppable := stagedAhead(ctx, d)
	stale := func() float64 { return sumCounter(ctx, d, "sundial_worker_firings_total", "outcome", "stale") }
	s0 := stale()

	// The delete, and meanwhile the new jobs. Skips count from here: the
	// deleted jobs' earlier ones are not the new jobs'.
	mark := d.markMisfires(ctx)
	del0 := r.clock.Now()
	var (
		wg       sync.WaitGroup
		delErr   error
		delTook  time.Duration
		newStart = del0.Add(r.lead(cfg.NewJobs) - r.opts.Settle).Truncate(time.Second).Add(time.Second)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		delErr = d.bulkDelete(ctx, label)
		delTook = r.clock.Now().Sub(del0)
	}()
	fresh, err := d.registerLabelled(ctx, newLabel, cfg.NewJobs, newStart, newStart.Add(6*time.Hour), r.opts.Jitter)
	wg.Wait()
	if err = errors.Join(err, delErr); err != nil {
		return res, err
	}
	// Discarding is over when the stale count stopped rising for 5 s.
	end := del0.Add(cfg.After)
	last, lastAt := stale(), r.clock.Now()
	for r.clock.Now().Before(end) {
		if err := Sleep(ctx, r.clock, time.Second); err != nil {
			return res, err
		}
		if v := stale(); v != last {
			last, lastAt = v, r.clock.Now()
		}
	}
	snaps, tracking = track(), false
	end = r.clock.Now().Truncate(time.Second)

	want, err := fresh.slots(newStart, end.Add(-time.Second))
	if err != nil {
		return res, err
	}
	// Awaited before the delete, which would drop a straggler (see recover).
	if err := d.await(ctx, want, r.clock.Now().Add(time.Minute), 3*time.Second); err != nil {
		return res, err
	}
	if err := d.bulkDelete(ctx, newLabel); err != nil {
		return res, err
	}
	a := d.analyze(fresh, want, newStart, end.Add(-time.Second))
	skipped := d.skippedSince(ctx, mark)
	tl := d.withLost(a.Timeline, want)
	back, ok := BackToNormal(tl, newStart, end, NormalWindow, normalStep, NormalP99)
	backCell := "not within the run"
	switch {
	case ok && back == 0:
		backCell = "0 (on time throughout)"
	case ok:
		backCell = FormatLatency(back) + " after their first slot"
	}
	poison, err := d.poison(ctx, old.merge(fresh))
	if err != nil {
		return res, err
	}
	discarded := last - s0
	cpu := "–"
	if pa, pb, ok := snapsAround(snaps, del0, lastAt); ok && droppable > 0 {
		// An upper bound: the jobs not yet deleted fire meanwhile, and the
		// new jobs fire throughout.
		secs := platformCPU(pa, pb)
		cpu = fmt.Sprintf("%.1f s (≤ %.4f ms per staged firing)", secs, secs*1000/droppable)
		res.detailf("%s: discarding from %s to %s: CPU cores / RSS %s", name, del0.Format(time.TimeOnly), lastAt.Format(time.TimeOnly), usageLine(pa, pb))
		// The same less the firing done meanwhile: the firings the sink
		// received in the window, each at the platform's CPU per firing
		// over the 15 s before the delete (the old jobs alone, on time).
		if net, note, ok := netOfFiring(snaps, d.sink.Deliveries(), del0, pb.at(), secs); ok {
			cpu += fmt.Sprintf("; net of firing: %.1f s (%.4f ms)", net, net*1000/droppable)
			res.detailf("%s: %s", name, note)
		}
		// The same over a fixed span from the delete, past the end of
		// discarding, so what the delete leaves for later (the ledger's
		// summary rows, Postgres's vacuum of the deleted rows) is counted
		// too, less the same span late in the run, when discarding is
		// long over: the platform's idle work and the new jobs' firing
		// cancel out.
		if net, note, ok := discardBeyondSteady(snaps, d.sink.Deliveries(), del0, cfg.After); ok {
			cpu += fmt.Sprintf("; over the %s from the delete, beyond the platform's steady state after it: %.1f s (%.4f ms)", discardSpan, net, net*1000/droppable)
			res.detailf("%s: %s", name, note)
		}
	}
	workersRSS := func(s UsageSnap) string {
		var sum int64
		for n, u := range s {
			if strings.HasPrefix(n, "worker") {
				sum += u.RSS
			}
		}
		return mib(sum)
	}
	rssAt := func(t time.Time) string {
		if _, b, ok := snapsAround(snaps, t, t); ok {
			return workersRSS(b)
		}
		return "–"
	}
	before := "–"
	if len(snaps) > 0 {
		before = workersRSS(snaps[0]) // before the jobs were registered
	}
	s := harness.Summarize(a.Lateness)
	res.Row = []string{fmt.Sprint(cfg.Jobs), staged, FormatLatency(delTook), fmt.Sprintf("%.0f", discarded), cpu,
		fmt.Sprintf("%s / %s / %s / %s", before, rssAt(del0), peakWorkerRSS(snaps), rssAt(del0.Add(time.Minute))),
		fmt.Sprintf("%d (first slot %s after the delete began)", cfg.NewJobs, newStart.Sub(del0).Round(100*time.Millisecond)),
		FormatLatency(s.P50) + " / " + FormatLatency(s.P99) + " / " + FormatLatency(s.Max), backCell,
		fmt.Sprint(lostBeyond(a.Missing, skipped)), fmt.Sprint(skipped), fmt.Sprint(a.DuplicateEffects), fmt.Sprint(poison)}
	var rss []string
	for t := del0; !t.After(end); t = t.Add(10 * time.Second) {
		rss = append(rss, fmt.Sprintf("+%ds %s", int(t.Sub(del0).Seconds()), rssAt(t)))
	}
	res.detailf("%s: the workers' RSS (summed) every 10 s from the delete: %s", name, strings.Join(rss, ", "))
	res.detailf("%s: the new jobs' lateness by 10 s: %s", name, byTenSeconds(tl, newStart, end))
	res.detailf("%s: after: %s", name, d.pipelineState(ctx))
	res.Details = append(res.Details, skippedNote(name+" (new jobs)", a.Missing, skipped))
	res.Problems = append(res.Problems, problems(name+" (new jobs)", a, skipped)...)
	if poison > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%s: %d healthy firings dead-lettered as poison", name, poison))
	}
	return res, nil
}

// received counts the deliveries the sink received in [a, b).
func received(got []harness.Delivery, a, b time.Time) int {
	n := 0
	for _, d := range got {
		if !d.Received.Before(a) && d.Received.Before(b) {
			n++
		}
	}
	return n
}

// firingPriceBefore is the platform CPU per firing received over the 15 s
// before del0, the firings it was taken over, and the samples bounding
// them; not ok when that window has no samples or no firings.
func firingPriceBefore(snaps []UsageSnap, got []harness.Delivery, del0 time.Time) (per float64, firings int, pa, pb UsageSnap, ok bool) {
	pa, pb, ok = snapsAround(snaps, del0.Add(-15*time.Second), del0)
	if !ok {
		return 0, 0, nil, nil, false
	}
	firings = received(got, pa.at(), pb.at())
	if firings == 0 {
		return 0, 0, nil, nil, false
	}
	return platformCPU(pa, pb) / float64(firings), firings, pa, pb, true
}

// netOfFiring takes from secs, the platform CPU spent from del0 to end,
// the CPU of the firings the sink received in that window, priced at the
// platform CPU per firing received over the 15 s before del0. It reports
// false when that earlier window has no samples or no firings.
func netOfFiring(snaps []UsageSnap, got []harness.Delivery, del0, end time.Time, secs float64) (float64, string, bool) {
	per, before, pa, pb, ok := firingPriceBefore(snaps, got, del0)
	if !ok {
		return 0, "", false
	}
	during := received(got, del0, end)
	net := max(0, secs-per*float64(during))
	return net, fmt.Sprintf("firing while discarding: %d firings received from the delete to the end of discarding, at %.3f ms of platform CPU each (%d firings and %.1f s over the %s before the delete): %.1f s of the %.1f s",
		during, per*1000, before, platformCPU(pa, pb), pb.at().Sub(pa.at()).Round(time.Second), per*float64(during), secs), true
}

// discardSpan is the fixed span after a delete over which the discarding
// CPU is measured a second time.
const discardSpan = 30 * time.Second

// discardBeyondSteady is the platform CPU of the discardSpan from the
// delete less that of a span as long ending 5 s before the run's end
// (after: how long the run goes on from the delete), when only the jobs
// created meanwhile fire: what the delete cost, trailing work included.
// The deleted jobs' firings received in the first span before their
// deletion are taken out at firingPriceBefore's price (those in the
// first span beyond the late span's count). Not ok when the run is too
// short to hold both spans apart.
func discardBeyondSteady(snaps []UsageSnap, got []harness.Delivery, del0 time.Time, after time.Duration) (float64, string, bool) {
	lateEnd := del0.Add(after - 5*time.Second)
	lateStart := lateEnd.Add(-discardSpan)
	if lateStart.Before(del0.Add(discardSpan + 10*time.Second)) {
		return 0, "", false
	}
	fa, fb, ok1 := snapsAround(snaps, del0, del0.Add(discardSpan))
	la, lb, ok2 := snapsAround(snaps, lateStart, lateEnd)
	per, _, _, _, ok3 := firingPriceBefore(snaps, got, del0)
	if !ok1 || !ok2 || !ok3 {
		return 0, "", false
	}
	first, late := platformCPU(fa, fb), platformCPU(la, lb)
	// Scale the late span to the first's length (the samples' spacing
	// makes them differ by up to a second or two).
	late *= fb.at().Sub(fa.at()).Seconds() / lb.at().Sub(la.at()).Seconds()
	nFirst, nLate := received(got, fa.at(), fb.at()), received(got, la.at(), lb.at())
	extra := max(0, nFirst-nLate)
	net := max(0, first-late-per*float64(extra))
	return net, fmt.Sprintf("over the %s from the delete: %.1f s of platform CPU; the same span from %s to %s: %.1f s (%d firings); %d firings more in the first, at %.3f ms each: %.1f s; beyond the steady state: %.1f s",
		fb.at().Sub(fa.at()).Round(time.Second), first, la.at().Format(time.TimeOnly), lb.at().Format(time.TimeOnly), late, nLate, extra, per*1000, per*float64(extra), net), true
}

// platformCPU is the CPU seconds every process but the benchmark's own
// (and the machine's total) spent between two samples.
func platformCPU(a, b UsageSnap) float64 {
	w := b.window(a).Seconds()
	total := 0.0
	for n, c := range Cores(a, b) {
		if n != machineKey && n != BenchKey {
			total += c * w
		}
	}
	return total
}
