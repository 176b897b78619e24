//go:build integration

package main_test

import (
	"context"
	"testing"
	"time"
)

// A real worker (in process, against the real Kafka, Redis, Cassandra and
// Postgres) rolls its firings up: within one flush interval after the
// targets were called, firing_minutes counts every firing succeeded, at
// its priority, and its lateness buckets hold one count per attempt; the
// group's lag read from the broker reaches group_lag.
func TestWorkerRollsUpItsFirings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	cfg := e.config("w-rollup")
	cfg.LagInterval = time.Second
	e.startInProcess(cfg)
	base := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	fs := e.schedule(12, 2, base)
	e.produce(fs, nil)
	eventually(t, 60*time.Second, "all firings", func() bool { return e.sink.distinct() == len(fs) })
	ctx := context.Background()
	var succeeded, late, priorities int64
	eventually(t, 30*time.Second, "the rollup counting every firing", func() bool {
		err := e.pg.QueryRow(ctx, `SELECT coalesce(sum(succeeded), 0), count(DISTINCT priority),
			coalesce((SELECT sum(v) FROM firing_minutes, unnest(lateness) AS v WHERE tenant = 'acme'), 0)
			FROM firing_minutes WHERE tenant = 'acme'`).Scan(&succeeded, &priorities, &late)
		return err == nil && succeeded == int64(len(fs)) && late == int64(len(fs))
	})
	if priorities != 4 {
		t.Errorf("rows at %d priorities, want the 4 the firings had", priorities)
	}
	// The running count goes back to 0 by the next flush at the latest.
	eventually(t, 30*time.Second, "no attempt running", func() bool {
		var running int64
		err := e.pg.QueryRow(ctx, `SELECT coalesce(sum(running), -1) FROM worker_running WHERE worker_id = 'w-rollup' AND tenant = 'acme'`).Scan(&running)
		return err == nil && running == 0
	})
	// The group's lag, read from the broker by the worker's lag exporter,
	// reaches group_lag one row per priority topic (the console's
	// platform panel reads it without Prometheus); every firing fired
	// and committed, so none is behind.
	want := map[string]bool{}
	for _, p := range []string{"critical", "high", "medium", "low"} {
		want[e.topics.Prefix+".fire."+p] = true
	}
	eventually(t, 30*time.Second, "the group's lag in group_lag, per priority topic, at 0", func() bool {
		rows, err := e.pg.Query(ctx, `SELECT topic, records FROM group_lag WHERE worker_id = 'w-rollup' AND updated_at > now() - interval '30 seconds'`)
		if err != nil {
			return false
		}
		defer rows.Close()
		seen := 0
		for rows.Next() {
			var topic string
			var records int64
			if rows.Scan(&topic, &records) != nil || !want[topic] || records != 0 {
				return false
			}
			seen++
		}
		return rows.Err() == nil && seen == len(want)
	})
}
