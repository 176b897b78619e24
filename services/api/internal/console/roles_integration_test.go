//go:build integration

package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// readOnlySetup makes acme a job and a read-only token over the api.
func readOnlySetup(t *testing.T, api *apitest.API) (jobID, secret string) {
	t.Helper()
	ctx := context.Background()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(apitest.TokenAcme)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	job, err := sundialv1.NewJobServiceClient(conn).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: "nightly-report",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "*/20 * * * * *"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	made, err := sundialv1.NewTokenServiceClient(conn).CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: "viewer", Role: sundialv1.Role_ROLE_TENANT_READ_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	return job.GetJob().GetId(), made.GetSecret()
}

// The write controls of the job page, the jobs list, the dead-letter
// list and the menu, by the id or text the templates give them.
var writeControls = []string{`id="pause"`, `id="trigger"`, `id="backfill"`, `id="edit"`, `id="delete"`, `href="/jobs/new"`,
	`id="bulk-pause"`, `id="filter-pause"`, `id="redrive"`, `id="redrive-all"`}

// TestIntegrationConsoleRolesInTheUI: the header names tenant and role;
// a read-only session is drawn no write control on any page, and every
// write — its form pages, its confirmations and the backfill dry run
// included — is answered 403 naming the role, with nothing changed. An
// admin is drawn them all; an operator the re-drive but not the job's.
func TestIntegrationConsoleRolesInTheUI(t *testing.T) {
	api := startConsole(t, true)
	jobID, secret := readOnlySetup(t, api)
	jobPath := "/jobs/" + jobID

	pages := func(b *browser) string {
		var all strings.Builder
		for _, p := range []string{"/", "/jobs", jobPath, "/dead-letters", "/executions"} {
			code, body, _ := b.do("GET", p, nil)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d", p, code)
			}
			all.WriteString(body)
		}
		return all.String()
	}

	admin := newBrowser(t, api)
	admin.signIn(apitest.TokenAcme)
	all := pages(admin)
	if !strings.Contains(all, `tenant <strong>acme</strong> as acme/ops, role <strong id="role">admin</strong>`) {
		t.Fatal("the admin's header does not name tenant and role")
	}
	for _, c := range []string{`id="pause"`, `id="trigger"`, `id="backfill"`, `id="edit"`, `id="delete"`, `href="/jobs/new"`, `id="bulk-pause"`, `id="filter-pause"`} {
		if !strings.Contains(all, c) {
			t.Errorf("the admin is not drawn %s", c)
		}
	}

	viewer := newBrowser(t, api)
	viewer.signIn(secret)
	all = pages(viewer)
	if !strings.Contains(all, `tenant <strong>acme</strong> as acme/viewer, role <strong id="role">read-only</strong>`) {
		t.Fatalf("the read-only header does not name tenant and role")
	}
	for _, c := range writeControls {
		if strings.Contains(all, c) {
			t.Errorf("a read-only session is drawn %s", c)
		}
	}
	_, page, _ := viewer.do("GET", jobPath, nil)
	tok := csrf(t, page)
	refused := func(method, path string, form url.Values, call string) {
		t.Helper()
		if form != nil {
			form.Set("csrf", tok)
		}
		code, body, _ := viewer.do(method, path, form)
		if code != http.StatusForbidden || !strings.Contains(body, "role read-only may not call sundial.v1."+call) {
			t.Errorf("%s %s: %d, want 403 naming the role and %s; %.300s", method, path, code, call, body)
		}
	}
	refused("GET", "/jobs/new", nil, "JobService/CreateJob")
	refused("POST", "/jobs/new", url.Values{"name": {"x"}, "cron": {"@hourly"}}, "JobService/CreateJob")
	refused("GET", jobPath+"/edit", nil, "JobService/UpdateJob")
	refused("POST", jobPath+"/edit", url.Values{"name": {"renamed"}}, "JobService/UpdateJob")
	refused("GET", jobPath+"/confirm?action=pause", nil, "JobService/PauseJob")
	refused("GET", jobPath+"/confirm?action=delete", nil, "JobService/DeleteJob")
	refused("POST", jobPath+"/trigger", url.Values{}, "JobService/TriggerJob")
	refused("GET", jobPath+"/backfill", nil, "JobService/BackfillJob")
	// The dry run: 400 before (a form error), 403 now.
	refused("POST", jobPath+"/backfill", url.Values{"from": {"2026-11-20T00:00:00"}, "to": {"2026-11-20T01:00:00"}, "rate": {"10"}}, "JobService/BackfillJob")
	refused("POST", "/jobs/bulk", url.Values{"action": {"pause"}, "id": {jobID}}, "JobService/BulkJobAction")
	refused("POST", "/dead-letters/redrive", url.Values{"id": {"00000000-0000-0000-0000-000000000001"}}, "DeadLetterService/RedriveDeadLetters")

	// The HTTP/JSON API on the same listener refuses the dry run alike.
	req, err := http.NewRequest("POST", "http://"+api.HTTPAddr+"/v1/jobs/"+jobID+":backfill",
		strings.NewReader(`{"start_time": "2026-11-20T00:00:00Z", "end_time": "2026-11-20T01:00:00Z", "dry_run": true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(raw), "role read-only may not call sundial.v1.JobService/BackfillJob") {
		t.Errorf("HTTP API backfill dry run as read-only: %d %s", resp.StatusCode, raw)
	}

	_, page, _ = viewer.do("GET", jobPath, nil)
	if !strings.Contains(page, "nightly-report") || !strings.Contains(page, `id="job-status">active</span>`) {
		t.Fatalf("after the refusals the job is not active and unchanged")
	}

	// An operator re-drives (any tenant's, named) but does not change jobs.
	op := newBrowser(t, api)
	op.signIn(apitest.TokenOperator)
	code, body, _ := op.do("GET", "/", nil)
	if code != http.StatusOK || !strings.Contains(body, `role <strong id="role">operator</strong>`) || strings.Contains(body, `href="/jobs/new"`) {
		t.Fatalf("operator overview: %d", code)
	}
}
