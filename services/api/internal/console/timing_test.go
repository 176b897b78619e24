//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// TestTimingConsolePages measures how long the console's pages take with
// many jobs in one tenant. It only runs when SUNDIAL_CONSOLE_TIMING_JOBS
// names how many (it inserts them with SQL, copies of one real job: 1 in
// 100 paused, 1 in 1,000 labelled team=billing), e.g.
//
//	SUNDIAL_CONSOLE_TIMING_JOBS=1000000 go test -tags integration -run TestTimingConsolePages -v ./internal/console/
func TestTimingConsolePages(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SUNDIAL_CONSOLE_TIMING_JOBS"))
	if n <= 0 {
		t.Skip("set SUNDIAL_CONSOLE_TIMING_JOBS to run")
	}
	api := startConsole(t, false)
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	_, page, _ := b.do("GET", "/jobs/new", nil)
	code, _, h := b.do("POST", "/jobs/new", url.Values{"csrf": {csrf(t, page)}, "name": {"seed"}, "cron": {"@hourly"}, "url": {"http://127.0.0.1:9/hook"}})
	if code != http.StatusSeeOther {
		t.Fatalf("seed: %d", code)
	}
	seed := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
	ctx := context.Background()
	start := time.Now()
	_, err := api.Pool.Exec(ctx, `
		INSERT INTO jobs (id, tenant, name, labels, spec, priority, status, version, partition, next_fire_at, created_at, updated_at)
		SELECT gen_random_uuid(), j.tenant, 'job-' || g, CASE WHEN g % 1000 = 0 THEN '{"team":"billing"}'::jsonb ELSE '{"team":"other"}'::jsonb END,
		       j.spec, j.priority, CASE WHEN g % 100 = 0 THEN 'paused' ELSE 'active' END, 1, g % 256,
		       CASE WHEN g % 100 = 0 THEN NULL ELSE j.next_fire_at END, j.created_at, j.updated_at
		FROM jobs j, generate_series(1, $2) g WHERE j.id = $1`, seed, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	t.Logf("inserted %d jobs in %s", n, time.Since(start).Round(time.Millisecond))

	timeIt := func(name, path string) {
		var ds []time.Duration
		for range 5 {
			s := time.Now()
			code, _, _ := b.do("GET", path, nil)
			ds = append(ds, time.Since(s))
			if code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
		}
		slices.Sort(ds)
		t.Logf("%-28s median %8s  max %8s  %s", name, ds[2].Round(100*time.Microsecond), ds[4].Round(100*time.Microsecond), path)
	}
	timeIt("overview", "/")
	timeIt("jobs, first page", "/jobs")
	_, first, _ := b.do("GET", "/jobs", nil)
	if i := strings.Index(first, `href="/jobs?page=`); i > 0 {
		next := first[i+len(`href="`):]
		next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
		timeIt("jobs, second page", next)
	}
	timeIt("jobs, status paused (1%)", "/jobs?status=paused")
	timeIt("jobs, label 0.1%", "/jobs?labels=team%3Dbilling")
	timeIt("job page", "/jobs/"+seed)
	timeIt("dead letters", "/dead-letters")
}
