//go:build integration

package apitest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// Jobs whose cron has H are created on the real api (Postgres): each gets
// the next instant its own id hashes to — the one jobspec.Schedule (what
// the prefetcher stages from) computes from the stored job — and ten such
// jobs spread over the hour instead of sharing minute 0.
func TestIntegrationHashedCronJobs(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	minutes := map[int]bool{}
	for i := range 10 {
		j := cronJob(fmt.Sprint("hashed-", i))
		j.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "H * * * *"}
		resp, err := c.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j})
		if err != nil {
			t.Fatalf("create hashed-%d: %v", i, err)
		}
		got := resp.GetJob()
		sch, err := jobspec.Schedule(got, got.GetCreateTime().AsTime())
		if err != nil {
			t.Fatalf("schedule of the stored job: %v", err)
		}
		next := got.GetNextFireTime().AsTime()
		if want := sch.Next(next.Add(-time.Hour)); !want.Equal(next) {
			t.Fatalf("job %s: next fire %v, its own schedule says %v", got.GetId(), next, want)
		}
		minutes[next.Minute()] = true
	}
	if len(minutes) < 5 {
		t.Fatalf("ten H * * * * jobs landed on %d distinct minutes, want them spread", len(minutes))
	}
}
