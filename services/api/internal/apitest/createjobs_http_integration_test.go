//go:build integration

package apitest_test

import (
	"net/http"
	"testing"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// CreateJobs over the HTTP/JSON API: POST /v1/jobs:batchCreate creates
// the items, and a bad item is 400 naming its index and field.
func TestIntegrationCreateJobsOverHTTP(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	item := func(name, cron string) string {
		return `{"idempotency_key":"` + name + `","job":{"name":"` + name + `","schedule":{"cron":"` + cron + `"},"target":{"http":{"url":"http://127.0.0.1:9/hook"}}}}`
	}
	code, _, out := post(t, api, "/v1/jobs:batchCreate", apitest.TokenAcme, []byte(`{"items":[`+item("a", "@hourly")+`,`+item("b", "bad")+`]}`))
	details, _ := out["details"].([]any)
	if code != http.StatusBadRequest || len(details) == 0 || !badRequestJSONNames(details, "items[1].schedule.cron") {
		t.Fatalf("bad item: %d %v", code, out)
	}
	code, _, out = post(t, api, "/v1/jobs:batchCreate", apitest.TokenAcme, []byte(`{"mode":"CREATE_JOBS_MODE_PER_ITEM","items":[`+item("a", "@hourly")+`,`+item("b", "bad")+`]}`))
	results, _ := out["results"].([]any)
	if code != http.StatusOK || len(results) != 2 || out["created"] != float64(1) || out["refused"] != float64(1) {
		t.Fatalf("per item: %d %v", code, out)
	}
	code, _, out = post(t, api, "/v1/jobs:batchCreate", apitest.TokenAcme, []byte(`{"items":[`+item("a", "@hourly")+`]}`))
	if code != http.StatusOK || out["replayed"] != float64(1) {
		t.Fatalf("repeat: %d %v", code, out)
	}
}

// badRequestJSONNames says whether a google.rpc.Status's details, as JSON,
// hold a BadRequest naming field.
func badRequestJSONNames(details []any, field string) bool {
	for _, d := range details {
		m, _ := d.(map[string]any)
		vs, _ := m["fieldViolations"].([]any)
		if vs == nil {
			vs, _ = m["field_violations"].([]any)
		}
		for _, v := range vs {
			if fv, _ := v.(map[string]any); fv["field"] == field {
				return true
			}
		}
	}
	return false
}
