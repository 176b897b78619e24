//go:build integration

package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// fieldViolations are the google.rpc.BadRequest field violations of an
// HTTP error body.
func fieldViolations(body map[string]any) []map[string]any {
	var out []map[string]any
	details, _ := body["details"].([]any)
	for _, d := range details {
		vs, _ := d.(map[string]any)["field_violations"].([]any)
		for _, v := range vs {
			out = append(out, v.(map[string]any))
		}
	}
	return out
}

// Over HTTP/JSON, as over gRPC: a target URL that could not be sent as
// written is a 400 naming target.http.url and what is wrong, at create
// (POST) and at update (PATCH), and writes nothing; the same URL with its
// space escaped is accepted and stored as written.
func TestIntegrationHTTPTargetURLChecked(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	jobWith := func(url string) string {
		u, _ := json.Marshal(url)
		return `{"job": {"name": "report", "schedule": {"cron": "@hourly"}, "target": {"http": {"url": ` + string(u) + `}}}}`
	}
	count := func() (n int) {
		if err := api.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM job_audit) + (SELECT count(*) FROM outbox)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	refused := func(what string, code int, got map[string]any, want string) {
		t.Helper()
		vs := fieldViolations(got)
		if code != 400 || got["code"] != float64(3) || len(vs) != 1 || vs[0]["field"] != "target.http.url" ||
			!strings.Contains(vs[0]["description"].(string), want) || !strings.Contains(got["message"].(string), "target.http.url: ") {
			t.Fatalf("%s: %d %v, want 400 naming target.http.url saying %q", what, code, got, want)
		}
	}
	bad := []struct{ url, want string }{
		{"http://127.0.0.1:18500/x?q=a b", "contains a space at character 29"},
		{"http://127.0.0.1:18500/x?q=%4", `bad percent-escape "%4"`},
		{"reports.example/run", "has no scheme"},
		{"gopher://reports.example/run", `the scheme is "gopher"`},
		{"http://reports.example:99999/run", `port "99999"`},
	}
	for _, c := range bad {
		code, got, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, jobWith(c.url))
		refused("create "+c.url, code, got, c.want)
	}
	if n := count(); n != 0 {
		t.Fatalf("refused creates wrote %d rows", n)
	}

	code, created, _ := call(t, api, "POST", "/v1/jobs", apitest.TokenAcme, jobWith("http://127.0.0.1:18500/x?q=a%20b"))
	if code != 200 || job(created)["target"].(map[string]any)["http"].(map[string]any)["url"] != "http://127.0.0.1:18500/x?q=a%20b" {
		t.Fatalf("create with an escaped space: %d %v", code, created)
	}
	id := job(created)["id"].(string)
	before := count()
	for _, c := range bad {
		u, _ := json.Marshal(c.url)
		code, got, _ := call(t, api, "PATCH", "/v1/jobs/"+id, apitest.TokenAcme, `{"target": {"http": {"url": `+string(u)+`}}}`)
		refused("update "+c.url, code, got, c.want)
	}
	if n := count(); n != before {
		t.Fatalf("refused updates wrote: %d rows, then %d", before, n)
	}
	if code, got, _ := call(t, api, "GET", "/v1/jobs/"+id, apitest.TokenAcme, ""); code != 200 || job(got)["version"] != "1" ||
		job(got)["target"].(map[string]any)["http"].(map[string]any)["url"] != "http://127.0.0.1:18500/x?q=a%20b" {
		t.Fatalf("the job changed: %d %v", code, got)
	}
}
