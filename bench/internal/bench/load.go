package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
)

// payload is what every benchmark job sends: a small JSON body, as a
// typical webhook carries.
var payload = []byte(`{"source":"sundial-bench","kind":"tick"}`)

// rateJob fires every second from start through end (both whole seconds),
// each firing spread by jitter (0: at the whole second), at the sink.
func rateJob(name, url string, start, end time.Time, prio sundialv1.Priority, jitter time.Duration) *sundialv1.Job {
	j := &sundialv1.Job{
		Name:     name,
		Priority: prio,
		Payload:  payload,
		Schedule: &sundialv1.Schedule{
			Spec:      &sundialv1.Schedule_Cron{Cron: "* * * * * *"},
			Timezone:  "UTC",
			StartTime: timestamppb.New(start),
			EndTime:   timestamppb.New(end),
		},
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}},
	}
	if jitter > 0 {
		j.MaxJitter = durationpb.New(jitter)
	}
	return j
}

// onceJob fires once at at.
func onceJob(name, url string, at time.Time, prio sundialv1.Priority) *sundialv1.Job {
	return &sundialv1.Job{
		Name:     name,
		Priority: prio,
		Payload:  payload,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at)}, Timezone: "UTC"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}},
	}
}

// register creates n jobs through the api (CreateJob, concurrently) and
// records the throughput for later lead times.
func (d *deployment) register(ctx context.Context, label string, n int, job func(i int) *sundialv1.Job) ([]*sundialv1.Job, error) {
	started := d.r.clock.Now()
	run := uuid.NewString()[:8]
	jobs, err := harness.CreateJobs(ctx, d.client, n, d.r.opts.RegisterConcurrency, func(i int) *sundialv1.CreateJobRequest {
		return &sundialv1.CreateJobRequest{Job: job(i), IdempotencyKey: fmt.Sprintf("%s-%s-%d", label, run, i)}
	})
	took := d.r.clock.Now().Sub(started)
	if err != nil {
		return nil, err
	}
	d.r.noteRegistration(n, took)
	d.r.log.Info("jobs registered", "what", label, "jobs", n, "took", took.Round(time.Millisecond),
		"per_second", int(float64(n)/max(took.Seconds(), 1e-3)))
	return jobs, nil
}

// jobIDs is the set of jobs' ids.
func jobIDs(jobs []*sundialv1.Job) map[uuid.UUID]bool {
	m := make(map[uuid.UUID]bool, len(jobs))
	for _, j := range jobs {
		m[uuid.MustParse(j.GetId())] = true
	}
	return m
}

// checkLead fails when registration ran past the instant the first slot
// is due minus margin: the measurement would start with jobs half
// registered.
func (r *Runner) checkLead(first time.Time, margin time.Duration) error {
	if left := first.Sub(r.clock.Now()); left < margin {
		return fmt.Errorf("bench: registration finished %s before the first slot (wanted at least %s); the machine registers slower than the lead assumed, rerun or raise the lead", left.Round(time.Millisecond), margin)
	}
	return nil
}

// deleteJobs deletes jobs through the api, so they stop firing into the
// measurements that follow on a shared deployment.
func (d *deployment) deleteJobs(ctx context.Context, jobs []*sundialv1.Job) error {
	return harness.Parallel(ctx, len(jobs), d.r.opts.RegisterConcurrency, func(ctx context.Context, i int) error {
		_, err := d.client.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: jobs[i].GetId()})
		return err
	})
}

// calibrate measures the registration throughput when no registration has
// yet, and n jobs are about to be registered (a guess would make a lead
// either minutes too long or too short): it registers a few hundred
// one-off jobs due in 30 days, which never fire during a run.
func (d *deployment) calibrate(ctx context.Context, n int) error {
	d.r.mu.Lock()
	known := d.r.regRate > 0
	d.r.mu.Unlock()
	if known || n < 2000 {
		return nil
	}
	at := d.r.clock.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	_, err := d.register(ctx, "calibration", 500, func(i int) *sundialv1.Job {
		return onceJob(fmt.Sprintf("calibration-%03d", i), d.sink.URL(), at, sundialv1.Priority_PRIORITY_LOW)
	})
	return err
}
