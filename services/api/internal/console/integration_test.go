//go:build integration

package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
)

func startConsole(t *testing.T, ledger bool, configure ...func(*console.Config)) *apitest.API {
	api, _ := startConsoleHandler(t, ledger, configure...)
	return api
}

// startConsoleHandler is startConsole that also returns the console, to
// serve it over TLS or sweep it.
func startConsoleHandler(t *testing.T, ledger bool, configure ...func(*console.Config)) (*apitest.API, *console.Console) {
	var con *console.Console
	api := apitest.Start(t, apitest.Options{Ledger: ledger, Console: func(conn *grpc.ClientConn, tokens *auth.Tokens, pool *pgxpool.Pool) (http.Handler, error) {
		cfg := console.Config{Conn: conn, Tokens: tokens, Pool: pool}
		for _, f := range configure {
			f(&cfg)
		}
		var err error
		con, err = console.New(cfg)
		return con, err
	}})
	return api, con
}

// browser is a cookie-keeping HTTP client that does not follow redirects,
// so tests see each answer.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, api *apitest.API) *browser {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &browser{t: t, base: "http://" + api.HTTPAddr, c: &http.Client{Jar: jar, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values) (int, string, http.Header) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.base)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header
}

// edit posts a job's edit form as a browser would: the console answers
// with a confirmation naming the fields that would change (returned as
// confirm, "" when the form came back refused instead), and the
// confirmation's own form is posted back.
func (b *browser) edit(id string, form url.Values) (code int, body string, h http.Header, confirm string) {
	b.t.Helper()
	code, body, h = b.do("POST", "/jobs/"+id+"/edit", form)
	if code != http.StatusOK || !strings.Contains(body, `id="changes"`) {
		return code, body, h, ""
	}
	confirm = body
	code, body, h = b.do("POST", "/jobs/"+id+"/edit", formValues(body))
	return code, body, h, confirm
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	code, _, h := b.do("POST", "/login", url.Values{"token": {token}, "next": {"/jobs"}})
	if code != http.StatusSeeOther || h.Get("Location") != "/jobs" {
		b.t.Fatalf("sign-in: %d %v", code, h)
	}
}

// notice follows a redirect after an action and returns the banner the
// page shows ("" for none).
func (b *browser) notice(location string) string {
	b.t.Helper()
	code, page, _ := b.do("GET", location, nil)
	if code != http.StatusOK {
		b.t.Fatalf("GET %s: %d", location, code)
	}
	m := noticeRE.FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

var noticeRE = regexp.MustCompile(`id="notice">([^<]*)<`)

// csrf reads the CSRF token the page's forms carry.
func csrf(t *testing.T, page string) string {
	t.Helper()
	const marker = `name="csrf" value="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no CSRF field in %s", page)
	}
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestIntegrationConsoleSessionsCSRFTenancyEscaping(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)

	// Not signed in: pages redirect to sign-in, actions are refused.
	if code, _, h := acme.do("GET", "/jobs", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login") {
		t.Fatalf("anonymous /jobs: %d %v", code, h)
	}
	if code, body, _ := acme.do("POST", "/login", url.Values{"token": {"wrong"}}); code != http.StatusUnauthorized || !strings.Contains(body, "not known") {
		t.Fatalf("bad token: %d", code)
	}
	// A sign-in posted from another site is refused (login CSRF).
	req, _ := http.NewRequest("POST", acme.base+"/login", strings.NewReader("token="+apitest.TokenAcme))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := acme.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin sign-in: %d", resp.StatusCode)
	}

	code, _, h := acme.do("POST", "/login", url.Values{"token": {apitest.TokenAcme}})
	ck := h.Get("Set-Cookie")
	if code != http.StatusSeeOther || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || strings.Contains(ck, apitest.TokenAcme) {
		t.Fatalf("session cookie: %d %q", code, ck)
	}

	_, page, h := acme.do("GET", "/jobs/new", nil)
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("CSP: %v", h)
	}
	token := csrf(t, page)
	form := url.Values{"csrf": {token}, "name": {"<script>alert(1)</script>"}, "cron": {"*/5 * * * *"}, "timezone": {"UTC"},
		"url": {"http://127.0.0.1:9/hook"}, "method": {"POST"}, "priority": {"high"}, "labels": {"team=billing"}}
	code, _, h = acme.do("POST", "/jobs/new", form)
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/jobs/") {
		t.Fatalf("create: %d %v", code, h)
	}
	jobPath := strings.SplitN(h.Get("Location"), "?", 2)[0]

	_, list, _ := acme.do("GET", "/jobs?labels=team%3Dbilling", nil)
	if strings.Contains(list, "<script>alert(1)</script>") || !strings.Contains(list, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("the name is not escaped in the list:\n%s", list)
	}

	// An action without the CSRF token, or with another session's, is
	// refused and changes nothing.
	if code, _, _ := acme.do("POST", jobPath+"/pause", url.Values{"confirm": {"yes"}}); code != http.StatusForbidden {
		t.Fatalf("pause without CSRF: %d", code)
	}
	other := newBrowser(t, api)
	other.signIn(apitest.TokenAcme)
	_, otherPage, _ := other.do("GET", "/jobs/new", nil)
	if code, _, _ := acme.do("POST", jobPath+"/pause", url.Values{"csrf": {csrf(t, otherPage)}}); code != http.StatusForbidden {
		t.Fatalf("pause with another session's CSRF token: %d", code)
	}
	if _, job, _ := acme.do("GET", jobPath, nil); !strings.Contains(job, `id="job-status">active`) {
		t.Fatalf("job changed by a refused action:\n%s", job)
	}
	if code, _, _ := acme.do("POST", jobPath+"/pause", url.Values{"csrf": {token}}); code != http.StatusSeeOther {
		t.Fatalf("pause with CSRF: %d", code)
	}
	if _, job, _ := acme.do("GET", jobPath, nil); !strings.Contains(job, `id="job-status">paused`) {
		t.Fatal("pause did not happen")
	}

	// Another tenant gets 404 for acme's job, by URL or by action.
	globex := newBrowser(t, api)
	globex.signIn(apitest.TokenGlobex)
	if code, body, _ := globex.do("GET", jobPath, nil); code != http.StatusNotFound || strings.Contains(body, "alert(1)") {
		t.Fatalf("globex opens acme's job: %d", code)
	}
	_, gpage, _ := globex.do("GET", "/jobs/new", nil)
	if code, _, _ := globex.do("POST", jobPath+"/resume", url.Values{"csrf": {csrf(t, gpage)}}); code != http.StatusNotFound {
		t.Fatalf("globex resumes acme's job: %d", code)
	}

	// Field errors come back beside their fields, with the values kept.
	code, body, _ := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {"bad"}, "cron": {"0 0 32 * *"}, "url": {"/hook"}, "timezone": {"Mars/Olympus"}})
	if code != http.StatusBadRequest || !strings.Contains(body, `id="cron-error">schedule.cron: day-of-month: 32`) ||
		!strings.Contains(body, `id="url-error">target.http.url`) || !strings.Contains(body, `id="timezone-error">schedule.timezone`) ||
		!strings.Contains(body, `value="0 0 32 * *"`) {
		t.Fatalf("field errors: %d\n%s", code, body)
	}

	// Signing out ends the session.
	_, page, _ = acme.do("GET", "/jobs", nil)
	if code, _, _ := acme.do("POST", "/logout", url.Values{"csrf": {csrf(t, page)}}); code != http.StatusSeeOther {
		t.Fatalf("logout: %d", code)
	}
	if code, _, _ := acme.do("GET", "/jobs", nil); code != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", code)
	}
}

// Bulk actions: the filter's matches (all pages) or a selection, counted
// and confirmed first, and only the tenant's own jobs.
func TestIntegrationConsoleBulk(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	ids := map[string]string{}
	for _, j := range []struct{ name, labels string }{{"a", "team=billing"}, {"b", "team=billing"}, {"c", "team=ops"}} {
		code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {j.name}, "cron": {"@hourly"},
			"url": {"http://127.0.0.1:9/hook"}, "labels": {j.labels}})
		if code != http.StatusSeeOther {
			t.Fatalf("create %s: %d", j.name, code)
		}
		ids[j.name] = strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	}
	statusOf := func(name string) sundialv1.JobStatus {
		j, err := api.Store.Get(context.Background(), "acme", ids[name])
		if err != nil {
			t.Fatal(err)
		}
		return j.GetStatus()
	}

	if _, list, _ := acme.do("GET", "/jobs?name=B", nil); !strings.Contains(list, ">b</a>") || strings.Contains(list, ">a</a>") {
		t.Fatalf("name search lists:\n%s", list)
	}
	filter := url.Values{"csrf": {token}, "scope": {"filter"}, "labels": {"team=billing"}, "action": {"pause"}}
	code, body, _ := acme.do("POST", "/jobs/bulk", filter)
	if code != http.StatusOK || !strings.Contains(body, "Pause every job the filter (all but deleted, labels team=billing) matches: 2 job(s)?") {
		t.Fatalf("bulk count: %d\n%s", code, body)
	}
	if statusOf("a") != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatal("the count changed a job")
	}
	filter.Set("confirm", "yes")
	if code, _, h := acme.do("POST", "/jobs/bulk", filter); code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Paused: 2 job(s)." {
		t.Fatalf("bulk pause: %d %v", code, h)
	}
	if statusOf("a") != sundialv1.JobStatus_JOB_STATUS_PAUSED || statusOf("b") != sundialv1.JobStatus_JOB_STATUS_PAUSED || statusOf("c") != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("after the bulk pause: %v %v %v", statusOf("a"), statusOf("b"), statusOf("c"))
	}
	if code, _, _ := acme.do("POST", "/jobs/bulk", url.Values{"scope": {"filter"}, "action": {"delete"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Fatalf("bulk delete without CSRF: %d", code)
	}

	sel := url.Values{"csrf": {token}, "action": {"resume"}, "id": {ids["a"]}, "confirm": {"yes"}}
	if code, _, _ := acme.do("POST", "/jobs/bulk", sel); code != http.StatusSeeOther || statusOf("a") != sundialv1.JobStatus_JOB_STATUS_ACTIVE || statusOf("b") != sundialv1.JobStatus_JOB_STATUS_PAUSED {
		t.Fatalf("selection resume: %d", code)
	}

	// Another tenant's selection of acme's job is not found; nothing changes.
	globex := newBrowser(t, api)
	globex.signIn(apitest.TokenGlobex)
	_, gpage, _ := globex.do("GET", "/jobs", nil)
	if code, _, _ := globex.do("POST", "/jobs/bulk", url.Values{"csrf": {csrf(t, gpage)}, "action": {"delete"}, "id": {ids["c"]}, "confirm": {"yes"}}); code != http.StatusNotFound ||
		statusOf("c") != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("globex bulk-deletes acme's job: %d", code)
	}
}

// Dead letters: groups, and a re-drive of everything a filter matches,
// dry run first, at the chosen rate.
func TestIntegrationConsoleRedriveByFilter(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {"flaky"}, "cron": {"@hourly"}, "url": {"http://hooks.example:8443/run"}})
	if code != http.StatusSeeOther {
		t.Fatalf("create: %d", code)
	}
	job, err := api.Store.Get(context.Background(), "acme", strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/"))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC().Truncate(time.Hour)
	api.DeadLetter(t, job, base.Add(-3*time.Hour), "http_5xx")
	api.DeadLetter(t, job, base.Add(-2*time.Hour), "http_5xx")
	api.DeadLetter(t, job, base.Add(-1*time.Hour), "timeout")

	_, list, _ := acme.do("GET", "/dead-letters", nil)
	for _, want := range []string{`<a href="/dead-letters?class=http_5xx">http_5xx</a></td><td class="count">2</td>`, `<td>hooks.example:8443</td><td class="count">3</td>`} {
		if !strings.Contains(list, want) {
			t.Fatalf("groups lack %s:\n%s", want, list)
		}
	}
	form := url.Values{"csrf": {token}, "scope": {"filter"}, "class": {"http_5xx"}, "rate": {"2"}}
	if code, body, _ := acme.do("POST", "/dead-letters/redrive", form); code != http.StatusOK || !strings.Contains(body, "Re-drive 2 dead letter(s)") {
		t.Fatalf("dry run: %d\n%s", code, body)
	}
	var staged int
	count := func() int {
		if err := api.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE attempt = 2`).Scan(&staged); err != nil {
			t.Fatal(err)
		}
		return staged
	}
	if count() != 0 {
		t.Fatal("the dry run staged firings")
	}
	form.Set("confirm", "yes")
	if code, _, h := acme.do("POST", "/dead-letters/redrive", form); code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Re-driven: 2 dead letter(s)." {
		t.Fatalf("re-drive: %d %v", code, h)
	}
	if count() != 2 {
		t.Fatalf("%d firings staged, want 2", staged)
	}
}

// The overview without a browser's script: the figures sit in #live with
// the pace the script polls at, a <noscript> refresh at the same pace
// reloads the page instead, the dead-letter chart has its 24 hours, and
// the script is served. An edit posted with confirm=yes but without the
// CSRF token is refused like any other action.
func TestIntegrationConsoleOverviewLiveAndEditCSRF(t *testing.T) {
	api := startConsole(t, false, func(c *console.Config) { c.OverviewRefresh = 7 * time.Second })
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)

	code, page, _ := acme.do("GET", "/", nil)
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{
		`<noscript><meta http-equiv="refresh" content="7"></noscript>`,
		`<script src="/static/live.js" defer></script>`,
		`<div id="live" data-refresh="7" data-updates="0">`,
		`<button type="button" id="live-toggle" hidden>Pause live updates</button>`,
		`id="dead-letters-chart"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
	chart := page[strings.Index(page, `id="dead-letters-chart"`):]
	chart = chart[:strings.Index(chart, "</figure>")]
	if n := strings.Count(chart, "<tr><td>"); n != 24 {
		t.Errorf("the dead-letter chart's table has %d hours, want 24", n)
	}
	if code, js, h := acme.do("GET", "/static/live.js", nil); code != http.StatusOK || !strings.Contains(h.Get("Content-Type"), "javascript") || !strings.Contains(js, "getElementById('live')") {
		t.Errorf("live.js: %d %q", code, h.Get("Content-Type"))
	}

	_, form, _ := acme.do("GET", "/jobs/new", nil)
	code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {csrf(t, form)}, "name": {"edit-me"}, "cron": {"*/5 * * * *"},
		"timezone": {"UTC"}, "url": {"http://127.0.0.1:9/hook"}, "method": {"POST"}})
	if code != http.StatusSeeOther {
		t.Fatalf("create: %d", code)
	}
	id := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	_, edit, _ := acme.do("GET", "/jobs/"+id+"/edit", nil)
	v := formValues(edit)
	v.Set("name", "edited-without-csrf")
	v.Set("confirm", "yes")
	v.Del("csrf")
	if code, _, _ := acme.do("POST", "/jobs/"+id+"/edit", v); code != http.StatusForbidden {
		t.Fatalf("an edit without its CSRF token: %d, want 403", code)
	}
	if j, err := api.Store.Get(context.Background(), "acme", id); err != nil || j.GetName() != "edit-me" {
		t.Fatalf("after the refused edit: %q %v", j.GetName(), err)
	}
}
