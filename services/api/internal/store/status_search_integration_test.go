//go:build integration

package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// A status filter reads its own range of jobs_tenant_status (migration
// 00012) in id order, for every status and from any keyset position: the
// few completed jobs here are the newest, which a walk of (tenant, id)
// would reach only after every other job.
func TestIntegrationStatusFilterUsesItsIndex(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	// 50,000 jobs in id order (ids from the series, so "newest" is
	// deterministic): the last 5 completed, 1 in 100 paused.
	pgtest.CopyJobs(t, pool, 50000, func(i int) *sundialv1.Job {
		g := i + 1
		status := sundialv1.JobStatus_JOB_STATUS_ACTIVE
		if g > 49995 {
			status = sundialv1.JobStatus_JOB_STATUS_COMPLETED
		} else if g%100 == 0 {
			status = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		return &sundialv1.Job{Id: fmt.Sprintf("00000000-0000-7000-8000-%012x", g), Tenant: "acme", Name: fmt.Sprintf("j%d", g), Status: status}
	})
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []ListQuery{
		{Limit: 51, Status: sundialv1.JobStatus_JOB_STATUS_COMPLETED},
		{Limit: 51, Status: sundialv1.JobStatus_JOB_STATUS_PAUSED},
		{Limit: 51, Status: sundialv1.JobStatus_JOB_STATUS_PAUSED, After: "00000000-0000-7000-8000-000000002000"},
	} {
		sql, args := listSQL("acme", q)
		if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "jobs_tenant_status") || strings.Contains(plan, "Sort") {
			t.Errorf("%+v: not a range scan of jobs_tenant_status:\n%s", q, plan)
		}
	}
	// The common status may instead walk the id order, filling the page
	// at once; never a sort.
	sql, args := listSQL("acme", ListQuery{Limit: 51, Status: sundialv1.JobStatus_JOB_STATUS_ACTIVE})
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "Index") || strings.Contains(plan, "Sort") {
		t.Errorf("active: not an index range scan:\n%s", plan)
	}
	jobs, err := New(pool).List(ctx, "acme", ListQuery{Limit: 51, Status: sundialv1.JobStatus_JOB_STATUS_COMPLETED})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.GetId())
	}
	var want []string
	for g := 49996; g <= 50000; g++ {
		want = append(want, fmt.Sprintf("00000000-0000-7000-8000-%012x", g))
	}
	if !slices.Equal(got, want) {
		t.Errorf("completed jobs: got %v, want %v", got, want)
	}
}

// NameIndexable is whether pg_trgm can take a trigram from the text:
// three letters or digits in a row.
func TestNameIndexable(t *testing.T) {
	for text, want := range map[string]bool{
		"": false, "a": false, "ab": false, "-1": false, "a.b": false, "ab-cd": false,
		"abc": true, "job-1": true, "x123": true, "été": true, "a b c": false,
	} {
		if got := NameIndexable(text); got != want {
			t.Errorf("NameIndexable(%q) = %v, want %v", text, got, want)
		}
	}
}

// A name search with no trigram examines at most scan jobs a page in id
// order (an index range scan that stops there, no sort, no read of the
// tenant's other jobs), returns the matches among them and says where the
// next page resumes; paged to the end it finds every match exactly once,
// with the other filters and LIKE's wildcards as written.
func TestIntegrationShortNameSearchIsBounded(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	// 20,000 jobs "j<g>"; 7 of them (spread, one paused) named with "Zq",
	// and one "5%" to check the escaping.
	pgtest.CopyJobs(t, pool, 20000, func(i int) *sundialv1.Job {
		g := i + 1
		j := &sundialv1.Job{Id: fmt.Sprintf("00000000-0000-7000-8000-%012x", g), Tenant: "acme", Name: fmt.Sprintf("j%d", g)}
		if g%10 == 3 {
			j.Tenant = "other"
		}
		switch g {
		case 5, 2500, 2501, 9000, 15000, 19998, 20000:
			j.Name = fmt.Sprintf("x-zQ-%d", g)
		case 777:
			j.Name = "5% off"
		}
		if g == 9000 {
			j.Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		return j
	})
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	sql, args := boundedSQL("acme", ListQuery{Limit: 51, NameContains: "zq"}, 1000)
	// jobs_tenant_id, or the primary key when the planner expects the
	// tenant's rows to fill the window as fast: an id-order range scan.
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "Index Scan using jobs_") || strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the bounded search is not an id-order index scan:\n%s", plan)
	}
	var examined int
	// EXPLAIN ANALYZE: the index scan under the window stops at the bound
	// (the window reads one row ahead, to see the last row's peers).
	rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var plan []map[string]any
		if err := rows.Scan(&plan); err != nil {
			t.Fatal(err)
		}
		examined = scannedRows(plan[0]["Plan"].(map[string]any))
	}
	rows.Close()
	if examined == 0 || examined > 1001 {
		t.Errorf("the first page read %d rows of jobs, want at most the bound 1000 and one", examined)
	}

	s := New(pool)
	name := func(id string) string {
		var n string
		if err := pool.QueryRow(ctx, `SELECT name FROM jobs WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	page := func(q ListQuery, scan int) (names []string, pages int) {
		for {
			pages++
			jobs, resume, err := s.ListBounded(ctx, "acme", q, scan)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				names = append(names, name(j.GetId()))
			}
			switch {
			case len(jobs) == q.Limit:
				q.After = jobs[len(jobs)-1].GetId()
			case resume != "":
				q.After = resume
			default:
				return names, pages
			}
		}
	}
	all := []string{"x-zQ-5", "x-zQ-2500", "x-zQ-2501", "x-zQ-9000", "x-zQ-15000", "x-zQ-19998", "x-zQ-20000"}
	// 18,000 of acme's jobs, 1,000 examined a page: 18 pages, and one more
	// that finds the window empty past the last.
	if got, pages := page(ListQuery{Limit: 51, NameContains: "zq"}, 1000); !slices.Equal(got, all) || pages > 19 {
		t.Errorf("zq by 1,000: %q in %d pages, want %q in at most 19", got, pages, all)
	}
	// A page that fills before the bound continues from its last job.
	if got, _ := page(ListQuery{Limit: 2, NameContains: "ZQ"}, 1000); !slices.Equal(got, all) {
		t.Errorf("ZQ 2 a page: %q, want %q", got, all)
	}
	if got, pages := page(ListQuery{Limit: 51, NameContains: "zq"}, 100_000); !slices.Equal(got, all) || pages != 1 {
		t.Errorf("zq in one window: %q in %d pages, want %q in 1", got, pages, all)
	}
	if got, _ := page(ListQuery{Limit: 51, NameContains: "zq", Status: sundialv1.JobStatus_JOB_STATUS_PAUSED}, 1000); !slices.Equal(got, []string{"x-zQ-9000"}) {
		t.Errorf("zq, paused: %q", got)
	}
	if got, _ := page(ListQuery{Limit: 51, NameContains: "%"}, 5000); !slices.Equal(got, []string{"5% off"}) {
		t.Errorf("%%: %q, want the one name with a %%", got)
	}

	// ListBounded takes a priority too (the api sends MEDIUM, which no
	// index holds, this way): five critical jobs, one of them a zq, one
	// another tenant's.
	if _, err := pool.Exec(ctx, `UPDATE jobs SET priority = 1 WHERE name IN ('j1', 'x-zQ-2501', 'j9001', 'j19999', 'j13')`); err != nil {
		t.Fatal(err)
	}
	crit := sundialv1.Priority_PRIORITY_CRITICAL
	sql, args = boundedSQL("acme", ListQuery{Limit: 51, Priority: crit}, 1000)
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "Index Scan using jobs_") || strings.Contains(plan, "Sort") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the bounded priority filter is not an id-order index scan:\n%s", plan)
	}
	if got, pages := page(ListQuery{Limit: 51, Priority: crit}, 1000); !slices.Equal(got, []string{"j1", "x-zQ-2501", "j9001", "j19999"}) || pages > 19 {
		t.Errorf("critical by 1,000: %q in %d pages", got, pages)
	}
	if got, _ := page(ListQuery{Limit: 51, Priority: crit, NameContains: "zq"}, 1000); !slices.Equal(got, []string{"x-zQ-2501"}) {
		t.Errorf("critical zq: %q", got)
	}
	if got, _ := page(ListQuery{Limit: 51, Priority: sundialv1.Priority_PRIORITY_LOW}, 1000); len(got) != 0 {
		t.Errorf("low: %q, want none", got)
	}
	// The bulk actions' count is not bounded.
	if n, err := s.Count(ctx, "acme", ListQuery{Priority: crit}, 1000); err != nil || n != 4 {
		t.Errorf("count of critical jobs: %d %v, want 4", n, err)
	}
	// Any other priority than MEDIUM is read from jobs_tenant_priority
	// (00014), in id order, for a page and for a count: the rows of that
	// priority and nothing else.
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	sql, args = listSQL("acme", ListQuery{Limit: 51, Priority: crit})
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "jobs_tenant_priority") || strings.Contains(plan, "Sort") {
		t.Errorf("a page of critical jobs does not read jobs_tenant_priority in id order:\n%s", plan)
	}
	if jobs, err := s.List(ctx, "acme", ListQuery{Limit: 51, Priority: crit}); err != nil || len(jobs) != 4 {
		t.Errorf("List of critical jobs: %d %v, want 4", len(jobs), err)
	}
	sql, args = listSQL("acme", ListQuery{Limit: 51, Priority: crit, After: "00000000-0000-7000-8000-000000002000"})
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "jobs_tenant_priority") {
		t.Errorf("a later page of critical jobs does not read jobs_tenant_priority:\n%s", plan)
	}
}

// scannedRows sums the rows the plan's scans of jobs returned.
func scannedRows(node map[string]any) int {
	n := 0
	if rel, _ := node["Relation Name"].(string); rel == "jobs" {
		n += int(node["Actual Rows"].(float64))
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			n += scannedRows(k.(map[string]any))
		}
	}
	return n
}
