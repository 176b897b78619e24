//go:build integration

package apitest_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// rows counts what a create or an update writes: jobs, their audit trail
// and the outbox (each API has a schema of its own).
func rows(t *testing.T, api *apitest.API) [3]int {
	t.Helper()
	var n [3]int
	err := api.Pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_audit), (SELECT count(*) FROM outbox)`).Scan(&n[0], &n[1], &n[2])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// refusedOn fails t unless err is InvalidArgument with exactly one field
// violation, on field, whose description contains want.
func refusedOn(t *testing.T, err error, field, want string) {
	t.Helper()
	vs := client.FieldViolations(err)
	if status.Code(err) != codes.InvalidArgument || len(vs) != 1 || vs[0].Field != field || !strings.Contains(vs[0].Description, want) {
		t.Fatalf("got %v (violations %v), want InvalidArgument on %s saying %q", err, vs, field, want)
	}
}

// A target URL the worker could not send as written (a space, a bad
// escape, a fragment, credentials, a host without a scheme...) is refused
// over gRPC at create and at update, naming target.http.url and what is
// wrong, and nothing is written: no job, no audit row, no outbox row, the
// job unchanged. The URL with its space escaped is accepted. A job stored
// before the check (its spec written straight to Postgres here) cannot be
// updated until its URL is fixed, and then can.
func TestIntegrationTargetURLChecked(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	spec := func(url string) *sundialv1.Job {
		return &sundialv1.Job{Name: "report",
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: url}}}}
	}
	bad := []struct{ url, want string }{
		{"http://127.0.0.1:18500/x?q=a b", "contains a space at character 29: percent-encode it as %20"},
		{"http://127.0.0.1:18500/x?q=%zz", `bad percent-escape "%zz"`},
		{"http://127.0.0.1:18500/x#part", "has a fragment"},
		{"127.0.0.1:18500/x", "has no scheme"},
		{"https://user:pass@reports.example/run", "must not contain credentials"},
		{"http://reports.example/caf\u00e9", "non-ASCII character"},
		{"http://reports.example/a\nb", "control character"},
	}
	for _, c := range bad {
		_, err := acme.CreateJob(ctx, spec(c.url), "")
		refusedOn(t, err, "target.http.url", c.want)
	}
	if n := rows(t, api); n != [3]int{} {
		t.Fatalf("refused creates wrote jobs, audit and outbox rows %v", n)
	}

	job, err := acme.CreateJob(ctx, spec("http://127.0.0.1:18500/x?q=a%20b"), "")
	if err != nil {
		t.Fatalf("the escaped URL: %v", err)
	}
	if got := job.GetTarget().GetHttp().GetUrl(); got != "http://127.0.0.1:18500/x?q=a%20b" {
		t.Fatalf("stored URL %q", got)
	}
	before := rows(t, api)
	for _, c := range bad {
		_, err := acme.UpdateJob(ctx, &sundialv1.Job{Id: job.GetId(), Target: spec(c.url).Target}, "target.http.url")
		refusedOn(t, err, "target.http.url", c.want)
		_, err = acme.UpdateJob(ctx, &sundialv1.Job{Id: job.GetId(), CallbackUrl: c.url}, "callback_url")
		refusedOn(t, err, "callback_url", c.want)
	}
	if after := rows(t, api); after != before {
		t.Fatalf("refused updates wrote: rows %v, then %v", before, after)
	}
	if now, err := acme.GetJob(ctx, job.GetId()); err != nil || now.GetVersion() != job.GetVersion() ||
		now.GetTarget().GetHttp().GetUrl() != job.GetTarget().GetHttp().GetUrl() || now.GetCallbackUrl() != "" {
		t.Fatalf("the job changed: %v %v", now, err)
	}

	// Stored before the api checked URLs: any update names the URL until
	// it is fixed.
	stored := proto.Clone(job).(*sundialv1.Job)
	stored.GetTarget().GetHttp().Url = "http://127.0.0.1:18500/x?q=a b"
	b, err := proto.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pool.Exec(ctx, `UPDATE jobs SET spec = $1 WHERE id = $2`, b, job.GetId()); err != nil {
		t.Fatal(err)
	}
	_, err = acme.UpdateJob(ctx, &sundialv1.Job{Id: job.GetId(), Labels: map[string]string{"team": "billing"}}, "labels")
	refusedOn(t, err, "target.http.url", "contains a space")
	fixed, err := acme.UpdateJob(ctx, &sundialv1.Job{Id: job.GetId(), Target: spec("http://127.0.0.1:18500/x?q=a%20b").Target}, "target.http.url")
	if err != nil || fixed.GetTarget().GetHttp().GetUrl() != "http://127.0.0.1:18500/x?q=a%20b" || fixed.GetVersion() != job.GetVersion()+1 {
		t.Fatalf("fixing the URL: %v %v", fixed, err)
	}
}
