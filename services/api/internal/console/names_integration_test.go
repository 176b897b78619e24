//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// createJobs makes acme's jobs of these names (an hourly webhook each).
func createJobs(t *testing.T, api *apitest.API, names ...string) map[string]*sundialv1.Job {
	t.Helper()
	jobs := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme))
	out := map[string]*sundialv1.Job{}
	for _, n := range names {
		got, err := jobs.CreateJob(context.Background(), &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: n,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/" + n}}}}})
		if err != nil {
			t.Fatal(err)
		}
		out[n] = got.GetJob()
	}
	return out
}

// manyDeadLetters copies the dead letter of one execution n times under
// new execution ids, older than it, as a worker would have written them.
func manyDeadLetters(t *testing.T, api *apitest.API, execID string, n int) {
	t.Helper()
	if _, err := api.Pool.Exec(context.Background(), `
		INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at, target_host)
		SELECT gen_random_uuid(), tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at - i * interval '1 second', target_host
		  FROM dead_letters, generate_series(1, $2) i WHERE execution_id = $1`, execID, n); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationConsoleJobNamesAndDeadLetterGroups: dead letters, their
// detail, executions and the overview show a job's name linked to its
// page; the dead-letter and execution filters take an id or the start of
// a name (one match filters, several are offered, none says so); the
// dead-letter groups count everything the filter matches (1,201 dead
// letters of one job, more than the 1,000 the groups used to sample).
func TestIntegrationConsoleJobNamesAndDeadLetterGroups(t *testing.T) {
	api := startConsole(t, true)
	jobs := createJobs(t, api, "billing-nightly", "billing-hourly", "reports-weekly")
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	billing := api.DeadLetter(t, jobs["billing-nightly"], slot, "http_5xx")
	manyDeadLetters(t, api, billing, 1200)
	reports := api.DeadLetter(t, jobs["reports-weekly"], slot.Add(time.Minute), "timeout")
	manyDeadLetters(t, api, reports, 29)
	// A purged job's dead letter: shown by its id.
	ghost := &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: "ghost",
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/ghost"}}}}
	api.DeadLetter(t, ghost, slot.Add(2*time.Minute), "timeout")

	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	get := func(path string) string {
		t.Helper()
		code, page, _ := b.do("GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.500s", path, code, page)
		}
		return page
	}
	link := func(j *sundialv1.Job) string { return `<a href="/jobs/` + j.GetId() + `">` + j.GetName() + `</a>` }

	page := get("/dead-letters")
	if !strings.Contains(page, `<td class="job">`+link(jobs["reports-weekly"])) {
		t.Errorf("the dead-letter list does not name the job: %s", page)
	}
	if !strings.Contains(page, `<a href="/jobs/`+ghost.GetId()+`"><span class="mono">`+ghost.GetId()+`</span></a>`) {
		t.Error("a purged job's dead letter is not shown by its id")
	}
	// Groups over all 1,232: counted in the database.
	if !regexp.MustCompile(`(?s)id="groups-job".*billing-nightly</a></td><td class="count">1201</td>.*reports-weekly</a></td><td class="count">30</td>`).MatchString(page) {
		t.Errorf("the job groups do not count every match: %s", page)
	}
	if !regexp.MustCompile(`(?s)id="groups-class".*http_5xx</a></td><td class="count">1201</td>.*timeout</a></td><td class="count">31</td>`).MatchString(page) ||
		!strings.Contains(page, "over all 1232 dead letter(s) the filter matches") {
		t.Errorf("the class groups do not count every match: %s", page)
	}
	// The groups follow the filter (class timeout: reports and the ghost).
	page = get("/dead-letters?class=timeout")
	if !strings.Contains(page, "over all 31 dead letter(s)") || strings.Contains(page, ">billing-nightly</a></td><td class=\"count\">") {
		t.Errorf("class-filtered groups: %s", page)
	}

	// The job filter: a name's start, any case.
	page = get("/dead-letters?job=BILLING-")
	if !strings.Contains(page, `id="job-choices"`) || !strings.Contains(page, ">billing-hourly</a>") || !strings.Contains(page, ">billing-nightly</a>") ||
		strings.Contains(page, "reports-weekly") || strings.Contains(page, `id="dead-letters"`) {
		t.Errorf("two matches are not offered: %s", page)
	}
	page = get("/dead-letters?job=billing-n")
	if !strings.Contains(page, `id="job-filter">Job `+link(jobs["billing-nightly"])) || strings.Contains(page, "reports-weekly") ||
		!strings.Contains(page, `name="job" value="`+jobs["billing-nightly"].GetId()+`"`) {
		t.Errorf("one match does not filter: %s", page)
	}
	page = get("/dead-letters?job=" + jobs["reports-weekly"].GetId())
	if !strings.Contains(page, `id="job-filter">Job `+link(jobs["reports-weekly"])) || strings.Contains(page, ">billing-nightly</a></td>") {
		t.Errorf("an id does not filter: %s", page)
	}
	page = get("/dead-letters?job=nosuch")
	if !strings.Contains(page, "No job's name starts with") {
		t.Errorf("no match is not said: %s", page)
	}

	// Detail and overview.
	page = get("/dead-letters/" + billing)
	if !strings.Contains(page, `<dd class="job">`+link(jobs["billing-nightly"])) {
		t.Errorf("the dead letter's page does not name its job: %s", page)
	}
	page = get("/")
	if !strings.Contains(page, `<td class="job">`+link(jobs["reports-weekly"])) && !strings.Contains(page, `<td class="job">`+link(jobs["billing-nightly"])) {
		t.Errorf("the overview does not name the jobs: %s", page)
	}
	// The newest dead letters are inside the live part, updated with the
	// tiles (the tile once said 17 above an empty table).
	if i, j := strings.Index(page, `id="live"`), strings.Index(page, `id="recent-dead-letters"`); i < 0 || j < i {
		t.Error("the newest dead letters are not in the live part of the overview")
	}

	// Executions: names, and the job filter over the job's own history.
	for i, j := range []*sundialv1.Job{jobs["billing-nightly"], jobs["reports-weekly"]} {
		at := slot.Add(time.Duration(i) * time.Minute)
		if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{
			ExecutionId: uuid.NewString(), JobId: j.GetId(), Tenant: "acme", Attempt: 1,
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at),
		}); err != nil {
			t.Fatal(err)
		}
	}
	page = get("/executions")
	if !strings.Contains(page, `<td class="job">`+link(jobs["billing-nightly"])) || !strings.Contains(page, `<td class="job">`+link(jobs["reports-weekly"])) {
		t.Errorf("executions do not name their jobs: %s", page)
	}
	page = get("/executions?" + url.Values{"job": {"reports"}}.Encode())
	if !strings.Contains(page, `<td class="job">`+link(jobs["reports-weekly"])) || strings.Contains(page, `<td class="job">`+link(jobs["billing-nightly"])) {
		t.Errorf("the executions' job filter: %s", page)
	}
	page = get("/executions?" + url.Values{"job": {"reports"}, "status": {"failed"}}.Encode())
	if strings.Contains(page, `<td class="job">`) {
		t.Errorf("the executions' job filter ignores the statuses: %s", page)
	}
}

// dial is a gRPC connection to the api with a tenant's token.
func dial(t *testing.T, api *apitest.API, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
