//go:build integration

package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
	api := startConsole(t, false, func(c *console.Config) { c.BulkBatch, c.BulkBudget = 2, time.Nanosecond })
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
			if n := acme.notice(h.Get("Location")); !strings.HasPrefix(n, "Paused: 5 job(s)") {
				t.Fatalf("after the last round: %s %q", h.Get("Location"), n)
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

// The form makes Kafka jobs and webhook jobs with headers and a retry
// policy; the api's refusals of each land beside their fields, with the
// values kept; an edit sends only the paths it changed.
func TestIntegrationConsoleFormTargetsHeadersRetry(t *testing.T) {
	api := startConsole(t, false)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	base := url.Values{"csrf": {token}, "name": {"billing-export"}, "cron": {"0 2 * * *"}, "timezone": {"UTC"}, "priority": {"high"}}
	with := func(kv ...string) url.Values {
		v := url.Values{}
		for k, vs := range base {
			v[k] = vs
		}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	errorBeside := func(body, field string) string {
		m := regexp.MustCompile(`<p class="field-error" id="` + field + `-error">([^<]*)</p>`).FindStringSubmatch(body)
		if m == nil {
			return ""
		}
		return html.UnescapeString(m[1])
	}

	// Refused by the api: a Kafka target without a topic, a retry whose
	// longest delay is shorter than its first, too many attempts.
	code, body, _ := acme.do("POST", "/jobs/new", with("kind", "kafka", "topic", "", "max_attempts", "99", "initial_delay", "1m", "max_delay", "10s"))
	if code != http.StatusBadRequest {
		t.Fatalf("refused create: %d", code)
	}
	for field, want := range map[string]string{"topic": "target.kafka.topic:", "max_attempts": "retry.max_attempts:", "max_delay": "retry.max_delay:"} {
		if e := errorBeside(body, field); !strings.HasPrefix(e, want) {
			t.Errorf("beside %s: %q, want %s…\n", field, e, want)
		}
	}
	if !strings.Contains(body, `id="kind-kafka" checked`) || !strings.Contains(body, `name="initial_delay" value="1m"`) {
		t.Fatalf("the refused form lost its values:\n%s", body)
	}
	// A header naming a secret this tenant does not have (the api knows
	// none here), and a header line the console cannot read.
	_, body, _ = acme.do("POST", "/jobs/new", with("kind", "http", "url", "https://billing.example/export", "headers", "Authorization: {{secret:billing-token}}"))
	if e := errorBeside(body, "headers"); !strings.Contains(e, `target.http.headers["Authorization"]`) {
		t.Fatalf("beside headers: %q", e)
	}
	_, body, _ = acme.do("POST", "/jobs/new", with("kind", "http", "url", "https://billing.example/export", "headers", "just text"))
	if e := errorBeside(body, "headers"); e != "line 1: write Name: value" {
		t.Fatalf("beside headers: %q", e)
	}

	// Accepted: a webhook with headers and retries, and a Kafka job.
	code, _, h := acme.do("POST", "/jobs/new", with("kind", "http", "url", "https://billing.example/export", "method", "PUT",
		"headers", "X-Team: billing\nX-Run: nightly", "max_attempts", "4", "backoff", "fixed", "initial_delay", "30s", "max_delay", "30s"))
	if code != http.StatusSeeOther {
		t.Fatalf("create webhook: %d", code)
	}
	webhookID := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	j, err := api.Store.Get(context.Background(), "acme", webhookID)
	if err != nil {
		t.Fatal(err)
	}
	if ht := j.GetTarget().GetHttp(); ht.GetMethod() != "PUT" || ht.GetHeaders()["X-Run"] != "nightly" || len(ht.GetHeaders()) != 2 ||
		j.GetRetry().GetMaxAttempts() != 4 || j.GetRetry().GetBackoff() != sundialv1.Backoff_BACKOFF_FIXED || j.GetRetry().GetInitialDelay().AsDuration() != 30*time.Second {
		t.Fatalf("stored webhook job: %v %v", j.GetTarget(), j.GetRetry())
	}
	code, _, h = acme.do("POST", "/jobs/new", with("kind", "kafka", "topic", "billing.exports", "key", "nightly"))
	if code != http.StatusSeeOther {
		t.Fatalf("create kafka: %d", code)
	}
	kafkaID := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	if j, err := api.Store.Get(context.Background(), "acme", kafkaID); err != nil || j.GetTarget().GetKafka().GetTopic() != "billing.exports" || j.GetTarget().GetKafka().GetKey() != "nightly" {
		t.Fatalf("stored kafka job: %v %v", j.GetTarget(), err)
	}

	// Edit: the form comes back filled in; changing one header and the
	// attempts sends those two paths.
	_, edit, _ := acme.do("GET", "/jobs/"+webhookID+"/edit", nil)
	if !strings.Contains(edit, "X-Run: nightly\nX-Team: billing\n</textarea>") || !strings.Contains(edit, `name="max_attempts" value="4"`) {
		t.Fatalf("the edit form:\n%s", edit)
	}
	v := with("kind", "http", "url", "https://billing.example/export", "method", "PUT", "headers", "X-Team: ops\nX-Run: nightly",
		"max_attempts", "6", "backoff", "fixed", "initial_delay", "30s", "max_delay", "30s")
	// Asked first: the confirmation names the two paths, and nothing is
	// saved until it is confirmed.
	code, page, _ = acme.do("POST", "/jobs/"+webhookID+"/edit", v)
	if code != http.StatusOK || !strings.Contains(page, `<ul id="changes"><li><code>target.http.headers</code></li><li><code>retry.max_attempts</code></li></ul>`) {
		t.Fatalf("the edit's confirmation: %d\n%s", code, page)
	}
	if j, _ := api.Store.Get(context.Background(), "acme", webhookID); j.GetTarget().GetHttp().GetHeaders()["X-Team"] != "billing" || j.GetRetry().GetMaxAttempts() != 4 {
		t.Fatalf("saved before the confirmation: %v %v", j.GetTarget(), j.GetRetry())
	}
	code, _, h = acme.do("POST", "/jobs/"+webhookID+"/edit", formValues(page))
	if code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Job updated: target.http.headers, retry.max_attempts." {
		t.Fatalf("edit: %d %s", code, h.Get("Location"))
	}
	if j, _ := api.Store.Get(context.Background(), "acme", webhookID); j.GetTarget().GetHttp().GetHeaders()["X-Team"] != "ops" || j.GetRetry().GetMaxAttempts() != 6 ||
		j.GetRetry().GetInitialDelay().AsDuration() != 30*time.Second {
		t.Fatalf("after the edit: %v %v", j.GetTarget(), j.GetRetry())
	}
	// A Kafka job is editable too; turning it into a webhook replaces the
	// target. (The other fields as the edit form shows them: the retry
	// policy as the api stored it, defaults filled in.)
	kj, err := api.Store.Get(context.Background(), "acme", kafkaID)
	if err != nil {
		t.Fatal(err)
	}
	rp := kj.GetRetry()
	v = with("kind", "http", "url", "https://billing.example/hook", "max_attempts", strconv.Itoa(int(rp.GetMaxAttempts())),
		"backoff", strings.ToLower(strings.TrimPrefix(rp.GetBackoff().String(), "BACKOFF_")),
		"initial_delay", rp.GetInitialDelay().AsDuration().String(), "max_delay", rp.GetMaxDelay().AsDuration().String())
	if rp.GetBackoff() == sundialv1.Backoff_BACKOFF_UNSPECIFIED {
		v.Set("backoff", "")
	}
	code, _, h, _ = acme.edit(kafkaID, v)
	if code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Job updated: target." {
		t.Fatalf("kafka to webhook: %d %s", code, h.Get("Location"))
	}
	if j, _ := api.Store.Get(context.Background(), "acme", kafkaID); j.GetTarget().GetHttp().GetUrl() != "https://billing.example/hook" {
		t.Fatalf("after kafka to webhook: %v", j.GetTarget())
	}
}

// The priority filter: the list keeps the jobs of that priority and shows
// each job's priority; an unknown one is refused beside its field; a bulk
// pause by priority counts and changes those jobs only; another tenant's
// jobs of that priority are neither listed nor counted.
func TestIntegrationConsolePriorityFilter(t *testing.T) {
	api := startConsole(t, false)
	acme, globex := newBrowser(t, api), newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	globex.signIn(apitest.TokenGlobex)
	create := func(b *browser, name, priority string) string {
		t.Helper()
		_, page, _ := b.do("GET", "/jobs/new", nil)
		code, _, h := b.do("POST", "/jobs/new", url.Values{"csrf": {csrf(t, page)}, "name": {name}, "cron": {"@hourly"},
			"url": {"http://127.0.0.1:9/hook"}, "priority": {priority}})
		if code != http.StatusSeeOther {
			t.Fatalf("create %s: %d", name, code)
		}
		return strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	}
	high1, low, high2 := create(acme, "prio-high-1", "high"), create(acme, "prio-low", "low"), create(acme, "prio-high-2", "high")
	create(globex, "globex-high", "high")

	code, list, _ := acme.do("GET", "/jobs?priority=high", nil)
	if code != http.StatusOK || !strings.Contains(list, "prio-high-1") || !strings.Contains(list, "prio-high-2") || strings.Contains(list, "prio-low") ||
		strings.Contains(list, "globex-high") || strings.Count(list, `<td class="priority">high</td>`) != 2 || !strings.Contains(list, `<option value="high" selected>`) {
		t.Fatalf("high jobs: %d\n%s", code, list)
	}
	if code, list, _ := acme.do("GET", "/jobs?priority=urgent", nil); code != http.StatusBadRequest || !strings.Contains(list, `id="priority-error">Priority: unknown priority urgent`) {
		t.Fatalf("an unknown priority: %d\n%s", code, list)
	}

	form := url.Values{"csrf": {csrf(t, list)}, "scope": {"filter"}, "priority": {"high"}, "action": {"pause"}}
	code, body, _ := acme.do("POST", "/jobs/bulk", form)
	if code != http.StatusOK || !strings.Contains(body, "Pause every job the filter (all but deleted, priority high) matches: 2 job(s)?") {
		t.Fatalf("count: %d\n%s", code, body)
	}
	form.Set("confirm", "yes")
	if code, _, h := acme.do("POST", "/jobs/bulk", form); code != http.StatusSeeOther {
		t.Fatalf("bulk pause by priority: %d %v", code, h)
	}
	for id, want := range map[string]sundialv1.JobStatus{high1: sundialv1.JobStatus_JOB_STATUS_PAUSED, high2: sundialv1.JobStatus_JOB_STATUS_PAUSED, low: sundialv1.JobStatus_JOB_STATUS_ACTIVE} {
		if j, err := api.Store.Get(context.Background(), "acme", id); err != nil || j.GetStatus() != want {
			t.Errorf("%s after the bulk pause: %v %v, want %v", j.GetName(), j.GetStatus(), err, want)
		}
	}
	if _, list, _ := globex.do("GET", "/jobs?priority=high&status=active", nil); !strings.Contains(list, "globex-high") {
		t.Errorf("globex's high job was touched or hidden:\n%s", list)
	}
}
