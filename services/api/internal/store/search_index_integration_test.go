//go:build integration

package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// A name search that matches few jobs reads them through the trigram
// index jobs_name_trgm (migration 00010) instead of walking the tenant's
// (tenant, id) index until a page fills: 2 s at 10,000,000 jobs before.
// The text is matched as written, LIKE's % _ \ included.
func TestIntegrationNameSearchUsesTheTrigramIndex(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	pgtest.CopyJobs(t, pool, 50000, func(i int) *sundialv1.Job {
		return &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: fmt.Sprintf("Job-%d", i+1)}
	})
	for _, name := range []string{`100% done`, `1000 done`, `a_b`, `axb`, `back\slash`} {
		pgtest.InsertJob(t, pool, &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: name}, "NULL")
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	sql, args := listSQL("acme", ListQuery{Limit: 51, NameContains: "JOB-49999"})
	if plan := explain(ctx, t, pool, sql, args); !strings.Contains(plan, "jobs_name_trgm") {
		t.Errorf("a rare name is not searched through jobs_name_trgm:\n%s", plan)
	}

	s := New(pool)
	for text, want := range map[string][]string{
		"JOB-49999": {"Job-49999"},
		"0%":        {"100% done"},
		"a_b":       {"a_b"},
		`k\s`:       {`back\slash`},
	} {
		jobs, err := s.List(ctx, "acme", ListQuery{Limit: 51, NameContains: text})
		if err != nil {
			t.Fatal(err)
		}
		// The spec (and so GetName) is empty in these rows; the names
		// are the column's.
		var got []string
		for _, j := range jobs {
			var name string
			if err := pool.QueryRow(ctx, `SELECT name FROM jobs WHERE id = $1`, j.GetId()).Scan(&name); err != nil {
				t.Fatal(err)
			}
			got = append(got, name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("name contains %q: got %q, want %q", text, got, want)
		}
	}
}

// The tenant-wide audit trail of a quiet tenant reads its own range of
// job_audit_tenant (migration 00010), not every tenant's recent rows
// through the primary key.
func TestIntegrationTenantAuditUsesItsIndex(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO job_audit (job_id, tenant, actor, action, version)
		SELECT gen_random_uuid(), CASE WHEN g % 500 = 0 THEN 'quiet' ELSE 'busy' END, 'a', 'update', 1
		FROM generate_series(1, 50000) g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE job_audit`); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT id FROM job_audit WHERE tenant = $1 ORDER BY id DESC LIMIT $2`
	if plan := explain(ctx, t, pool, q, []any{"quiet", 51}); !strings.Contains(plan, "job_audit_tenant") || strings.Contains(plan, "Sort") {
		t.Errorf("the tenant's trail is not a backward scan of job_audit_tenant:\n%s", plan)
	}
	got, err := New(pool).ListAudit(ctx, "quiet", AuditQuery{Limit: 51})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 51 || got[0].Seq != 50000 || got[1].Seq != 49500 {
		t.Errorf("quiet's trail: %d entries, first %d then %d; want 51, 50000, 49500", len(got), got[0].Seq, got[1].Seq)
	}
}

func explain(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, args []any) string {
	t.Helper()
	rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
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
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
