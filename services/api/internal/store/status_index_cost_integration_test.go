//go:build integration

package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// TestTimingStatusIndexWriteCost measures what jobs_tenant_status
// (migration 00012) costs the prefetcher's advance of next_fire_at (1,000
// jobs a statement, as its unnest UPDATE; never HOT, next_fire_at being
// indexed), on SUNDIAL_WRITE_COST_JOBS jobs (opt-in) loaded with COPY,
// every other index in place: 200 advances with it and 200 without, in
// alternating rounds of 50, e.g.
//
//	SUNDIAL_WRITE_COST_JOBS=1000000 go test -tags integration -run TestTimingStatusIndexWriteCost -v -timeout 30m ./internal/store/
func TestTimingStatusIndexWriteCost(t *testing.T) {
	indexWriteCost(t, "jobs_tenant_status", `CREATE INDEX jobs_tenant_status ON jobs (tenant, status, id)`, sundialv1.Priority_PRIORITY_MEDIUM)
}

// TestTimingPriorityIndexWriteCost is the same for jobs_tenant_priority
// (00014) in its worst case: every job HIGH, so every job is in the
// partial index and every advance updates it (MEDIUM jobs, outside it,
// pay nothing).
func TestTimingPriorityIndexWriteCost(t *testing.T) {
	indexWriteCost(t, "jobs_tenant_priority", `CREATE INDEX jobs_tenant_priority ON jobs (tenant, priority, id) WHERE priority <> 3`, sundialv1.Priority_PRIORITY_HIGH)
}

// indexWriteCost times the advance with and without the index named,
// which create builds, on jobs of the given priority.
func indexWriteCost(t *testing.T, index, create string, priority sundialv1.Priority) {
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
			Priority: priority,
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://hooks.example/job"}}},
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d jobs in %s", n, time.Since(s).Round(time.Second))
	rows, err := pool.Query(ctx, `SELECT id::text FROM jobs ORDER BY next_fire_at, id LIMIT 400000`)
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
	// Each advance's time, by whether the index was there. The two
	// conditions alternate in rounds (drop, build, drop, …) so that load
	// from elsewhere on the machine falls on both alike.
	times := map[bool][]time.Duration{}
	advance := func(with bool, ids []string) {
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
			t.Fatal(err)
		}
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		for b := 0; b+1000 <= len(ids); b += 1000 {
			s := time.Now()
			if _, err := conn.Exec(ctx, `
UPDATE jobs AS j
   SET next_fire_at = j.next_fire_at + interval '1 day', last_slot_at = j.next_fire_at
  FROM unnest($1::uuid[]) AS u(id)
 WHERE j.id = u.id`, ids[b:b+1000]); err != nil {
				t.Fatal(err)
			}
			times[with] = append(times[with], time.Since(s))
		}
	}
	for r := range 4 {
		advance(true, ids[r*100000:r*100000+50000])
		if _, err := pool.Exec(ctx, `DROP INDEX `+index); err != nil {
			t.Fatal(err)
		}
		advance(false, ids[r*100000+50000:(r+1)*100000])
		s := time.Now()
		if _, err := pool.Exec(ctx, create); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: built %s over %d jobs in %s", r+1, index, n, time.Since(s).Round(100*time.Millisecond))
	}
	for _, with := range []bool{true, false} {
		ds := times[with]
		var total time.Duration
		for _, d := range ds {
			total += d
		}
		slices.Sort(ds)
		t.Logf("with %s %-5v %d advances of 1,000: median %s, p90 %s, mean %s", index, with, len(ds),
			ds[len(ds)/2].Round(100*time.Microsecond), ds[len(ds)*9/10].Round(100*time.Microsecond), (total / time.Duration(len(ds))).Round(100*time.Microsecond))
	}
}
