package firing_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// What the prefetcher does for one slot of a job: derive the execution id
// and the jittered fire instant, and build the whole envelope.
func ExampleNew() {
	job := &sundialv1.Job{
		Id: "0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", Tenant: "acme", Version: 3,
		MaxJitter: durationpb.New(time.Second),
		Target:    &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/run", Method: "post"}}},
	}
	slot := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	id := uuid.MustParse(job.GetId())
	f := firing.New(job, firing.Attempt{
		Origin:      sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE,
		ExecutionID: firing.ExecutionID(id, slot).String(),
		Scheduled:   slot,
		Fire:        slot.Add(firing.Jitter(id, slot, job.GetMaxJitter().AsDuration())),
		Number:      1, FirstAttempt: 1,
		Staged: slot.Add(-2 * time.Minute),
	})
	fmt.Println(f.GetFireTime().AsTime().Sub(slot), f.GetPriority(), f.GetTarget().GetHttp().GetMethod(), f.GetRetry().GetMaxAttempts())

	// A failed attempt's retry is the next attempt of the same execution.
	next := firing.NextAttempt(f, slot.Add(5*time.Second), slot.Add(time.Second))
	fmt.Println(next.GetExecutionId() == f.GetExecutionId(), next.GetAttempt(), next.GetOrigin())
	// Output:
	// 282ms PRIORITY_MEDIUM POST 1
	// true 2 FIRING_ORIGIN_RETRY
}

// The one mapping of the status words to what each store keeps.
func ExampleExecutionStatusCQL() {
	s := sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED
	fmt.Println(firing.ExecutionStatusCQL(s), firing.ExecutionStatusSQL(s), firing.ExecutionStatusWord(s))
	fmt.Println(firing.JobStatusSQL(sundialv1.JobStatus_JOB_STATUS_COMPLETED))
	// Output:
	// EXECUTION_STATUS_RETRY_SCHEDULED 6 retry_scheduled
	// completed
}
