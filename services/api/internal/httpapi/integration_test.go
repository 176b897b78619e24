//go:build integration

package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// call sends a JSON request to the api's HTTP listener and decodes the
// answer into a generic map.
func call(t *testing.T, api *apitest.API, method, path, token, body string) (int, map[string]any, http.Header) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+api.HTTPAddr+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out, resp.Header
}

func job(v map[string]any) map[string]any {
	j, _ := v["job"].(map[string]any)
	return j
}

const nightly = `{"job": {"name": "nightly", "labels": {"team": "billing"},
  "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Paris"},
  "target": {"http": {"url": "https://reports.example/run"}},
  "payload": "eyJyZXBvcnQiOiJkYWlseSJ9"}, "idempotency_key": "deploy-42"}`

// The whole JobService lifecycle over HTTP/JSON, against real Postgres and
// Redis, through the same interceptors and handlers as gRPC.
func TestIntegrationHTTPJobLifecycle(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})

	code, created, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, nightly)
	if code != 200 || job(created)["status"] != "JOB_STATUS_ACTIVE" || job(created)["version"] != "1" {
		t.Fatalf("create: %d %v", code, created)
	}
	id := job(created)["id"].(string)
	// The idempotency key returns the first job for the same body, and
	// refuses another body (409, naming the field).
	if code, again, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, nightly); code != 200 || job(again)["id"] != id || job(again)["name"] != "nightly" {
		t.Fatalf("idempotent create: %d %v", code, again)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, strings.Replace(nightly, `"nightly"`, `"other"`, 1)); code != 409 || got["code"] != float64(6) ||
		!strings.HasPrefix(got["message"].(string), "idempotency_key: ") {
		t.Fatalf("a used key with another body: %d %v (want 409 AlreadyExists)", code, got)
	}

	if code, got, _ := call(t, api, "GET", "/v1/jobs/"+id, apitest.TokenAcme, ""); code != 200 || job(got)["name"] != "nightly" ||
		job(got)["schedule"].(map[string]any)["timezone"] != "Europe/Paris" {
		t.Fatalf("get: %d %v", code, got)
	}
	// Another tenant's job is not found, as over gRPC.
	if code, got, _ := call(t, api, "GET", "/v1/jobs/"+id, apitest.TokenGlobex, ""); code != 404 || got["code"] != float64(5) {
		t.Fatalf("get as globex: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?labels[team]=billing&status=JOB_STATUS_ACTIVE", apitest.TokenAcme, ""); code != 200 || len(got["jobs"].([]any)) != 1 {
		t.Fatalf("list by label: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?labels[team]=payments", apitest.TokenAcme, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("list by another label: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?name_contains=NIGHT", apitest.TokenAcme, ""); code != 200 || len(got["jobs"].([]any)) != 1 {
		t.Fatalf("name search: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?name_contains=daily", apitest.TokenAcme, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("name search without a match: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?name_contains="+strings.Repeat("x", 257), apitest.TokenAcme, ""); code != 400 || !strings.Contains(got["message"].(string), "name_contains") {
		t.Fatalf("a 257-character name search: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs", apitest.TokenGlobex, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("globex lists: %d %v", code, got)
	}

	// PATCH without update_mask changes the fields the body sets.
	code, updated, _ := call(t, api, "PATCH", "/v1/jobs/"+id, apitest.TokenAcme, `{"name": "renamed", "priority": "PRIORITY_HIGH"}`)
	if code != 200 || job(updated)["name"] != "renamed" || job(updated)["priority"] != "PRIORITY_HIGH" || job(updated)["version"] != "2" ||
		job(updated)["schedule"].(map[string]any)["cron"] != "0 9 * * MON-FRI" {
		t.Fatalf("patch: %d %v", code, updated)
	}
	// expected_version: a query parameter of PATCH and DELETE, a body field
	// of :pause and :resume; a stale one is 400 FailedPrecondition naming
	// the current version, and writes nothing (the audit count below).
	for _, stale := range []struct{ method, path, body string }{
		{"PATCH", "/v1/jobs/" + id + "?expected_version=1", `{"name": "lost"}`},
		{"POST", "/v1/jobs/" + id + ":pause", `{"expected_version": "1"}`},
		{"DELETE", "/v1/jobs/" + id + "?expected_version=3", ""},
	} {
		if code, got, _ := call(t, api, stale.method, stale.path, apitest.TokenAcme, stale.body); code != 400 || got["code"] != float64(9) ||
			!strings.Contains(got["message"].(string), "the job is at version 2") {
			t.Fatalf("%s %s: %d %v (want 400 FailedPrecondition naming version 2)", stale.method, stale.path, code, got)
		}
	}
	if code, got, _ := call(t, api, "PATCH", "/v1/jobs/"+id+"?expected_version=2", apitest.TokenAcme, `{"name": "renamed"}`); code != 200 || job(got)["version"] != "3" {
		t.Fatalf("patch at the expected version: %d %v", code, got)
	}
	for _, step := range []struct{ path, status string }{{":pause", "JOB_STATUS_PAUSED"}, {":resume", "JOB_STATUS_ACTIVE"}} {
		if code, got, _ := call(t, api, "POST", "/v1/jobs/"+id+step.path, apitest.TokenAcme, "{}"); code != 200 || job(got)["status"] != step.status {
			t.Fatalf("%s: %d %v", step.path, code, got)
		}
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs/"+id+":trigger", apitest.TokenAcme, "{}"); code != 200 || got["execution_id"] == "" {
		t.Fatalf("trigger: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs/"+id+"/audit", apitest.TokenAcme, ""); code != 200 || len(got["entries"].([]any)) != 6 ||
		got["entries"].([]any)[0].(map[string]any)["actor"] != "acme/ops" {
		t.Fatalf("audit: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "DELETE", "/v1/jobs/"+id, apitest.TokenAcme, ""); code != 200 || job(got)["status"] != "JOB_STATUS_DELETED" {
		t.Fatalf("delete: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs/"+id+":pause", apitest.TokenAcme, "{}"); code != 400 || got["code"] != float64(9) {
		t.Fatalf("pause a deleted job: %d %v (want 400 FailedPrecondition)", code, got)
	}

	if code, got, _ := call(t, api, "POST", "/v1/schedules:preview", apitest.TokenAcme,
		`{"schedule": {"cron": "30 2 * * *", "timezone": "America/New_York"}, "from": "2026-03-07T00:00:00Z", "count": 3}`); code != 200 ||
		!slices.Equal(got["times"].([]any), []any{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}) {
		t.Fatalf("preview: %d %v", code, got)
	}
}

// Bad input is HTTP 400 naming every field, as a google.rpc.BadRequest, and
// writes nothing; a missing or unknown token is 401 with a challenge.
func TestIntegrationHTTPErrors(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})

	code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme,
		`{"job": {"name": "bad", "schedule": {"cron": "0 0 32 * *"}, "target": {"http": {"url": "/hook"}}, "max_jitter": "120s"}}`)
	if code != 400 || got["code"] != float64(3) {
		t.Fatalf("bad job: %d %v", code, got)
	}
	var fields []string
	for _, d := range got["details"].([]any) {
		d := d.(map[string]any)
		if d["@type"] != "type.googleapis.com/google.rpc.BadRequest" {
			continue
		}
		for _, v := range d["field_violations"].([]any) {
			fields = append(fields, v.(map[string]any)["field"].(string))
		}
	}
	slices.Sort(fields)
	if !slices.Equal(fields, []string{"max_jitter", "schedule.cron", "target.http.url"}) {
		t.Fatalf("field violations %v in %v", fields, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs", apitest.TokenAcme, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("a refused create wrote: %v", got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?page_size=-1", apitest.TokenAcme, ""); code != 400 || !strings.Contains(got["message"].(string), "page_size") {
		t.Fatalf("page_size -1: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, `{"job": {"nmae": "typo"}}`); code != 400 {
		t.Fatalf("unknown JSON field: %d %v", code, got)
	}

	for _, token := range []string{"", "not-a-token"} {
		code, got, h := call(t, api, "GET", "/v1/jobs", token, "")
		if code != 401 || got["code"] != float64(16) || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("token %q: %d %v %v", token, code, got, h)
		}
	}
	// The OpenAPI document needs no token.
	if code, got, h := call(t, api, "GET", "/v1/openapi.json", "", ""); code != 200 || got["swagger"] != "2.0" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("openapi: %d %v", code, got["swagger"])
	}
}

// The dead-letter routes are scoped by tenant like the job routes.
func TestIntegrationHTTPDeadLetters(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	if code, got, _ := call(t, api, "GET", "/v1/dead-letters?filter.error_class=http_5xx", apitest.TokenAcme, ""); code != 200 || got["dead_letters"] != nil {
		t.Fatalf("list: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/dead-letters/0193a1d2-0000-7000-8000-000000000000", apitest.TokenAcme, ""); code != 404 {
		t.Fatalf("get missing: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/dead-letters:redrive", apitest.TokenAcme, `{"dry_run": true}`); code != 400 {
		t.Fatalf("redrive without a selection: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/dead-letters:redrive", apitest.TokenAcme, `{"filter": {}, "dry_run": true}`); code != 200 || got["dry_run"] != true {
		t.Fatalf("redrive dry run: %d %v", code, got)
	}
}

// Bulk actions by filter, the next-fire filter and the tenant's whole audit
// trail over HTTP/JSON.
func TestIntegrationHTTPBulkAndAudit(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	if code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, nightly); code != 200 {
		t.Fatalf("create: %d %v", code, got)
	}
	// Next fire at 08:00Z on a weekday: inside a week from now, not inside a minute.
	if code, got, _ := call(t, api, "GET", "/v1/jobs?next_fire_before=2099-01-01T00:00:00Z", apitest.TokenAcme, ""); code != 200 || len(got["jobs"].([]any)) != 1 {
		t.Fatalf("next fire before 2099: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?next_fire_after=2099-01-01T00:00:00Z", apitest.TokenAcme, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("next fire after 2099: %d %v", code, got)
	}
	// By priority (the job has the default, medium), listing and counting.
	if code, got, _ := call(t, api, "GET", "/v1/jobs?priority=PRIORITY_MEDIUM", apitest.TokenAcme, ""); code != 200 || len(got["jobs"].([]any)) != 1 {
		t.Fatalf("medium jobs: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?priority=PRIORITY_HIGH", apitest.TokenAcme, ""); code != 200 || got["jobs"] != nil {
		t.Fatalf("high jobs: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs?priority=9", apitest.TokenAcme, ""); code != 400 || !strings.Contains(got["message"].(string), "priority") {
		t.Fatalf("an unknown priority: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenAcme, `{"action": "BULK_ACTION_PAUSE", "priority": "PRIORITY_HIGH", "dry_run": true}`); code != 200 || got["matched"] != nil {
		t.Fatalf("bulk dry run of high jobs: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenAcme, `{"action": "BULK_ACTION_PAUSE", "priority": "PRIORITY_MEDIUM", "dry_run": true}`); code != 200 || got["matched"] != "1" {
		t.Fatalf("bulk dry run of medium jobs: %d %v", code, got)
	}
	const pause = `{"action": "BULK_ACTION_PAUSE", "labels": {"team": "billing"}`
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenAcme, pause+`, "dry_run": true}`); code != 200 || got["matched"] != "1" || len(got["sample"].([]any)) != 1 {
		t.Fatalf("bulk dry run: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenGlobex, pause+`}`); code != 200 || got["changed"] != nil {
		t.Fatalf("globex's bulk pause: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenAcme, pause+`}`); code != 200 || got["changed"] != "1" {
		t.Fatalf("bulk pause: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "POST", "/v1/jobs:bulk", apitest.TokenAcme, `{"labels": {"team": "billing"}}`); code != 400 || !strings.Contains(got["message"].(string), "action") {
		t.Fatalf("bulk without an action: %d %v", code, got)
	}
	code, got, _ := call(t, api, "GET", "/v1/audit", apitest.TokenAcme, "")
	if code != 200 || len(got["entries"].([]any)) != 2 || got["entries"].([]any)[0].(map[string]any)["action"] != "pause" {
		t.Fatalf("the tenant's audit trail: %d %v", code, got)
	}
	if code, got, _ := call(t, api, "GET", "/v1/audit", apitest.TokenGlobex, ""); code != 200 || got["entries"] != nil {
		t.Fatalf("globex's audit trail: %d %v", code, got)
	}
}
