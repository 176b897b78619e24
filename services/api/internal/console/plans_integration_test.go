//go:build integration

package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// planOf runs EXPLAIN (ANALYZE, FORMAT JSON) and returns the plan's JSON
// and its execution time; noSeqScan plans with sequential scans priced
// out (enable_seqscan off, in a transaction of its own).
func planOf(t *testing.T, pool *pgxpool.Pool, noSeqScan bool, sql string, args ...any) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if noSeqScan {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			t.Fatal(err)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var out []struct {
		ExecutionTime float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("explain: %v %s", err, raw)
	}
	return string(raw), time.Duration(out[0].ExecutionTime * float64(time.Millisecond))
}

// indexNames finds the indexes a JSON plan reads.
var indexNames = regexp.MustCompile(`dead_letters_[a-z_]+`)

// TestIntegrationConsolePlansNamesAndGroups checks the query plans of the
// console's two Postgres reads against a tenant of 100,000 jobs and
// 10,000 dead letters (and another tenant's 70,000 beside them), analysed as a live
// database would be: the job filter's prefix read is a range of
// jobs_tenant_name_prefix in its order (no sort, no scan of the table),
// whatever the prefix matches; each dead-letter grouping is an
// index-only scan of an index that covers it (index-only when the
// visibility map is current): dead_letters_tenant_host for the target
// host, it or dead_letters_tenant_class_job for the class and the job. The sweep's read of the
// rows whose host is not stored yet is a scan of
// dead_letters_host_unknown, which holds those rows only. A missing
// index or a plan that degrades to a scan fails here.
func TestIntegrationConsolePlansNamesAndGroups(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	jobs := createJobs(t, api, "seed")
	pgtest.CopyJobs(t, api.Pool, 125000, func(n int) *sundialv1.Job {
		i := n + 1
		j := &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: fmt.Sprintf("job-%d", i)}
		if i%5 == 0 {
			j.Tenant = "globex"
		}
		if i%100 == 0 {
			j.Name = fmt.Sprintf("Billing-%d", i)
		}
		return j
	})
	seed := api.DeadLetter(t, jobs["seed"], time.Now().Add(-time.Hour), "http_5xx")
	if _, err := api.Pool.Exec(ctx, `
		INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, http_status, attempts, last_attempt, envelope, dead_at, target_host)
		SELECT gen_random_uuid(), CASE WHEN i % 8 = 0 THEN 'acme' ELSE 'globex' END,
		       (SELECT id FROM jobs WHERE tenant = 'acme' ORDER BY id OFFSET (i % 500) LIMIT 1),
		       (ARRAY['http_5xx', 'timeout', 'connect', 'http_4xx'])[1 + (i / 8) % 4], last_error, http_status, attempts, last_attempt, envelope,
		       dead_at - i * interval '1 second', 'host-' || i % 37 || '.example:8443'
		  FROM dead_letters, generate_series(1, 79999) i WHERE execution_id = $1`, seed); err != nil {
		t.Fatal(err)
	}
	// A few hundred written before hosts were stored, still to be filled.
	if _, err := api.Pool.Exec(ctx, `UPDATE dead_letters SET target_host = NULL
		WHERE execution_id IN (SELECT execution_id FROM dead_letters ORDER BY execution_id LIMIT 300)`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobs", "dead_letters"} {
		if _, err := api.Pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			t.Fatal(err)
		}
	}

	for _, prefix := range []string{"j", "job-1", "billing-", "BILLING-99", "nosuch"} {
		plan, took := planOf(t, api.Pool, false, console.JobsByPrefixSQL, "acme", prefix, 21)
		if !strings.Contains(plan, `"Index Name": "jobs_tenant_name_prefix"`) || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, `"Node Type": "Sort"`) {
			t.Errorf("prefix %q: the read is not a range of jobs_tenant_name_prefix in its order: %s", prefix, plan)
		}
		t.Logf("prefix %q: %s", prefix, took)
	}

	// The groups read a tenant's rows, which lie on most of the table's
	// pages (dead letters of every tenant arrive interleaved): the
	// index-only scan beats reading the table only while the visibility
	// map is current, as it is on a table autovacuum keeps up with. On
	// this shared database other tests' transactions can hold the vacuum
	// back; then the plan is asked for with sequential scans priced out,
	// and must still read only the tenant's range of an index.
	var pages, visible int64
	if err := api.Pool.QueryRow(ctx, `SELECT relpages, relallvisible FROM pg_class WHERE oid = 'dead_letters'::regclass`).Scan(&pages, &visible); err != nil {
		t.Fatal(err)
	}
	current := visible >= pages
	for _, f := range []struct{ job, class string }{{"", ""}, {"", "timeout"}, {jobs["seed"].GetId(), ""}} {
		for name, q := range console.DeadLetterGroupQueries("acme", f.job, f.class) {
			plan, took := planOf(t, api.Pool, !current, q[0].(string), q[1:]...)
			// With a current visibility map: an index-only scan of an
			// index that covers the grouping — only
			// dead_letters_tenant_host for the host; for the class and
			// the job either it (which includes both columns) or
			// dead_letters_tenant_class_job, as the planner prices them.
			// Without one, any index range of the tenant's rows (the
			// planner may take the older (tenant, dead_at) index for a
			// bitmap scan), never the table.
			covering := []string{"dead_letters_tenant_class_job", "dead_letters_tenant_host"}
			if name == "Host" {
				covering = covering[1:]
			}
			covered := slices.ContainsFunc(covering, func(index string) bool { return strings.Contains(plan, `"Index Name": "`+index+`"`) })
			if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, `(tenant = 'acme'::text)`) && !strings.Contains(plan, `(tenant = $1)`) ||
				current && f.job == "" && (!strings.Contains(plan, `"Node Type": "Index Only Scan"`) || !covered) {
				t.Errorf("%s groups (job %q, class %q; visibility map current: %v): not an index-only range of the tenant's rows in %v: %s", name, f.job, f.class, current, covering, plan)
			}
			t.Logf("%s groups over acme's 10,000 dead letters of 80,000 (job %q, class %q): %s; index-only: %v, indexes %v (visibility map current: %v)",
				name, f.job, f.class, took, strings.Contains(plan, "Index Only Scan"), indexNames.FindAllString(plan, -1), current)
		}
	}

	// The sweep's batch of rows without a host: 300 of 80,000, read
	// through the partial index that holds just them.
	plan, took := planOf(t, api.Pool, false, console.HostsToFillSQL, 1000)
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, `"Index Name": "dead_letters_host_unknown"`) || !strings.Contains(plan, `"Actual Rows": 300`) {
		t.Errorf("the sweep's read of rows without a host is not a scan of dead_letters_host_unknown: %s", plan)
	}
	t.Logf("the sweep's read of 300 rows without a host among 80,000: %s", took)
}
