//go:build integration

package rollup

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// Against the real Postgres: two workers count firings of the same
// tenant's minute; their flushes (each one statement) add up in one row,
// lateness bucket by bucket, a later flush of the same minute adds again,
// each worker's running count is its own row, and Expire deletes only
// what is past retention.
func TestTwoWorkersRowsMergeInPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Migrated(t)
	t0 := time.Date(2026, 11, 28, 12, 0, 10, 0, time.UTC)
	clk := clock.NewFake(t0)
	a := New(Config{WorkerID: "worker-a"}, NewPG(pool), clk, discardLog)
	b := New(Config{WorkerID: "worker-b"}, NewPG(pool), clk, discardLog)
	hi := sundialv1.Priority_PRIORITY_HIGH
	for range 3 {
		a.Started("acme", hi, 0.0012) // bucket 2
		a.Outcome("acme", hi, "succeeded")
		a.Finished("acme")
	}
	a.Started("acme", hi, 0.004) // bucket 5, still running
	b.Started("acme", hi, 0.0012)
	b.Outcome("acme", hi, "dead")
	b.Outcome("acme", hi, "fenced")
	b.Outcome("globex", sundialv1.Priority_PRIORITY_LOW, "succeeded")
	for _, r := range []*Rollup{a, b} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Outcome("acme", hi, "succeeded")
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var succeeded, dead, other int64
	var lateness []int64
	if err := pool.QueryRow(ctx, `SELECT succeeded, dead, other, lateness FROM firing_minutes WHERE tenant = 'acme' AND minute = $1 AND priority = $2`,
		t0.Truncate(time.Minute), int16(hi)).Scan(&succeeded, &dead, &other, &lateness); err != nil {
		t.Fatal(err)
	}
	if succeeded != 4 || dead != 1 || other != 1 {
		t.Errorf("succeeded %d dead %d other %d, want 4 1 1", succeeded, dead, other)
	}
	if len(lateness) != firingstats.Buckets || lateness[2] != 4 || lateness[5] != 1 {
		t.Errorf("lateness %v, want 4 in bucket 2 and 1 in bucket 5", lateness)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM firing_minutes`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Errorf("%d rows, want acme's and globex's", rows)
	}
	var running int
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(running), 0) FROM worker_running WHERE tenant = 'acme'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 2 { // a's last attempt and b's
		t.Errorf("running %d, want 2", running)
	}

	if err := NewPG(pool).Expire(ctx, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM firing_minutes`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("rows inside retention deleted: %d (%v)", rows, err)
	}
	if err := NewPG(pool).Expire(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM firing_minutes`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("rows past retention kept: %d (%v)", rows, err)
	}
}

// Against the real Postgres: the group's lag per topic is upserted by
// whichever worker flushes, the newest write winning, with the database's
// clock as its time.
func TestGroupLagIsUpsertedPerTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Migrated(t)
	clk := clock.NewFake(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	a := New(Config{WorkerID: "worker-a"}, NewPG(pool), clk, discardLog)
	b := New(Config{WorkerID: "worker-b"}, NewPG(pool), clk, discardLog)
	a.SetLag(map[string]int64{"fire.high": 120, "fire.low": 3})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.SetLag(map[string]int64{"fire.high": 40})
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT topic, records, worker_id, now() - updated_at < interval '1 minute' FROM group_lag`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var topic, worker string
		var records int64
		var fresh bool
		if err := rows.Scan(&topic, &records, &worker, &fresh); err != nil {
			t.Fatal(err)
		}
		got[topic] = fmt.Sprintf("%d by %s fresh=%v", records, worker, fresh)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"fire.high": "40 by worker-b fresh=true", "fire.low": "3 by worker-a fresh=true"}
	if !maps.Equal(got, want) {
		t.Fatalf("group_lag %v, want %v", got, want)
	}
}
