//go:build integration

package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// A running execution in a job's history has a Cancel link: confirmed, it
// asks the api to cancel the execution on behalf of the signed-in user and
// says so; the execution's row is unchanged until its worker records it.
func TestIntegrationConsoleCancelsAnExecution(t *testing.T) {
	api := startConsole(t, true)
	req, _ := http.NewRequest("POST", "http://"+api.HTTPAddr+"/v1/jobs", strings.NewReader(
		`{"job": {"name": "slow", "schedule": {"cron": "@hourly"}, "target": {"http": {"url": "https://slow.example/run"}}}}`))
	req.Header.Set("Authorization", "Bearer "+apitest.TokenAcme)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Job struct{ ID string } `json:"job"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || created.Job.ID == "" {
		t.Fatalf("create: %v %v", resp.Status, err)
	}
	jobID, exec, done := created.Job.ID, uuid.NewString(), uuid.NewString()
	now := time.Now()
	for id, st := range map[string]sundialv1.ExecutionStatus{exec: sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, done: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED} {
		if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{ExecutionId: id, JobId: jobID, Tenant: "acme", Attempt: 1,
			Status: st, ScheduledTime: timestamppb.New(now), FireTime: timestamppb.New(now), FenceToken: 1}); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	code, page, _ := b.do("GET", "/jobs/"+jobID, nil)
	link := "/jobs/" + jobID + "/confirm?action=cancel&amp;execution=" + exec
	if code != http.StatusOK || !strings.Contains(page, link) || strings.Contains(page, "execution="+done) {
		t.Fatalf("job page %d: want a Cancel link for the running execution only: %s", code, page)
	}
	code, page, _ = b.do("GET", strings.ReplaceAll(link, "&amp;", "&"), nil)
	if code != http.StatusOK || !strings.Contains(page, "Execution "+exec+": Cancel this execution?") || !strings.Contains(page, `name="execution" value="`+exec+`"`) {
		t.Fatalf("confirm page %d: %s", code, page)
	}
	code, _, h := b.do("POST", "/jobs/"+jobID+"/cancel", url.Values{"csrf": {csrf(t, page)}, "confirm": {"yes"}, "execution": {exec}})
	if code != http.StatusSeeOther || !strings.HasPrefix(b.notice(h.Get("Location")), "Cancel requested: execution "+exec+" ") {
		t.Fatalf("cancel: %d %v", code, h)
	}
	code, page, _ = b.do("POST", "/jobs/"+jobID+"/cancel", url.Values{"csrf": {csrf(t, page)}, "confirm": {"yes"}, "execution": {done}})
	if code == http.StatusSeeOther || !strings.Contains(page, "already ended") {
		t.Fatalf("cancel of an ended execution: %d %s", code, page)
	}
}
