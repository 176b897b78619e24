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

	"google.golang.org/grpc"

	"github.com/sundialhq/sundial/pkg/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
)

// A bulk action on everything a filter matches goes through the api's
// BulkJobAction: the confirmation counts, and confirmed, the console works
// in rounds (here 2 jobs a call and no time budget, so every call ends the
// request) and offers to continue from where it stopped until every match
// changed, carrying the running totals.
func TestIntegrationConsoleBulkByFilterInRounds(t *testing.T) {
	api := apitest.Start(t, apitest.Options{Console: func(conn *grpc.ClientConn, tokens *auth.Tokens) (http.Handler, error) {
		return console.New(console.Config{Conn: conn, Tokens: tokens, BulkBatch: 2, BulkBudget: time.Nanosecond})
	}})
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	var ids []string
	for i, labels := range []string{"team=billing", "team=billing", "team=ops", "team=billing", "team=billing", "team=billing"} {
		code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {"job-" + string(rune('a'+i))}, "cron": {"@hourly"},
			"url": {"http://127.0.0.1:9/hook"}, "labels": {labels}})
		if code != http.StatusSeeOther {
			t.Fatalf("create %d: %d", i, code)
		}
		ids = append(ids, strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/"))
	}
	paused := func() int {
		n := 0
		for _, id := range ids {
			j, err := api.Store.Get(context.Background(), "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			if j.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED {
				n++
			}
		}
		return n
	}

	form := url.Values{"csrf": {token}, "scope": {"filter"}, "labels": {"team=billing"}, "action": {"pause"}}
	code, body, _ := acme.do("POST", "/jobs/bulk", form)
	if code != http.StatusOK || !strings.Contains(body, "Pause every job the filter (all but deleted, labels team=billing) matches: 5 job(s)?") || paused() != 0 {
		t.Fatalf("count: %d, %d paused\n%s", code, paused(), body)
	}
	hidden := regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	rounds := 0
	for form.Set("confirm", "yes"); ; rounds++ {
		code, body, h := acme.do("POST", "/jobs/bulk", form)
		if code == http.StatusSeeOther {
			if loc, _ := url.QueryUnescape(h.Get("Location")); !strings.Contains(loc, "done=paused: 5 job(s)") {
				t.Fatalf("after the last round: %s", loc)
			}
			break
		}
		if code != http.StatusOK || !strings.Contains(body, "more jobs match the filter") || rounds > 5 {
			t.Fatalf("round %d: %d\n%s", rounds, code, body)
		}
		if want := map[int]string{0: "Paused so far: 2 of 2", 1: "Paused so far: 4 of 4"}[rounds]; !strings.Contains(body, want) {
			t.Fatalf("round %d does not say %q:\n%s", rounds, want, body)
		}
		form = url.Values{}
		for _, m := range hidden.FindAllStringSubmatch(body, -1) {
			form.Add(m[1], m[2])
		}
		if form.Get("page_token") == "" || form.Get("csrf") == "" {
			t.Fatalf("the continue form carries %v", form)
		}
	}
	if rounds != 2 || paused() != 5 {
		t.Fatalf("%d continue pages, %d jobs paused; want 2 and 5", rounds, paused())
	}
	if j, _ := api.Store.Get(context.Background(), "acme", ids[2]); j.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("the ops job is %v", j.GetStatus())
	}
	// Without the CSRF token, a continuation is refused like any action.
	form.Del("csrf")
	if code, _, _ := acme.do("POST", "/jobs/bulk", form); code != http.StatusForbidden {
		t.Fatalf("continue without CSRF: %d", code)
	}
}

// The list filters by next fire; a bound the console cannot read, or one
// the api refuses, is shown beside its field.
func TestIntegrationConsoleNextFireFilter(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	for _, j := range []struct{ name, cron string }{{"at-three", "0 3 * * *"}, {"at-five", "0 5 * * *"}} {
		if code, _, _ := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {j.name}, "cron": {j.cron}, "url": {"http://127.0.0.1:9/hook"}}); code != http.StatusSeeOther {
			t.Fatalf("create %s: %d", j.name, code)
		}
	}
	next := time.Now().UTC().Truncate(24 * time.Hour).Add(3 * time.Hour)
	if !next.After(time.Now()) {
		next = next.Add(24 * time.Hour)
	}
	q := url.Values{"from": {next.Add(-time.Minute).Format("2006-01-02T15:04")}, "before": {next.Add(time.Minute).Format("2006-01-02T15:04")}}
	code, list, _ := acme.do("GET", "/jobs?"+q.Encode(), nil)
	if code != http.StatusOK || !strings.Contains(list, ">at-three</a>") || strings.Contains(list, ">at-five</a>") {
		t.Fatalf("next fire around %s: %d\n%s", next, code, list)
	}
	// The filter's bounds travel with the bulk forms.
	if !strings.Contains(list, `name="from" value="`+q.Get("from")+`"`) {
		t.Fatalf("the bulk forms lack the bound:\n%s", list)
	}
	code, list, _ = acme.do("GET", "/jobs?from=tomorrow", nil)
	if code != http.StatusBadRequest || !strings.Contains(list, `id="from-error"`) || !strings.Contains(list, `aria-invalid="true" aria-describedby="from-error"`) {
		t.Fatalf("an unreadable bound: %d\n%s", code, list)
	}
	code, list, _ = acme.do("GET", "/jobs?from=2026-12-02T00:00&before=2026-12-01T00:00", nil)
	if code != http.StatusBadRequest || !strings.Contains(list, `<p class="field-error" id="before-error">Next fire before: must be after next_fire_after</p>`) {
		t.Fatalf("inverted bounds: %d\n%s", code, list)
	}
}

// The audit page lists the tenant's changes across its jobs with their
// names and actors, or one job's; another tenant sees none of them.
func TestIntegrationConsoleAudit(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	var ids []string
	for _, name := range []string{"first-job", "second-job"} {
		code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {name}, "cron": {"@hourly"}, "url": {"http://127.0.0.1:9/hook"}})
		if code != http.StatusSeeOther {
			t.Fatalf("create %s: %d", name, code)
		}
		ids = append(ids, strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/"))
	}
	if code, _, _ := acme.do("POST", "/jobs/"+ids[1]+"/pause", url.Values{"csrf": {token}}); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	code, body, _ := acme.do("GET", "/audit", nil)
	if code != http.StatusOK {
		t.Fatalf("audit: %d", code)
	}
	rows := regexp.MustCompile(`(?s)<tr>\s*<td>[^<]*</td>\s*<td><a href="/jobs/([^"]+)">([^<]*)</a></td>\s*<td>([a-z]+)</td><td>(\d+)</td><td>([^<]*)</td>`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[2]+" "+r[3]+" v"+r[4]+" by "+r[5])
	}
	want := []string{"second-job pause v2 by acme/ops", "second-job create v1 by acme/ops", "first-job create v1 by acme/ops"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("the trail reads %q, want %q", got, want)
	}
	if _, one, _ := acme.do("GET", "/audit?job="+ids[0], nil); strings.Count(one, "<td>create</td>") != 1 || strings.Contains(one, "<td>pause</td>") {
		t.Fatalf("first-job's trail:\n%s", one)
	}
	globex := newBrowser(t, api)
	globex.signIn(apitest.TokenGlobex)
	if _, theirs, _ := globex.do("GET", "/audit", nil); !strings.Contains(theirs, "No changes recorded.") {
		t.Fatalf("globex's audit page:\n%s", theirs)
	}
	if code, _, _ := globex.do("GET", "/audit?job="+ids[0], nil); code != http.StatusNotFound {
		t.Fatalf("globex asks for acme's job's trail: %d", code)
	}
}
