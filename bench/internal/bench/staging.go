package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// StagingConfig is the staging scenario: how fast the prefetchers stage a
// herd of Jobs daily jobs due at one instant, first with one elected
// leader, then with each count of Prefetchers splitting the partitions
// into Ranges ranges.
type StagingConfig struct {
	Jobs        int
	Prefetchers []int
	Ranges      int
	// Chunk is how many rows one COPY transaction loads.
	Chunk int
}

// stagingRun is one prefetcher arrangement of the staging scenario.
type stagingRun struct {
	prefetchers, ranges int
}

func (s stagingRun) String() string {
	if s.ranges == 1 {
		return fmt.Sprintf("%d, one leader", s.prefetchers)
	}
	return fmt.Sprintf("%d, %d ranges", s.prefetchers, s.ranges)
}

// Staging measures the staging rate of partitioned prefetch: how
// many slots per second the prefetchers write to the outbox when a herd
// enters the window at once, for one elected leader and for 1, 2, 4…
// prefetchers sharing ranges. Each arrangement gets a deployment of its
// own with no relay and no worker, so the outbox keeps what was staged and
// nothing else competes for the machine. The prefetchers start (and, with
// ranges, spread the ranges between them) before the herd is loaded; the
// herd is due one window plus a margin later, so no prefetcher can claim a
// job before the instant it enters the window, which is where the clock
// starts.
func (r *Runner) Staging(ctx context.Context, cfg StagingConfig) (Result, error) {
	res := Result{Scenario: "staging",
		Header: []string{"prefetchers", "jobs", "staged in", "staged/s", "first staged after", "prefetcher CPU (cores)", "postgres CPU (cores)", "CPU per slot: prefetchers (ms)", "duplicates"}}
	runs := []stagingRun{{prefetchers: 1, ranges: 1}}
	for _, k := range cfg.Prefetchers {
		runs = append(runs, stagingRun{prefetchers: k, ranges: cfg.Ranges})
	}
	for _, sr := range runs {
		row, err := r.stagingOnce(ctx, cfg, sr, &res)
		if err != nil {
			return res, fmt.Errorf("staging with %s: %w", sr, err)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// stagingMargin is how long after the herd is loaded it enters the window
// at the latest; a load that takes longer is reported, not measured.
const stagingMargin = 45 * time.Second

func (r *Runner) stagingOnce(ctx context.Context, cfg StagingConfig, sr stagingRun, res *Result) ([]string, error) {
	d, err := r.deploy(ctx, fmt.Sprintf("staging%d_%d", sr.prefetchers, sr.ranges), topology{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := d.close(context.WithoutCancel(ctx), false); cerr != nil {
			r.log.Warn("deployment not cleaned up", "scenario", "staging", "err", cerr)
		}
	}()
	res.Deployment = d.describe()
	for i := range sr.prefetchers {
		id := "pf-" + strconv.Itoa(i+1)
		args := []string{"--node-id", id, "--window", r.opts.Window.String(), "--ranges", strconv.Itoa(sr.ranges)}
		pr, err := d.plat.Start(ctx, "prefetcher-"+strconv.Itoa(i+1), "prefetcher", args...)
		if err != nil {
			return nil, err
		}
		d.prefetchers = append(d.prefetchers, pr)
	}
	if err := d.awaitRanges(ctx, sr); err != nil {
		return nil, err
	}

	// The herd: daily jobs due at one instant (a midnight herd's shape),
	// after the load and the margin have passed.
	loadStart := r.clock.Now()
	at := loadStart.Add(r.opts.Window + stagingMargin + r.stagingLoadEstimate(cfg.Jobs)).Truncate(time.Second)
	enters := at.Add(-r.opts.Window)
	cron := fmt.Sprintf("%d %d %d * * *", at.UTC().Second(), at.UTC().Minute(), at.UTC().Hour())
	loaded, err := harness.CopyJobs(ctx, d.pool, d.plat.Tenant(), cfg.Jobs, harness.CopyOptions{Chunk: cfg.Chunk}, func(i int) *sundialv1.Job {
		return &sundialv1.Job{
			Name:     fmt.Sprintf("herd-%08d", i),
			Priority: sundialv1.Priority_PRIORITY_MEDIUM,
			Payload:  payload,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: cron}, Timezone: "UTC"},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: d.sink.URL()}}},
		}
	})
	if err != nil {
		return nil, fmt.Errorf("loaded %d jobs: %w", loaded, err)
	}
	loadEnd := r.clock.Now()
	if !loadEnd.Before(enters) {
		return nil, fmt.Errorf("loading %d jobs took %s, past the instant they enter the window (%s after the load began): lower --staging-jobs", loaded, loadEnd.Sub(loadStart).Round(time.Second), enters.Sub(loadStart).Round(time.Second))
	}
	if _, err := d.pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		return nil, err
	}
	r.log.Info("staging: herd loaded", "arrangement", sr.String(), "jobs", loaded, "took", loadEnd.Sub(loadStart).Round(time.Millisecond), "enters window", enters.Format(time.TimeOnly))
	if n, err := d.outboxRows(ctx); err != nil || n != 0 {
		return nil, fmt.Errorf("%d rows staged before the herd entered the window (%v)", n, err)
	}

	if err := sleepUntil(ctx, r.clock, enters); err != nil {
		return nil, err
	}
	u0 := r.snapUsage(d)
	var first, done time.Time
	deadline := enters.Add(10 * time.Minute)
	for {
		n, err := d.outboxRows(ctx)
		if err != nil {
			return nil, err
		}
		now := r.clock.Now()
		if n > 0 && first.IsZero() {
			first = now
		}
		if n >= loaded {
			done = now
			break
		}
		if now.After(deadline) {
			return nil, fmt.Errorf("%d of %d slots staged 10 minutes after the herd entered the window", n, loaded)
		}
		if err := Sleep(ctx, r.clock, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	u1 := r.snapUsage(d)
	var dups int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT (job_id, scheduled_at)) FROM outbox`).Scan(&dups); err != nil {
		return nil, err
	}
	if dups != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("staging %s: %d slots staged twice", sr, dups))
	}
	took := done.Sub(enters)
	var pfCores float64
	var perProc []string
	for _, pr := range d.prefetchers {
		if c, ok := cpuOf(u0, u1, pr.Name); ok {
			pfCores += c
			perProc = append(perProc, fmt.Sprintf("%s %.2f", pr.Name, c))
		}
	}
	pgCores, _ := cpuOf(u0, u1, "postgres")
	perSlot := pfCores * took.Seconds() * 1000 / float64(loaded)
	res.detailf("staging %s: %d slots in %s after the herd entered the window (first after %s); prefetchers %s; CPU: %s",
		sr, loaded, took.Round(time.Millisecond), first.Sub(enters).Round(time.Millisecond), strings.Join(perProc, ", "), usageLine(u0, u1))
	return []string{sr.String(), strconv.Itoa(loaded), took.Round(10 * time.Millisecond).String(),
		fmt.Sprintf("%.0f", float64(loaded)/took.Seconds()), first.Sub(enters).Round(10 * time.Millisecond).String(),
		fmt.Sprintf("%.2f", pfCores), fmt.Sprintf("%.2f", pgCores), fmt.Sprintf("%.3f", perSlot), strconv.Itoa(dups)}, nil
}

// stagingLoadEstimate is a generous bound on how long COPY takes to load
// n jobs on a small machine (about 20,000 rows/s, measured by the
// registered scenario, halved).
func (r *Runner) stagingLoadEstimate(n int) time.Duration {
	return time.Duration(n/10_000) * time.Second
}

// outboxRows counts the deployment's staged rows.
func (d *deployment) outboxRows(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
	return n, err
}

// awaitRanges waits until the prefetchers lead their share: every range
// led and each prefetcher leading one at least.
func (d *deployment) awaitRanges(ctx context.Context, sr stagingRun) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		total, each, leaders := 0.0, true, 0.0
		for _, pr := range d.prefetchers {
			m, err := pr.Metrics(ctx)
			if err != nil {
				each = false
				continue
			}
			led, _ := m.Value("sundial_prefetcher_ranges_led")
			total += led
			each = each && led >= 1
			if v, ok := m.Value("sundial_prefetcher_leader"); ok {
				leaders += v
			}
		}
		if total == float64(sr.ranges) && each {
			return nil
		}
		if err := Sleep(ctx, d.r.clock, 250*time.Millisecond); err != nil {
			return fmt.Errorf("prefetchers lead %v of %d ranges (%v leaders) after 90s: %w", total, sr.ranges, leaders, err)
		}
	}
}
