//go:build integration

package rollup

import (
	"context"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/firingstats"
	"github.com/sundialhq/sundial/pkg/migrations"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Against the real Postgres: two workers count firings of the same
// tenant's minute; their flushes (each one statement) add up in one row,
// lateness bucket by bucket, a later flush of the same minute adds again,
// each worker's running count is its own row, and Expire deletes only
// what is past retention.
func TestTwoWorkersRowsMergeInPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testinfra.Postgres(t)
	if err := migrations.Up(ctx, pool, discardLog); err != nil {
		t.Fatal(err)
	}
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
