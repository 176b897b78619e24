//go:build integration

package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// rangeRows is each range's leader_epochs row (by range number), written
// by the leader of the range on every pass.
func rangeRows(t *testing.T, pool *pgxpool.Pool, election string) map[int]epochRow {
	rows, err := pool.Query(context.Background(), `SELECT election, leader, epoch, updated_at FROM leader_epochs WHERE election LIKE $1 || '/ranges/%'`, election)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int]epochRow{}
	for rows.Next() {
		var e string
		var r epochRow
		require.NoError(t, rows.Scan(&e, &r.leader, &r.epoch, &r.updated))
		var n int
		_, err := fmt.Sscanf(e[len(election)+len("/ranges/"):], "r%04d", &n)
		require.NoError(t, err)
		out[n] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// Partitioned prefetch with the built binary: two prefetchers lead half
// the ranges each at once; kill -9 one and its ranges are led by the other
// within the session timeout (plus a tick); no slot of 64 per-second jobs
// is lost or doubled.
func TestKillDashNineRangeLeaderItsRangesMove(t *testing.T) {
	bin := buildBinary(t)
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	_, root := testinfra.ZooKeeper(t)
	election := root + "/election"

	var jobs []uuid.UUID
	for range 64 {
		jobs = append(jobs, pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `date_trunc('second', now()) + interval '1 second'`))
	}
	// A short window, so the survivor must stage most of the run itself.
	args := []string{"--ranges", "16", "--window", "5s", "--tick", "200ms"}
	pa := startProc(t, bin, "proc-a", dsn, election, args...)
	pb := startProc(t, bin, "proc-b", dsn, election, args...)
	require.Eventually(t, func() bool {
		return pa.metric(t, "sundial_prefetcher_ranges_led") == "8" && pb.metric(t, "sundial_prefetcher_ranges_led") == "8"
	}, 30*time.Second, 20*time.Millisecond, "the ranges never split 8/8")
	var ofB []int
	require.Eventually(t, func() bool {
		ofB = ofB[:0]
		rows := rangeRows(t, pool, election)
		for r, row := range rows {
			if row.leader == "proc-b" {
				ofB = append(ofB, r)
			}
		}
		return len(rows) == 16 && len(ofB) == 8
	}, 30*time.Second, 20*time.Millisecond, "both must have written their ranges")
	before := rangeRows(t, pool, election)

	killed := time.Now()
	require.NoError(t, pb.cmd.Process.Signal(syscall.SIGKILL))
	<-pb.done
	require.Eventually(t, func() bool {
		rows := rangeRows(t, pool, election)
		for _, r := range ofB {
			if rows[r].leader != "proc-a" {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond)
	takeover := time.Since(killed)
	t.Logf("kill -9 of a range leader: its 8 ranges' first committed passes by the survivor %s later (zk session timeout 3s, tick 200ms)", takeover)
	require.Less(t, takeover, 5*time.Second, "ranges must move within the session timeout")
	after := rangeRows(t, pool, election)
	for _, r := range ofB {
		require.Greater(t, after[r].epoch, before[r].epoch, "range %d: epoch must grow with the move", r)
	}
	require.Equal(t, "16", pa.metric(t, "sundial_prefetcher_ranges_led"))

	// The survivor stages on for a few windows, then drains on SIGTERM.
	var until time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT now() + interval '3 seconds'`).Scan(&until))
	require.Eventually(t, func() bool {
		for _, row := range rangeRows(t, pool, election) {
			if row.updated.Before(until) {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, pa.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-pa.done:
	case <-time.After(30 * time.Second):
		t.Fatal("proc-a did not drain on SIGTERM")
	}
	require.Equal(t, 0, pa.cmd.ProcessState.ExitCode())

	for _, id := range jobs {
		var n, distinct int
		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &lo, &hi))
		require.Equal(t, n, distinct, "job %s: slot doubled", id)
		require.Equal(t, int(hi.Sub(lo)/time.Second)+1, n, "job %s: slot lost between %s and %s", id, lo, hi)
		require.False(t, hi.Before(until.Add(5*time.Second-time.Second)), "job %s: staged only to %s", id, hi)
	}
}

// A range leader paused (SIGSTOP) past its session timeout loses its ranges
// to the other; woken (SIGCONT), it finds its session expired, stops its
// range work (any write it still attempts is refused by the ranges' newer
// epochs), joins again as a newcomer and gets its share back. No slot is
// lost or doubled through all of it.
func TestPausedRangeLeaderRejoinsWithoutDoubling(t *testing.T) {
	bin := buildBinary(t)
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	_, root := testinfra.ZooKeeper(t)
	election := root + "/election"
	var jobs []uuid.UUID
	for range 64 {
		jobs = append(jobs, pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `date_trunc('second', now()) + interval '1 second'`))
	}
	args := []string{"--ranges", "16", "--window", "5s", "--tick", "200ms"}
	pa := startProc(t, bin, "proc-a", dsn, election, args...)
	pb := startProc(t, bin, "proc-b", dsn, election, args...)
	split := func() bool {
		return pa.metric(t, "sundial_prefetcher_ranges_led") == "8" && pb.metric(t, "sundial_prefetcher_ranges_led") == "8"
	}
	require.Eventually(t, split, 30*time.Second, 20*time.Millisecond, "the ranges never split 8/8")
	before := rangeRows(t, pool, election)

	require.NoError(t, pb.cmd.Process.Signal(syscall.SIGSTOP))
	require.Eventually(t, func() bool {
		for _, row := range rangeRows(t, pool, election) {
			if row.leader != "proc-a" {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "proc-a never took the paused leader's ranges")
	require.NoError(t, pb.cmd.Process.Signal(syscall.SIGCONT))
	require.Eventually(t, split, 30*time.Second, 20*time.Millisecond, "proc-b never got its share back")
	for r, row := range rangeRows(t, pool, election) {
		if row.leader == "proc-b" {
			require.Greater(t, row.epoch, before[r].epoch, "range %d: proc-b must come back on a new epoch", r)
		}
	}

	var until time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT now() + interval '5 seconds'`).Scan(&until))
	require.Eventually(t, func() bool {
		var behind int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE next_fire_at <= $1`, until).Scan(&behind))
		return behind == 0
	}, 30*time.Second, 20*time.Millisecond)
	for _, id := range jobs {
		var n, distinct int
		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &lo, &hi))
		require.Equal(t, n, distinct, "job %s: slot doubled", id)
		require.Equal(t, int(hi.Sub(lo)/time.Second)+1, n, "job %s: slot lost between %s and %s", id, lo, hi)
	}
	t.Logf("proc-b fenced transactions after waking: %s", pb.metric(t, "sundial_prefetcher_fenced_total"))
}
