//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTimingConsolePages is the bench-sized page check:
// every console page within 200 ms server-side (the median of 5 runs
// after a warm-up, through the console's handler) with, by default, 10 M
// jobs, 10 M ledger records and 100 k dead letters. It only runs when
// SUNDIAL_CONSOLE_TIMING_JOBS names how many jobs; the ledger records
// (SUNDIAL_CONSOLE_TIMING_LEDGER) default to as many, the dead letters
// (SUNDIAL_CONSOLE_TIMING_DEAD_LETTERS) to 1 in 100 of them. The load is
// TestIntegrationConsolePagePlans's (seedPages) at that size, on one COPY
// connection: jobs copied in the api's row encoding (1 in 100 paused, 1
// in 1,000 labelled team=billing, the 5 newest completed and the 5 before
// them critical) plus a tenth as many of globex's, ledger records written
// by ledger.Writer.RecordMany for one job per 50,000 (20 s slots back
// from now), acme's dead letters among three times as many of other
// tenants', an audit row per job and eight days of the firing rollup.
// Every page's statements are EXPLAINed as in the CI check (no scan of a
// large table, no sort of one, cost within a bound grown with the load),
// then every page, the job list's other filters and the bulk actions'
// counts are timed:
//
//	cd services/api && SUNDIAL_CONSOLE_TIMING_JOBS=10000000 go test -tags integration -count=1 -run TestTimingConsolePages -v -timeout 3h ./internal/console/
//
// docs/benchmarks.md ("Every page asserted") records the runs.
func TestTimingConsolePages(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SUNDIAL_CONSOLE_TIMING_JOBS"))
	if n <= 0 {
		t.Skip("set SUNDIAL_CONSOLE_TIMING_JOBS to run")
	}
	sc := pageScale{Jobs: n, Ledger: n, DeadLetters: max(1, n/100)}
	if v, err := strconv.Atoi(os.Getenv("SUNDIAL_CONSOLE_TIMING_LEDGER")); err == nil && v > 0 {
		sc.Ledger = v
	}
	if v, err := strconv.Atoi(os.Getenv("SUNDIAL_CONSOLE_TIMING_DEAD_LETTERS")); err == nil && v > 0 {
		sc.DeadLetters = v
	}
	t.Logf("scale: %d jobs, %d ledger records, %d dead letters", sc.Jobs, sc.Ledger, sc.DeadLetters)
	rec := &statements{}
	api, con := startTracedConsole(t, rec)
	fx := seedPages(t, api, sc, 1)
	fx.handler = con
	large := largeTables(t, api.Pool)

	// The CI check's cost bound is for its 200,000 jobs and 20,000 dead
	// letters; the dead-letter groups read every dead letter of the
	// tenant (an index-only scan), so the bound grows with the load.
	bound := planCostBound * max(1, float64(sc.Jobs)/200_000, float64(sc.DeadLetters)/20_000)
	pages := fx.pages()
	for _, p := range pages {
		for _, problem := range fx.planProblems(t, rec, large, p, bound) {
			t.Error(problem)
		}
	}

	// More of the job list's reads, and the bulk actions' confirmation
	// pages (a count of what the filter matches), timed only: a count of
	// every job reads every job.
	_, first, _ := fx.b.do("GET", "/jobs", nil)
	if i := strings.Index(first, `href="/jobs?page=`); i > 0 {
		next := first[i+len(`href="`):]
		next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
		pages = append(pages, consolePage{name: "jobs, second page", method: "GET", path: next})
	} else {
		t.Errorf("the first page of %d jobs has no next page", n)
	}
	minute := time.Now().UTC().Truncate(time.Hour).Add(90 * time.Minute)
	bulk := func(name string, form url.Values) consolePage {
		form.Set("csrf", fx.token)
		form.Set("scope", "filter")
		form.Set("action", "pause")
		return consolePage{name: name, method: "POST", path: "/jobs/bulk", form: form}
	}
	pages = append(pages,
		consolePage{name: "jobs, next fire in a minute", method: "GET", path: "/jobs?" + url.Values{"from": {minute.Format("2006-01-02T15:04")}, "before": {minute.Add(time.Minute).Format("2006-01-02T15:04")}}.Encode()},
		consolePage{name: "jobs, name contains (rare)", method: "GET", path: "/jobs?name=job-" + strconv.Itoa(n-7)},
		consolePage{name: "jobs, name contains -1 (common)", method: "GET", path: "/jobs?name=-1"},
		consolePage{name: "jobs, priority low (none)", method: "GET", path: "/jobs?priority=low"},
		bulk("bulk pause count, priority critical", url.Values{"priority": {"critical"}}),
		bulk("bulk pause count, label 0.1%", url.Values{"labels": {"team=billing"}}),
		bulk("bulk pause count, all", url.Values{}),
	)
	for _, p := range pages {
		median, maxd := fx.time(t, p, 5)
		t.Logf("%-36s median %9s  max %9s  %s %s", p.name, median.Round(100*time.Microsecond), maxd.Round(100*time.Microsecond), p.method, p.path)
		if budget := fx.budget(p); median > budget {
			t.Errorf("%s: median %s over %s", p.name, median, budget)
		}
	}

	// The bulk pause itself, once: every active job labelled team=billing
	// (1 in 1,000), each its own transaction with an audit row.
	ctx := context.Background()
	var want int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND status = 'active' AND labels @> '{"team":"billing"}'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	s := time.Now()
	code, body, h := fx.b.do("POST", "/jobs/bulk", url.Values{"csrf": {fx.token}, "scope": {"filter"}, "labels": {"team=billing"}, "action": {"pause"}, "confirm": {"yes"}})
	took := time.Since(s)
	if code != http.StatusSeeOther {
		t.Fatalf("bulk pause: %d\n%s", code, body)
	}
	var left int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND status = 'active' AND labels @> '{"team":"billing"}'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("bulk pause left %d of %d jobs active", left, want)
	}
	done, _ := url.QueryUnescape(h.Get("Location"))
	t.Logf("bulk pause of %d active jobs labelled team=billing: %s (%.0f jobs/s); %s", want, took.Round(time.Millisecond), float64(want)/took.Seconds(), done)
}
