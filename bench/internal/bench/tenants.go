package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// TenantsConfig is the tenants scenario: FloodJobs one-off jobs of one
// tenant due at one instant, that tenant's firing rate limited to
// FloodRate a second (bursts of FloodBurst) in the workers' quotas file,
// while QuietJobs jobs of another tenant, with no quota, fire every second
// for Duration from the same instant; on Workers workers.
type TenantsConfig struct {
	FloodJobs  int
	FloodRate  float64
	FloodBurst int
	QuietJobs  int
	Duration   time.Duration
	Workers    int
}

// quietTenant is the tenant whose firings must keep their timing; the
// flood is the deployment's own tenant (the api's token).
const quietTenant = "bench-quiet"

// Tenants is the per-tenant firing-rate quota's fairness, measured: the
// flooding tenant's firings go out at its quota for the whole cluster
// (delayed, in order, none lost) while the quiet tenant's keep their
// timing. The flood is registered through the api; the quiet tenant has no
// token, so its jobs are loaded in the api's row encoding
// (harness.CopyJobs), all alike but for their names.
func (r *Runner) Tenants(ctx context.Context, cfg TenantsConfig) (Result, error) {
	res := Result{Scenario: "tenants",
		Header: []string{"workers", "flood jobs (quota /s, burst)", "quiet /s", "duration", "quiet p50", "quiet p99", "quiet max",
			"flood last fired after", "flood p50", "lost (flood/quiet)", "skipped by misfire policy", "dup effects", "raw dups"}}
	quotas := filepath.Join(r.opts.WorkDir, "tenants-quotas.yaml")
	file := fmt.Sprintf("tenants:\n  bench:\n    firing_rate_per_second: %g\n    firing_burst: %d\n", cfg.FloodRate, cfg.FloodBurst)
	if err := os.WriteFile(quotas, []byte(file), 0o600); err != nil {
		return res, err
	}
	workers := max(cfg.Workers, 1)
	d, err := r.deploy(ctx, "tenants", topology{prefetchers: 1, relays: 1, workers: workers, ranges: r.opts.Deploy.Ranges, workerArgs: []string{"--quotas-file", quotas, "--cluster-limits"}})
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := d.close(context.WithoutCancel(ctx), false); cerr != nil {
			r.log.Warn("deployment not cleaned up", "scenario", "tenants", "err", cerr)
		}
	}()
	res.Deployment = d.describe()
	n := cfg.FloodJobs + cfg.QuietJobs
	mark := d.markMisfires(ctx)
	if err := d.calibrate(ctx, n); err != nil {
		return res, err
	}
	at := r.clock.Now().Add(r.lead(n) + 5*time.Second).Truncate(time.Second)
	end := at.Add(cfg.Duration - time.Second)
	floodJobs, err := d.register(ctx, "tenants-flood", cfg.FloodJobs, func(i int) *sundialv1.Job {
		return onceJob(fmt.Sprintf("tenants-flood-%06d", i), d.sink.URL(), at, sundialv1.Priority_PRIORITY_MEDIUM)
	})
	if err != nil {
		return res, err
	}
	quietTemplate := func(i int) *sundialv1.Job {
		return rateJob("tenants-quiet-"+strconv.Itoa(i), d.sink.URL(), at, end, sundialv1.Priority_PRIORITY_MEDIUM, r.opts.Jitter)
	}
	if _, err := harness.CopyJobs(ctx, d.pool, quietTenant, cfg.QuietJobs, harness.CopyOptions{}, quietTemplate); err != nil {
		return res, err
	}
	quietJobs, err := d.jobsOf(ctx, quietTenant, quietTemplate(0))
	if err != nil {
		return res, err
	}
	if err := r.checkLead(at, 2*time.Second); err != nil {
		return res, err
	}
	flood, quiet := newJobSet(floodJobs), newJobSet(quietJobs)
	all := flood.merge(quiet)
	want, err := all.slots(at, end)
	if err != nil {
		return res, err
	}
	r.log.Info("tenants: waiting for the instant", "flood", cfg.FloodJobs, "quiet_per_second", cfg.QuietJobs, "at", at.Format(time.TimeOnly))
	floodTakes := time.Duration(float64(cfg.FloodJobs) / cfg.FloodRate * float64(time.Second))
	actx, cancel := context.WithDeadline(ctx, at.Add(max(floodTakes, cfg.Duration)+2*time.Minute))
	defer cancel()
	if err := d.sink.Await(actx, want, 0); err != nil && ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := Sleep(ctx, r.clock, 3*time.Second); err != nil { // late duplicates
		return res, err
	}
	wantFlood, _ := flood.slots(at, at)
	wantQuiet, _ := quiet.slots(at, end)
	everything := d.analyze(all, want, at, end)
	fa := d.analyze(flood, wantFlood, at, at)
	qa := d.analyze(quiet, wantQuiet, at, end)
	skipped := d.skippedSince(ctx, mark)
	sk := spreadSkipped(skipped, fa.Missing, qa.Missing)
	fs, qs := harness.Summarize(fa.Lateness), harness.Summarize(qa.Lateness)
	res.Row = []string{strconv.Itoa(workers), fmt.Sprintf("%d (%g, %d)", cfg.FloodJobs, cfg.FloodRate, cfg.FloodBurst), strconv.Itoa(cfg.QuietJobs), cfg.Duration.String(),
		FormatLatency(qs.P50), FormatLatency(qs.P99), FormatLatency(qs.Max), FormatLatency(fs.Max), FormatLatency(fs.P50),
		fmt.Sprintf("%d/%d", fa.Missing-sk[0], qa.Missing-sk[1]), fmt.Sprint(skipped), fmt.Sprint(everything.DuplicateEffects), fmt.Sprint(everything.RawDuplicates)}
	res.detailf("tenants: the flood's quota alone would take %s for its %d firings (after its burst of %d)", floodTakes.Round(time.Millisecond), cfg.FloodJobs, cfg.FloodBurst)
	res.detailf("tenants: quiet lateness %s; flood lateness %s", qs, fs)
	res.Details = append(res.Details, skippedNote("tenants", everything.Missing, skipped))
	res.Problems = problems("tenants", everything, skipped)
	return res, nil
}

// jobsOf reads back the ids, first slots and creation instants of a
// tenant's jobs loaded alike (like template but for their names), as jobs
// the analysis can expect slots of.
func (d *deployment) jobsOf(ctx context.Context, tenant string, template *sundialv1.Job) ([]*sundialv1.Job, error) {
	rows, err := d.pool.Query(ctx, `SELECT id, next_fire_at, created_at FROM jobs WHERE tenant = $1`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []*sundialv1.Job
	for rows.Next() {
		var id uuid.UUID
		var next, created time.Time
		if err := rows.Scan(&id, &next, &created); err != nil {
			return nil, err
		}
		j := &sundialv1.Job{Id: id.String(), Name: template.GetName(), Priority: template.GetPriority(), Schedule: template.GetSchedule(),
			MaxJitter: template.GetMaxJitter(), Target: template.GetTarget(), Tenant: tenant,
			NextFireTime: timestamppb.New(next), CreateTime: timestamppb.New(created)}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}
