//go:build integration

package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

var auditRowRE = regexp.MustCompile(`(?s)<tr>\s*<td>[^<]*</td>\s*<td><a href="([^"]*)">(.*?)</a></td>\s*<td>([a-z-]+)</td><td>\d*</td><td>([^<]*)</td><td class="clip mono">[^<]*</td><td class="kind">([a-z-]+)</td>`)

type auditViewRow struct{ link, what, action, actor, kind string }

func auditRows(t *testing.T, b *browser, path string) ([]auditViewRow, string) {
	t.Helper()
	code, body, _ := b.do("GET", path, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	var out []auditViewRow
	for _, m := range auditRowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, auditViewRow{link: html.UnescapeString(m[1]), what: stripTags(m[2]), action: m[3], actor: m[4], kind: m[5]})
	}
	next := ""
	if m := regexp.MustCompile(`<a href="([^"]*)" id="older">`).FindStringSubmatch(body); m != nil {
		next = html.UnescapeString(m[1])
	}
	return out, next
}

func stripTags(s string) string { return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(s, "") }

func sorted(s []string) string {
	s = slices.Clone(s)
	slices.Sort(s)
	return strings.Join(s, " ")
}

func kindsOf(rows []auditViewRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.kind+":"+r.action)
	}
	return out
}

// The audit page merges every trail of the tenant: a job's changes made
// through the console, and the token, signing-key and calendar trails;
// kind, actor and time filters narrow it; another tenant sees none.
func TestIntegrationConsoleAuditEveryTrail(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	code, _, h := acme.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {"audited-job"}, "cron": {"@hourly"}, "url": {"http://127.0.0.1:9/hook"}})
	if code != http.StatusSeeOther {
		t.Fatalf("create: %d", code)
	}
	jobID := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")

	// The other trails' writers are proven by their own tests; here their
	// entries are appended as they append them, a second apart and after
	// the job's create.
	base := time.Now().UTC().Truncate(time.Second).Add(time.Minute)
	for i, r := range []audittrail.Record{
		{Kind: audittrail.KindToken, Tenant: "acme", Subject: "0123456789abcdef", Actor: "acme/admin", Action: "create"},
		{Kind: audittrail.KindSigningKey, Tenant: "acme", Subject: "key-2", Actor: "acme/admin", Action: "rotate"},
		{Kind: audittrail.KindCalendar, Tenant: "acme", Subject: "holidays", Actor: "acme/ci", Action: "update", Version: 2},
		{Kind: audittrail.KindCalendar, Tenant: "globex", Subject: "globex-days", Actor: "globex/ci", Action: "create", Version: 1},
	} {
		r.At = base.Add(time.Duration(i) * time.Second)
		if err := audittrail.Append(ctx, api.Pool, r); err != nil {
			t.Fatal(err)
		}
	}

	// The job's create made the tenant's first signing key (its own
	// trail's writer); the two are at about the same instant.
	rows, _ := auditRows(t, acme, "/audit")
	if got, want := sorted(kindsOf(rows)), "calendar:update job:create signing-key:create signing-key:rotate token:create"; got != want ||
		strings.Join(kindsOf(rows[:3]), " ") != "calendar:update signing-key:rotate token:create" {
		t.Fatalf("the merged view reads %q, want %q with the appended three first", kindsOf(rows), want)
	}
	for _, r := range rows {
		if r.kind == "job" && (r.what != "audited-job" || r.link != "/jobs/"+jobID) {
			t.Fatalf("the job's entry shows %q linking %q", r.what, r.link)
		}
	}
	if rows[0].link != "/audit?kind=calendar&subject=holidays" {
		t.Fatalf("the calendar's entry links %q", rows[0].link)
	}
	// The calendar's link: that calendar's trail only.
	if one, _ := auditRows(t, acme, rows[0].link); len(one) != 1 || one[0].what != "holidays" {
		t.Fatalf("the calendar's trail: %+v", one)
	}

	for path, want := range map[string]string{
		"/audit?kind=token":       "token:create",
		"/audit?kind=signing-key": "signing-key:create signing-key:rotate",
		"/audit?kind=job":         "job:create",
		"/audit?actor=acme/ci":    "calendar:update",
		"/audit?actor=acme/admin": "signing-key:rotate token:create",
		"/audit?action=create":    "job:create signing-key:create token:create",
		"/audit?action=rotate":    "signing-key:rotate",
		"/audit?action=purge":     "",
		"/audit?job=" + jobID:     "job:create",
		"/audit?since=" + base.Add(time.Second).Format("2006-01-02T15:04:05") + "&until=" + base.Add(2*time.Second).Format("2006-01-02T15:04:05"): "signing-key:rotate",
		"/audit?until=" + base.Format("2006-01-02T15:04:05"): "job:create signing-key:create",
	} {
		rows, _ := auditRows(t, acme, path)
		if got := sorted(kindsOf(rows)); got != want {
			t.Errorf("%s reads %q, want %q", path, got, want)
		}
	}
	for path, field := range map[string]string{
		"/audit?since=yesterday":                               "since:",
		"/audit?kind=ledger":                                   "kind:",
		"/audit?job=not-a-uuid":                                "job:",
		"/audit?since=2026-01-02T00:00&until=2026-01-01T00:00": "until:",
		"/audit?page=bm90LWEtY3Vyc29y":                         "page:",
		"/audit?action=Re-Drive":                               "action:",
	} {
		code, body, _ := acme.do("GET", path, nil)
		if code != http.StatusBadRequest || !strings.Contains(body, field) {
			t.Errorf("%s: %d, want 400 naming %s", path, code, field)
		}
	}

	globex := newBrowser(t, api)
	globex.signIn(apitest.TokenGlobex)
	if theirs, _ := auditRows(t, globex, "/audit"); strings.Join(kindsOf(theirs), " ") != "calendar:create" {
		t.Fatalf("globex's view: %+v", theirs)
	}
}

// Paging with the cursor is stable: entries appended while an operator
// reads page after page neither repeat an entry nor skip one, and a page
// token is refused under other filters.
func TestIntegrationConsoleAuditPagingStableAcrossAppends(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	appendToken := func(i int, at time.Time) {
		t.Helper()
		if err := audittrail.Append(ctx, api.Pool, audittrail.Record{Kind: audittrail.KindToken, Tenant: "acme",
			Subject: fmt.Sprintf("%016x", i), Actor: "acme/admin", Action: "create", At: at}); err != nil {
			t.Fatal(err)
		}
	}
	// 120 entries, three to each instant (ties the cursor must break).
	for i := range 120 {
		appendToken(i, base.Add(time.Duration(i/3)*time.Second))
	}
	seen := map[string]bool{}
	var order []string
	path := "/audit?kind=token"
	pages := 0
	for path != "" {
		rows, next := auditRows(t, acme, path)
		pages++
		for _, r := range rows {
			if seen[r.what] {
				t.Fatalf("page %d repeats %s", pages, r.what)
			}
			seen[r.what] = true
			order = append(order, r.what)
		}
		// Appended between pages: newer than every entry read so far.
		appendToken(1000+pages, time.Now().UTC())
		path = next
		if pages == 1 {
			// The same token under other filters is refused.
			if code, _, _ := acme.do("GET", strings.Replace(next, "kind=token", "kind=calendar", 1), nil); code != http.StatusBadRequest {
				t.Fatalf("a token page under another filter: %d", code)
			}
		}
	}
	if pages != 3 || len(order) != 120 {
		t.Fatalf("read %d entries in %d pages, want 120 in 3", len(order), pages)
	}
	if order[0] != fmt.Sprintf("%016x", 119) || order[119] != fmt.Sprintf("%016x", 0) {
		t.Fatalf("first %s, last %s", order[0], order[119])
	}
}
