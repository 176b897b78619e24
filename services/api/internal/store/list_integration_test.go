//go:build integration

package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// Every ListJobs page is an index range scan on (tenant, id) wherever
// the page starts (a status filter has its own index:
// TestIntegrationStatusFilterUsesItsIndex): no sort of the
// tenant's jobs, so page 10,000 costs what page 1 does. (Ordering by the
// id::text output column once made every page a scan and sort.)
func TestIntegrationListUsesTheTenantIDIndex(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	// Random (version 4) ids, spread over the whole id range the pages
	// below start from.
	pgtest.CopyJobs(t, pool, 50000, func(i int) *sundialv1.Job {
		g := i + 1
		j := &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: fmt.Sprintf("j%d", g)}
		if g%10 == 0 {
			j.Tenant = "other"
		}
		if g%100 == 0 {
			j.Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		return j
	})
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []ListQuery{
		{Limit: 101},
		{Limit: 101, After: "80000000-0000-4000-8000-000000000000"},
		{Limit: 101, NameContains: "J1"},
	} {
		sql, args := listSQL("acme", q)
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "jobs_tenant_id") || strings.Contains(text, "Sort") {
			t.Errorf("%+v: the page is not an index range scan:\n%s", q, text)
		}
	}
}
