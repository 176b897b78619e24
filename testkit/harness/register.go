package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Parallel calls fn(ctx, i) for every i in [0, n), concurrency calls at a
// time. It stops issuing calls at the first error (cancelling ctx for the
// calls in flight) and returns that error.
func Parallel(ctx context.Context, n, concurrency int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(max(concurrency, 1), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// CreateJobs calls CreateJob n times, concurrency calls at a time, with the
// request req(i) builds for i in [0, n). It returns the created jobs in
// request order, or the first error (and stops issuing calls).
func CreateJobs(ctx context.Context, cl sundialv1.JobServiceClient, n, concurrency int, req func(i int) *sundialv1.CreateJobRequest) ([]*sundialv1.Job, error) {
	jobs := make([]*sundialv1.Job, n)
	err := Parallel(ctx, n, concurrency, func(ctx context.Context, i int) error {
		r := req(i)
		resp, err := cl.CreateJob(ctx, r)
		if err != nil {
			return fmt.Errorf("harness: create job %d (%s): %w", i, r.GetJob().GetName(), err)
		}
		jobs[i] = resp.GetJob()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// Slot is one firing a target is expected to receive.
type Slot struct {
	JobID     uuid.UUID
	Scheduled time.Time // the slot
	FireAt    time.Time // the slot plus the job's deterministic jitter
	Priority  sundialv1.Priority
	Via       Via
}

// Expected is a set of slots by execution id.
type Expected map[uuid.UUID]Slot

// AddJob adds every slot job fires from from through until (both
// inclusive; a zero from means from the job's next_fire_time), computed
// with the engine the services use, from the job as the api returned it.
// It returns how many slots it added.
func (e Expected) AddJob(job *sundialv1.Job, from, until time.Time) (int, error) {
	id, err := uuid.Parse(job.GetId())
	if err != nil {
		return 0, fmt.Errorf("harness: job id %q: %w", job.GetId(), err)
	}
	if job.GetNextFireTime() == nil {
		return 0, nil
	}
	sched, err := jobspec.Schedule(job, job.GetCreateTime().AsTime())
	if err != nil {
		return 0, fmt.Errorf("harness: schedule of %s: %w", job.GetId(), err)
	}
	via := ViaHTTP
	if job.GetTarget().GetKafka() != nil {
		via = ViaKafka
	}
	maxJitter := job.GetMaxJitter().AsDuration()
	slot := job.GetNextFireTime().AsTime()
	if slot.Before(from) {
		slot = sched.Next(from.Add(-time.Nanosecond))
	}
	n := 0
	for ; !slot.IsZero() && !slot.After(until); slot = sched.Next(slot) {
		e[firing.ExecutionID(id, slot)] = Slot{
			JobID:     id,
			Scheduled: slot,
			FireAt:    slot.Add(firing.Jitter(id, slot, maxJitter)),
			Priority:  firing.Normalize(job.GetPriority()),
			Via:       via,
		}
		n++
	}
	return n, nil
}

// Filter is the subset of e whose slots keep accepts.
func (e Expected) Filter(keep func(Slot) bool) Expected {
	out := Expected{}
	for id, s := range e {
		if keep(s) {
			out[id] = s
		}
	}
	return out
}
