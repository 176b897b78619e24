package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// RegisteredConfig is the registered scenario: a steady Rate measured for
// Phase before and after Jobs idle jobs are loaded.
type RegisteredConfig struct {
	Jobs  int
	Rate  int
	Phase time.Duration
	// Chunk is how many rows one COPY transaction loads.
	Chunk int
}

// idleSpan is how far apart the idle jobs' instants spread, starting
// idleFrom from now: far enough that none fires during the run.
const (
	idleFrom = 48 * time.Hour
	idleSpan = 300 * 24 * time.Hour
)

// idleJob is the i-th of n idle jobs: a yearly cron at an instant of its
// own, the n instants evenly spread over idleSpan from base, so the jobs
// are in the hot index (active, with a next_fire_at) without being due.
// Their instants increase with i, as the UUIDv7 ids do, so a load sorted by
// both writes every index in order.
func idleJob(i, n int, base time.Time, url string) *sundialv1.Job {
	at := base.Add(time.Duration(float64(idleSpan) * float64(i) / float64(n))).UTC()
	cron := fmt.Sprintf("%d %d %d %d %d *", at.Second(), at.Minute(), at.Hour(), at.Day(), int(at.Month()))
	return &sundialv1.Job{
		Name:     fmt.Sprintf("idle-%08d", i),
		Priority: sundialv1.Priority_PRIORITY_LOW,
		Payload:  payload,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: cron}, Timezone: "UTC"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}},
	}
}

// Registered shows what M idle jobs cost: the prefetcher's pass and the
// steady lateness before and after loading them, with the steady load
// running throughout. The idle jobs are loaded with COPY in the api's row
// encoding (harness.CopyJobs): creating millions through CreateJob would
// take hours on this machine, and what is measured is the platform with
// the jobs in place, not how they got there.
func (r *Runner) Registered(ctx context.Context, d *deployment, cfg RegisteredConfig) (Result, error) {
	res := Result{Scenario: "registered",
		Header: []string{"idle jobs", "CPU per firing before → after: machine (ms)", "loaded by", "load time", "tick mean before → after", "tick p99 before → after",
			"p50 before → after", "p99 before → after", "p99.9 before → after", "lost", "skipped by misfire policy"}}
	if len(d.prefetchers) == 0 {
		return res, fmt.Errorf("no prefetcher")
	}
	start := r.clock.Now().Add(r.lead(cfg.Rate)).Truncate(time.Second)
	// The steady jobs run through both phases and the load between them;
	// the deployment is torn down long before they end.
	run, err := d.registerRate(ctx, "registered", cfg.Rate, start, start.Add(time.Hour))
	if err != nil {
		return res, err
	}
	if err := r.checkLead(start, 2*time.Second); err != nil {
		return res, err
	}

	before, err := r.phase(ctx, d, run, start, cfg.Phase, "registered-before")
	if err != nil {
		return res, err
	}

	loadStart := r.clock.Now()
	base := loadStart.Add(idleFrom).Truncate(time.Second)
	diffs, err := d.checkEncoding(ctx, base)
	if err != nil {
		return res, fmt.Errorf("compare the api's and the bulk row encoding: %w", err)
	}
	if len(diffs) == 0 {
		res.detailf("registered: a job created through the api and the same job copied in bulk have identical rows (spec decoded; id, name and instants aside)")
	}
	res.Problems = append(res.Problems, diffs...)
	step := max(cfg.Jobs/10, 1)
	next := step
	loaded, err := harness.CopyJobs(ctx, d.pool, d.plat.Tenant(), cfg.Jobs, harness.CopyOptions{
		Chunk: cfg.Chunk,
		Progress: func(done int) {
			if done >= next || done == cfg.Jobs {
				r.log.Info("registered: idle jobs loaded", "done", done, "of", cfg.Jobs, "elapsed", r.clock.Now().Sub(loadStart).Round(time.Second))
				next = done + step
			}
		},
	}, func(i int) *sundialv1.Job { return idleJob(i, cfg.Jobs, base, d.sink.URL()) })
	if err != nil {
		return res, fmt.Errorf("loaded %d idle jobs: %w", loaded, err)
	}
	copied := r.clock.Now()
	if _, err := d.pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		return res, fmt.Errorf("vacuum analyze jobs: %w", err)
	}
	loadEnd := r.clock.Now()
	var size string
	_ = d.pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('jobs'))`).Scan(&size)
	res.detailf("registered: %d idle jobs copied in %s (%.0f rows/s), VACUUM ANALYZE %s; jobs table with indexes: %s",
		loaded, copied.Sub(loadStart).Round(time.Second), float64(loaded)/max(copied.Sub(loadStart).Seconds(), 1e-3),
		loadEnd.Sub(copied).Round(time.Second), size)
	// Loading competes with the steady load for the machine, which may
	// fall behind; the second phase starts once it has caught up.
	caughtUp, err := d.catchUp(ctx, run, loadStart.Truncate(time.Second), 10*time.Minute)
	if err != nil {
		return res, err
	}
	res.detailf("registered: the steady load had caught up %s after the load ended", caughtUp.Sub(loadEnd).Round(time.Second))
	if during, err := run.slots(loadStart.Truncate(time.Second), loadEnd); err == nil {
		a := d.analyze(run, during, loadStart.Truncate(time.Second), loadEnd)
		res.detailf("registered: lateness of the steady load while the idle jobs were being copied: %s", harness.Summarize(a.Lateness))
	}

	// 15 s after the catch-up, so the second phase measures the platform
	// with the jobs in place, not the end of the recovery; the smoke run
	// (--quick, 20,000 jobs copied in a second or two) checks only that
	// nothing is lost, and waits 5.
	gap := 15 * time.Second
	if r.opts.Quick {
		gap = 5 * time.Second
	}
	afterStart := r.clock.Now().Add(gap).Truncate(time.Second)
	after, err := r.phase(ctx, d, run, afterStart, cfg.Phase, "registered-after")
	if err != nil {
		return res, err
	}
	if err := d.deleteJobs(ctx, run.jobs); err != nil {
		return res, fmt.Errorf("delete the steady jobs: %w", err)
	}
	arrow := func(a, b time.Duration) string { return FormatLatency(a) + " → " + FormatLatency(b) }
	res.Row = []string{fmt.Sprint(loaded), fmt.Sprintf("%s → %s", before.cpuMachine, after.cpuMachine), "COPY (api row encoding)", loadEnd.Sub(loadStart).Round(time.Second).String(),
		arrow(before.tickMean, after.tickMean), arrow(before.tickP99, after.tickP99),
		arrow(before.lat.P50, after.lat.P50), arrow(before.lat.P99, after.lat.P99), arrow(before.lat.P999, after.lat.P999),
		fmt.Sprint(before.lost + after.lost), fmt.Sprint(before.skipped + after.skipped)}
	res.Details = append(res.Details, before.note, after.note)
	res.detailf("registered: before: %d/s, lateness %s, %d prefetch passes; jobs table at the end: %s; CPU: %s; per firing %s", cfg.Rate, before.lat, before.ticks, before.table, before.usage, before.cpu)
	res.detailf("registered: after: %d/s, lateness %s, %d prefetch passes; jobs table at the end: %s; CPU: %s; per firing %s", cfg.Rate, after.lat, after.ticks, after.table, after.usage, after.cpu)
	res.Problems = append(res.Problems, append(before.problems, after.problems...)...)
	return res, nil
}

// phaseResult is one measured window of the registered scenario.
type phaseResult struct {
	lat               harness.Summary
	tickMean, tickP99 time.Duration
	ticks             uint64
	usage             string
	cpu               string // CPU per firing, machine and per process
	cpuMachine        string // the machine's alone
	table             string
	lost              int
	skipped           int // by misfire policy
	note              string
	problems          []string
}

// phase measures the slots of run in [start, start+length): lateness, the
// leader's prefetch passes and CPU.
func (r *Runner) phase(ctx context.Context, d *deployment, run *jobSet, start time.Time, length time.Duration, name string) (phaseResult, error) {
	var pr phaseResult
	mark := d.markMisfires(ctx)
	if err := sleepUntil(ctx, r.clock, start); err != nil {
		return pr, err
	}
	leader := leaderOf(ctx, d.prefetchers)
	if leader == nil {
		return pr, fmt.Errorf("%s: no prefetcher leads", name)
	}
	h0 := histogram(ctx, leader, "sundial_prefetcher_tick_duration_seconds")
	u0 := r.snapUsage(d)
	wait := r.profiles(ctx, d, name, length)
	end := start.Add(length)
	if err := sleepUntil(ctx, r.clock, end.Add(r.opts.Jitter)); err != nil {
		return pr, err
	}
	h := histogram(ctx, leader, "sundial_prefetcher_tick_duration_seconds").Sub(h0)
	u1 := r.snapUsage(d)
	wait()
	last := end.Add(-time.Second)
	want, err := run.slots(start, last)
	if err != nil {
		return pr, err
	}
	if err := d.await(ctx, want, end.Add(60*time.Second), time.Second); err != nil {
		return pr, err
	}
	a := d.analyze(run, want, start, last)
	pr.lat = harness.Summarize(a.Lateness)
	pr.tickMean, pr.tickP99, pr.ticks = harness.Seconds(h.Mean()), harness.Seconds(h.Quantile(0.99)), h.Count
	pr.usage = usageLine(u0, u1)
	rate := float64(run.perSecond())
	pr.cpu = CPUPerFiring(u0, u1, rate)
	pr.cpuMachine = "–"
	if c, ok := cpuOf(u0, u1, machineKey); ok {
		pr.cpuMachine = fmt.Sprintf("%.2f", MsPerFiring(c, rate))
	}
	pr.table = d.jobsTableStats(ctx)
	pr.skipped = d.skippedSince(ctx, mark)
	pr.lost = lostBeyond(a.Missing, pr.skipped)
	pr.problems = problems(name, a, pr.skipped)
	pr.note = skippedNote(name, a.Missing, pr.skipped)
	return pr, nil
}

// checkEncoding creates one idle job through the api and copies the same
// one with harness.CopyJobs, then compares the two rows column by column
// (the spec decoded, without the fields that differ by construction: id,
// name, instants). It returns what differs, so a change of the api's row
// encoding shows up as a problem of this scenario instead of skewing it.
func (d *deployment) checkEncoding(ctx context.Context, base time.Time) ([]string, error) {
	tmpl := func(name string) *sundialv1.Job {
		j := idleJob(0, 1, base, d.sink.URL())
		j.Name = name
		return j
	}
	if _, err := d.client.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: tmpl("encoding-api")}); err != nil {
		return nil, err
	}
	if _, err := harness.CopyJobs(ctx, d.pool, d.plat.Tenant(), 1, harness.CopyOptions{}, func(int) *sundialv1.Job { return tmpl("encoding-copy") }); err != nil {
		return nil, err
	}
	type row struct {
		id                     uuid.UUID
		tenant, labels, status string
		spec                   []byte
		priority, partition    int16
		version                int64
		next                   time.Time
		key                    *string
		createdEqUpdated       bool
	}
	read := func(name string) (row, error) {
		var r row
		err := d.pool.QueryRow(ctx, `SELECT id, tenant, labels::text, status, spec, priority, partition, version,
		       next_fire_at, idempotency_key, created_at = updated_at FROM jobs WHERE name = $1`, name).
			Scan(&r.id, &r.tenant, &r.labels, &r.status, &r.spec, &r.priority, &r.partition, &r.version, &r.next, &r.key, &r.createdEqUpdated)
		return r, err
	}
	api, err := read("encoding-api")
	if err != nil {
		return nil, err
	}
	cp, err := read("encoding-copy")
	if err != nil {
		return nil, err
	}
	var diffs []string
	cmp := func(what string, a, b any) {
		if a != b {
			diffs = append(diffs, fmt.Sprintf("row encoding: %s is %v through the api, %v through COPY", what, a, b))
		}
	}
	cmp("tenant", api.tenant, cp.tenant)
	cmp("labels", api.labels, cp.labels)
	cmp("status", api.status, cp.status)
	cmp("priority", api.priority, cp.priority)
	cmp("version", api.version, cp.version)
	cmp("next_fire_at", api.next.UTC(), cp.next.UTC())
	cmp("idempotency_key set", api.key != nil, cp.key != nil)
	cmp("created_at = updated_at", api.createdEqUpdated, cp.createdEqUpdated)
	cmp("partition matches the id", api.partition == int16(firing.Partition(api.id)), cp.partition == int16(firing.Partition(cp.id)))
	specs := make([]*sundialv1.Job, 2)
	for i, b := range [][]byte{api.spec, cp.spec} {
		j := &sundialv1.Job{}
		if err := proto.Unmarshal(b, j); err != nil {
			return nil, err
		}
		j.Id, j.Name, j.CreateTime, j.UpdateTime = "", "", nil, nil
		specs[i] = j
	}
	if !proto.Equal(specs[0], specs[1]) {
		diffs = append(diffs, fmt.Sprintf("row encoding: spec differs:\n  api:  %v\n  COPY: %v", specs[0], specs[1]))
	}
	return diffs, nil
}

// catchUp waits until every slot of run from from until two seconds ago
// has arrived, checking again until a check finds nothing behind, and
// returns when that was. It gives up after limit.
func (d *deployment) catchUp(ctx context.Context, run *jobSet, from time.Time, limit time.Duration) (time.Time, error) {
	deadline := d.r.clock.Now().Add(limit)
	for {
		upTo := d.r.clock.Now().Add(-2 * time.Second)
		want, err := run.slots(from, upTo)
		if err != nil {
			return time.Time{}, err
		}
		if err := d.await(ctx, want, deadline, 0); err != nil {
			return time.Time{}, err
		}
		now := d.r.clock.Now()
		if now.Sub(upTo) < 3*time.Second || now.After(deadline) {
			return now, nil
		}
		from = upTo
	}
}

// jobsTableStats is what Postgres says of the jobs table: live and dead
// row versions (every prefetch pass leaves one dead version per claimed
// job) and when autovacuum last cleaned it.
func (d *deployment) jobsTableStats(ctx context.Context) string {
	var live, dead, vacuums int64
	var last *time.Time
	err := d.pool.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, autovacuum_count, last_autovacuum
		  FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'jobs'`).Scan(&live, &dead, &vacuums, &last)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	ago := "never"
	if last != nil {
		ago = d.r.clock.Now().Sub(*last).Round(time.Second).String() + " ago"
	}
	return fmt.Sprintf("%d live and %d dead row versions, autovacuumed %d times, last %s", live, dead, vacuums, ago)
}
