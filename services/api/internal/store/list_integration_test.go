//go:build integration

package store

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sundialhq/sundial/pkg/migrations"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Every ListJobs page is an index range scan on (tenant, id) wherever
// the page starts (a status filter has its own index:
// TestIntegrationStatusFilterUsesItsIndex): no sort of the
// tenant's jobs, so page 10,000 costs what page 1 does. (Ordering by the
// id::text output column once made every page a scan and sort.)
func TestIntegrationListUsesTheTenantIDIndex(t *testing.T) {
	ctx := context.Background()
	pool := testinfra.Postgres(t)
	if err := migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO jobs (id, tenant, name, spec, priority, status, partition)
		SELECT gen_random_uuid(), CASE WHEN g % 10 = 0 THEN 'other' ELSE 'acme' END, 'j' || g, '\x00', 3,
		       CASE WHEN g % 100 = 0 THEN 'paused' ELSE 'active' END, g % 256
		FROM generate_series(1, 50000) g`)
	if err != nil {
		t.Fatal(err)
	}
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
