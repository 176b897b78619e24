//go:build integration

package apitest_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// pkg/client against the real api over real Postgres and Redis: the
// idempotency key, field errors, paging and tenant scoping.
func TestIntegrationGoClient(t *testing.T) {
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

	spec := func(name string) *sundialv1.Job {
		return &sundialv1.Job{Name: name,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}
	}
	first, err := acme.CreateJob(ctx, spec("one"), "deploy-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := acme.CreateJob(ctx, spec("one"), "deploy-1")
	if err != nil || again.GetId() != first.GetId() || again.GetName() != "one" {
		t.Fatalf("same key: %v %v", again, err)
	}
	// The key with another job is refused (and not retried).
	if _, err := acme.CreateJob(ctx, spec("one-renamed"), "deploy-1"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same key, another job: %v", err)
	}
	for i := range 3 {
		if _, err := acme.CreateJob(ctx, spec("more"), ""); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	n := 0
	for _, err := range acme.Jobs(ctx, client.ListFilter{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("acme lists %d jobs, want 4", n)
	}
	for j, err := range globex.Jobs(ctx, client.ListFilter{}) {
		t.Fatalf("globex sees %v %v", j, err)
	}
	bad := spec("bad")
	bad.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}
	_, err = acme.CreateJob(ctx, bad, "")
	if vs := client.FieldViolations(err); len(vs) != 1 || vs[0].Field != "schedule.cron" {
		t.Fatalf("field violations of %v: %v", err, vs)
	}
	paused, err := acme.PauseJob(ctx, first.GetId())
	if err != nil || paused.GetStatus() != sundialv1.JobStatus_JOB_STATUS_PAUSED {
		t.Fatalf("pause: %v %v", paused, err)
	}
}
