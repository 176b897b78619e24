//go:build integration

package apitest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// pkg/client's BulkJobs against the real api: a dry run counts, the pause
// goes over more jobs than one call takes (1,000), a repeat changes
// nothing, and another tenant's filter reaches none of them; the
// next-fire bounds filter the list.
func TestIntegrationGoClientBulk(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	globex, err := client.New(api.GRPCAddr, apitest.TokenGlobex, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer globex.Close()

	// More jobs than one BulkJobAction call of the client's takes.
	billing := map[string]string{"team": "billing"}
	for i := range 1500 {
		if _, err := acme.CreateJob(ctx, &sundialv1.Job{Name: "job-" + strconv.Itoa(i), Labels: billing,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@daily"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}, ""); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	f := client.ListFilter{Labels: billing}
	dry, err := acme.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, f, true)
	if err != nil || dry.Matched != 1500 || dry.Changed != 0 || len(dry.Sample) != 20 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if res, err := globex.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, f, false); err != nil || res.Matched != 0 {
		t.Fatalf("globex pauses: %+v %v", res, err)
	}
	start := time.Now()
	res, err := acme.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, f, false)
	if err != nil || res.Matched != 1500 || res.Changed != 1500 || len(res.Refused) != 0 {
		t.Fatalf("pause: %+v %v", res, err)
	}
	t.Logf("paused 1,500 jobs in %s", time.Since(start).Round(time.Millisecond))
	paused := 0
	for _, err := range acme.Jobs(ctx, client.ListFilter{Status: sundialv1.JobStatus_JOB_STATUS_PAUSED, PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if paused != 1500 {
		t.Fatalf("%d paused", paused)
	}
	if again, err := acme.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, f, false); err != nil || again.Changed != 0 || again.Matched != 1500 {
		t.Fatalf("again: %+v %v", again, err)
	}
	res, err = acme.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_RESUME, client.ListFilter{Status: sundialv1.JobStatus_JOB_STATUS_PAUSED}, false)
	if err != nil || res.Changed != 1500 {
		t.Fatalf("resume: %+v %v", res, err)
	}
	// @daily: every job's next fire is the coming midnight, UTC.
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	n := 0
	for _, err := range acme.Jobs(ctx, client.ListFilter{NextFireAfter: midnight, NextFireBefore: midnight.Add(time.Second), PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1500 {
		t.Fatalf("%d jobs fire at %s", n, midnight)
	}
	for j, err := range acme.Jobs(ctx, client.ListFilter{NextFireBefore: midnight}) {
		t.Fatalf("a job fires before midnight: %v %v", j, err)
	}
	// By priority: every job has the default, MEDIUM.
	n = 0
	for _, err := range acme.Jobs(ctx, client.ListFilter{Priority: sundialv1.Priority_PRIORITY_MEDIUM, PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1500 {
		t.Fatalf("%d medium jobs, want 1500", n)
	}
	for j, err := range acme.Jobs(ctx, client.ListFilter{Priority: sundialv1.Priority_PRIORITY_HIGH}) {
		t.Fatalf("a high job: %v %v", j, err)
	}
	if dry, err := acme.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, client.ListFilter{Labels: billing, Priority: sundialv1.Priority_PRIORITY_HIGH}, true); err != nil || dry.Matched != 0 {
		t.Fatalf("dry run of high billing jobs: %+v %v", dry, err)
	}
}
