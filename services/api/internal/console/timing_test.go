//go:build integration

package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/testkit/harness"
)

// TestTimingConsolePages measures how long the console's pages take with
// many jobs in one tenant. It only runs when SUNDIAL_CONSOLE_TIMING_JOBS
// names how many. They are loaded with COPY (testkit/harness.CopyJobs, the
// api's row encoding) on one connection, so the load takes one core: daily
// cron jobs at minutes spread over the day (so next-fire windows select a
// share), 1 in 1,000 labelled team=billing, then 1 in 100 paused by SQL.
// Each page is fetched 5 times through the HTTP listener, console,
// loopback gRPC and Postgres; the median and the maximum are logged, e.g.
//
//	SUNDIAL_CONSOLE_TIMING_JOBS=10000000 go test -tags integration -run TestTimingConsolePages -v -timeout 1h ./internal/console/
func TestTimingConsolePages(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SUNDIAL_CONSOLE_TIMING_JOBS"))
	if n <= 0 {
		t.Skip("set SUNDIAL_CONSOLE_TIMING_JOBS to run")
	}
	api := startConsole(t, false)
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	_, page, _ := b.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	code, _, h := b.do("POST", "/jobs/new", url.Values{"csrf": {token}, "name": {"seed"}, "cron": {"@hourly"}, "url": {"http://127.0.0.1:9/hook"}})
	if code != http.StatusSeeOther {
		t.Fatalf("seed: %d", code)
	}
	seed := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	ctx := context.Background()
	start := time.Now()
	loaded, err := harness.CopyJobs(ctx, api.Pool, "acme", n, harness.CopyOptions{Streams: 1, Progress: func(done int) {
		if done%1_000_000 == 0 {
			t.Logf("%d jobs loaded after %s", done, time.Since(start).Round(time.Second))
		}
	}}, func(i int) *sundialv1.Job {
		team := "other"
		if i%1000 == 7 {
			team = "billing"
		}
		return &sundialv1.Job{
			Name: "job-" + strconv.Itoa(i), Labels: map[string]string{"team": team},
			// What the api stores for a job created without one.
			Priority: sundialv1.Priority_PRIORITY_MEDIUM,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}},
		}
	})
	if err != nil {
		t.Fatalf("copy after %d jobs: %v", loaded, err)
	}
	t.Logf("copied %d jobs in %s", loaded, time.Since(start).Round(time.Second))
	s := time.Now()
	if _, err := api.Pool.Exec(ctx, `UPDATE jobs SET status = 'paused', next_fire_at = NULL WHERE tenant = 'acme' AND name LIKE 'job-%00'`); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused 1 in 100 and analyzed in %s", time.Since(s).Round(time.Second))
	// The newest 5 jobs completed: a status that matches few jobs, all at
	// the end of the id order, which a walk of (tenant, id) reaches last.
	if _, err := api.Pool.Exec(ctx, `UPDATE jobs SET status = 'completed', next_fire_at = NULL
		WHERE id IN (SELECT id FROM jobs WHERE tenant = 'acme' ORDER BY id DESC LIMIT 5)`); err != nil {
		t.Fatal(err)
	}

	// And the 5 before them critical, every other job medium: a rare
	// priority among the newest, which a bounded page reaches last.
	if _, err := api.Pool.Exec(ctx, `UPDATE jobs SET priority = 1
		WHERE id IN (SELECT id FROM jobs WHERE tenant = 'acme' ORDER BY id DESC LIMIT 5 OFFSET 5)`); err != nil {
		t.Fatal(err)
	}

	timeIt := func(name, method, path string, form url.Values) {
		var ds []time.Duration
		for range 5 {
			s := time.Now()
			code, _, _ := b.do(method, path, form)
			ds = append(ds, time.Since(s))
			if code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
		}
		slices.Sort(ds)
		t.Logf("%-34s median %9s  max %9s  %s %s", name, ds[2].Round(100*time.Microsecond), ds[4].Round(100*time.Microsecond), method, path)
	}
	get := func(name, path string) { timeIt(name, "GET", path, nil) }
	get("overview", "/")
	get("jobs, first page", "/jobs")
	_, first, _ := b.do("GET", "/jobs", nil)
	if i := strings.Index(first, `href="/jobs?page=`); i > 0 {
		next := first[i+len(`href="`):]
		next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
		get("jobs, second page", next)
	}
	get("jobs, status paused (1%)", "/jobs?status=paused")
	get("jobs, label 0.1%", "/jobs?labels=team%3Dbilling")
	// Next fire in the coming hour (about 1 in 24 of the daily jobs) and in
	// one minute of it (about 1 in 1,440).
	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	get("jobs, next fire in an hour", "/jobs?"+url.Values{"from": {hour.Format("2006-01-02T15:04")}, "before": {hour.Add(time.Hour).Format("2006-01-02T15:04")}}.Encode())
	get("jobs, next fire in a minute", "/jobs?"+url.Values{"from": {hour.Add(30 * time.Minute).Format("2006-01-02T15:04")}, "before": {hour.Add(31 * time.Minute).Format("2006-01-02T15:04")}}.Encode())
	get("jobs, name contains (common)", "/jobs?name=job-1")
	get("jobs, name contains (rare)", "/jobs?name=job-"+strconv.Itoa(n-7))
	// One or two characters: no trigram, so each page examines at most
	// server.ShortNameScan jobs; "zz" matches none, "-1" many.
	get("jobs, name contains zz (none)", "/jobs?name=zz")
	get("jobs, name contains -1 (common)", "/jobs?name=-1")
	get("jobs, status completed (5 newest)", "/jobs?status=completed")
	// Critical and low are read from jobs_tenant_priority (00014): low
	// matches none, critical the 5 newest but 5. Medium, the rest, has no
	// index: each page examines at most server.ShortNameScan jobs.
	get("jobs, priority low (none)", "/jobs?priority=low")
	get("jobs, priority critical (5 newest)", "/jobs?priority=critical")
	get("jobs, priority medium (common)", "/jobs?priority=medium")
	timeIt("bulk pause count, priority critical", "POST", "/jobs/bulk", url.Values{"csrf": {token}, "scope": {"filter"}, "priority": {"critical"}, "action": {"pause"}})
	get("job page", "/jobs/"+seed)
	get("audit", "/audit")
	get("dead letters", "/dead-letters")
	timeIt("bulk pause count, label 0.1%", "POST", "/jobs/bulk", url.Values{"csrf": {token}, "scope": {"filter"}, "labels": {"team=billing"}, "action": {"pause"}})
	timeIt("bulk pause count, all", "POST", "/jobs/bulk", url.Values{"csrf": {token}, "scope": {"filter"}, "action": {"pause"}})

	// The plans at this size, and the status filter and the short search
	// as they were before: without jobs_tenant_status, and a short text
	// through the unbounded List (it walks every job for no match).
	for _, q := range []string{
		`SELECT id FROM jobs WHERE tenant = 'acme' AND status = 'completed' ORDER BY jobs.id LIMIT 51`,
		`SELECT id FROM jobs WHERE tenant = 'acme' AND status = 'paused' ORDER BY jobs.id LIMIT 51`,
	} {
		t.Logf("%s\n%s", q, explainAnalyze(ctx, t, api, q))
	}
	st := store.New(api.Pool)
	for _, text := range []string{"zz", "-1"} {
		var ds []time.Duration
		for range 5 {
			s := time.Now()
			if _, err := st.List(ctx, "acme", store.ListQuery{NameContains: text, Limit: 51}); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(s))
		}
		slices.Sort(ds)
		t.Logf("%-34s median %9s  max %9s  (store.List, unbounded, no page)", "before: name contains "+text, ds[2].Round(100*time.Microsecond), ds[4].Round(100*time.Microsecond))
	}
	if _, err := api.Pool.Exec(ctx, `DROP INDEX jobs_tenant_status`); err != nil {
		t.Fatal(err)
	}
	get("before: status completed (5 newest)", "/jobs?status=completed")
	get("before: status paused (1%)", "/jobs?status=paused")
	t.Logf("without the index:\n%s", explainAnalyze(ctx, t, api, `SELECT id FROM jobs WHERE tenant = 'acme' AND status = 'completed' ORDER BY jobs.id LIMIT 51`))
	if _, err := api.Pool.Exec(ctx, `CREATE INDEX jobs_tenant_status ON jobs (tenant, status, id)`); err != nil {
		t.Fatal(err)
	}

	// The bulk pause itself, once: every job labelled team=billing (1 in
	// 1,000), each its own transaction with an audit row.
	var want int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND status = 'active' AND labels @> '{"team":"billing"}'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	s = time.Now()
	code, body, h := b.do("POST", "/jobs/bulk", url.Values{"csrf": {token}, "scope": {"filter"}, "labels": {"team=billing"}, "action": {"pause"}, "confirm": {"yes"}})
	took := time.Since(s)
	if code != http.StatusSeeOther {
		t.Fatalf("bulk pause: %d\n%s", code, body)
	}
	done, _ := url.QueryUnescape(h.Get("Location"))
	t.Logf("bulk pause of %d active jobs labelled team=billing: %s (%.0f jobs/s); %s", want, took.Round(time.Millisecond), float64(want)/took.Seconds(), done)
}

func explainAnalyze(ctx context.Context, t *testing.T, api *apitest.API, q string) string {
	t.Helper()
	rows, err := api.Pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, "\t"+line)
	}
	return strings.Join(plan, "\n")
}
