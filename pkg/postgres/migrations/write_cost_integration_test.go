//go:build integration

package migrations_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// TestTimingNameIndexWriteCost measures what the trigram index on job
// names (migration 00010) costs the prefetcher: its advance of
// next_fire_at, 1,000 jobs a statement as the prefetcher's unnest UPDATE
// does, with the index and after dropping it, on a table of
// SUNDIAL_WRITE_COST_JOBS jobs (opt-in) loaded with COPY. It logs the
// median time per 1,000-job advance and how many of the updates were HOT,
// e.g.
//
//	SUNDIAL_WRITE_COST_JOBS=1000000 go test -tags integration -run TestTimingNameIndexWriteCost -v -timeout 30m ./postgres/migrations/
func TestTimingNameIndexWriteCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SUNDIAL_WRITE_COST_JOBS"))
	if n <= 0 {
		t.Skip("set SUNDIAL_WRITE_COST_JOBS to run")
	}
	ctx := context.Background()
	pool := pgtest.Migrated(t)
	s := time.Now()
	if _, err := harness.CopyJobs(ctx, pool, "acme", n, harness.CopyOptions{Streams: 1}, func(i int) *sundialv1.Job {
		return &sundialv1.Job{
			Name:     "job-" + strconv.Itoa(i),
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}},
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d jobs (with jobs_name_trgm) in %s", n, time.Since(s).Round(time.Second))

	// The ids in next-fire order, as the prefetcher claims them.
	rows, err := pool.Query(ctx, `SELECT id::text FROM jobs ORDER BY next_fire_at, id LIMIT 200000`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	advance := func(label string, ids []string) {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
			t.Fatal(err)
		}
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		upd, hot := tupleStats(ctx, t, pool)
		var ds []time.Duration
		for b := 0; b+1000 <= len(ids); b += 1000 {
			s := time.Now()
			// The prefetcher's advanceSQL: next_fire_at and last_slot_at,
			// name untouched.
			if _, err := conn.Exec(ctx, `
UPDATE jobs AS j
   SET next_fire_at = j.next_fire_at + interval '1 day', last_slot_at = j.next_fire_at
  FROM unnest($1::uuid[]) AS u(id)
 WHERE j.id = u.id`, ids[b:b+1000]); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(s))
		}
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		conn.Release()
		upd2, hot2 := tupleStats(ctx, t, pool)
		var total time.Duration
		for _, d := range ds {
			total += d
		}
		slices.Sort(ds)
		t.Logf("%-28s %d advances of 1,000: median %s, p90 %s, total %s (%.0f rows/s); updates %d, HOT %d",
			label, len(ds), ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)*9/10].Round(100*time.Microsecond),
			total.Round(time.Millisecond), float64(len(ds)*1000)/total.Seconds(), upd2-upd, hot2-hot)
	}
	advance("with jobs_name_trgm", ids[:100000])
	if _, err := pool.Exec(ctx, `DROP INDEX jobs_name_trgm`); err != nil {
		t.Fatal(err)
	}
	advance("without jobs_name_trgm", ids[100000:])
	s = time.Now()
	if _, err := pool.Exec(ctx, `CREATE INDEX jobs_name_trgm ON jobs USING gin (lower(name) public.gin_trgm_ops)`); err != nil {
		t.Fatal(err)
	}
	t.Logf("built jobs_name_trgm over %d jobs in %s", n, time.Since(s).Round(100*time.Millisecond))
	advance("with jobs_name_trgm, rebuilt", ids[:100000])
}

// tupleStats reads the cumulative updates of jobs and how many were HOT.
func tupleStats(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (upd, hot int64) {
	t.Helper()
	if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass`).Scan(&upd, &hot); err != nil {
		t.Fatal(err)
	}
	return upd, hot
}
