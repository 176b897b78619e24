//go:build integration

package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// The form's webhook URL goes through the api's one URL check: a URL the
// worker could not send as written (here a space in the query, a bad
// escape, a host without a scheme) comes back with the api's reason beside
// the URL field and the value kept, at create and at edit, and nothing is
// written; the URL with its space escaped is accepted.
func TestIntegrationConsoleFormTargetURL(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	form := func(u string) url.Values {
		return url.Values{"csrf": {token}, "name": {"report"}, "cron": {"@hourly"}, "timezone": {"UTC"}, "kind": {"http"}, "url": {u}}
	}
	beside := func(body string) string {
		m := regexp.MustCompile(`<p class="field-error" id="url-error">([^<]*)</p>`).FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return html.UnescapeString(m[1])
	}
	jobs := func() (n int) {
		if err := api.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM job_audit)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	bad := []struct{ url, want string }{
		{"http://127.0.0.1:18500/x?q=a b", "target.http.url: contains a space at character 29: percent-encode it as %20"},
		{"http://127.0.0.1:18500/x?q=%zz", `target.http.url: has a bad percent-escape "%zz"`},
		{"reports.example/run", "target.http.url: must be an absolute http or https URL: it has no scheme"},
	}
	for _, c := range bad {
		code, body, _ := acme.do("POST", "/jobs/new", form(c.url))
		if code != http.StatusBadRequest || !strings.HasPrefix(beside(body), c.want) {
			t.Fatalf("create with %q: %d, beside the URL %q, want %q…", c.url, code, beside(body), c.want)
		}
		if !strings.Contains(body, `name="url" value="`+html.EscapeString(c.url)+`"`) {
			t.Fatalf("the refused form lost the URL %q", c.url)
		}
	}
	if n := jobs(); n != 0 {
		t.Fatalf("refused creates wrote %d rows", n)
	}

	code, _, h := acme.do("POST", "/jobs/new", form("http://127.0.0.1:18500/x?q=a%20b"))
	if code != http.StatusSeeOther {
		t.Fatalf("create with the space escaped: %d", code)
	}
	id := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	_, edit, _ := acme.do("GET", "/jobs/"+id+"/edit", nil)
	v := formValues(edit)
	v.Set("url", "http://127.0.0.1:18500/y?q=a b")
	code, body, _, _ := acme.edit(id, v)
	if want := bad[0].want; code != http.StatusBadRequest || !strings.HasPrefix(beside(body), want) {
		t.Fatalf("edit to a URL with a space: %d, beside the URL %q, want %q…", code, beside(body), want)
	}
	j, err := api.Store.Get(context.Background(), "acme", id)
	if err != nil || j.GetVersion() != 1 || j.GetTarget().GetHttp().GetUrl() != "http://127.0.0.1:18500/x?q=a%20b" {
		t.Fatalf("after the refused edit: %v %v", j, err)
	}
}
