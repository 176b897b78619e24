//go:build integration

package prefetch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// TestStagingRateByPrefetchers is a measurement, not a check: how long 1,
// 2 and 4 in-process prefetchers leading 16 ranges together take to stage
// a burst of one-off jobs all due at once (default batch size, window and
// chunk; a 50 ms tick, so the wait for the first pass stays small). Set SUNDIAL_MEASURE_STAGING=<jobs> to run it. It is no substitute
// for the benchmark's registered and burst scenarios: the prefetchers share
// one process and the machine with Postgres.
func TestStagingRateByPrefetchers(t *testing.T) {
	jobs := 0
	if v := os.Getenv("SUNDIAL_MEASURE_STAGING"); v != "" {
		var err error
		jobs, err = parseInt(v)
		require.NoError(t, err)
	}
	if jobs <= 0 {
		t.Skip("a measurement: set SUNDIAL_MEASURE_STAGING=<jobs> to run it")
	}
	// 0: one transaction at a time over every partition, as one range
	// (--ranges 1) stages (the baseline).
	for _, n := range []int{0, 1, 2, 4} {
		for run := range 3 {
			took := measureBurst(t, jobs, n)
			t.Logf("prefetchers=%d run=%d: %d one-off jobs staged in %s (%.0f jobs/s)", n, run, jobs, took.Round(time.Millisecond), float64(jobs)/took.Seconds())
		}
	}
}

// stageSingle stages as a one-range leader does: batch after batch, one at
// a time, across all partitions, until a batch comes back short.
func stageSingle(t *testing.T, st *stage.Store) {
	o := stage.Options{
		Election: "/single", Epoch: 1, Leader: "single", Window: 2 * time.Minute, Chunk: 30 * time.Second,
		Limit: 500, MisfireThreshold: 5 * time.Second, MaxSlotsPerJob: 10000, MaxSkipRecords: 100, Step: 10 * time.Second, CatchUpRate: 100,
	}
	for {
		res, err := st.StageBatch(context.Background(), o)
		require.NoError(t, err)
		o.CatchUpCursor = res.CatchUpCursor
		if res.Claimed < o.Limit && !res.Stepped {
			return
		}
	}
}

func parseInt(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func measureBurst(t *testing.T, jobs, prefetchers int) time.Duration {
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	ctx := context.Background()
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	at := now.Add(time.Minute).Truncate(time.Second)
	// No NextFireTime, so next_fire_at NULL: not claimable until the
	// burst is released.
	pgtest.CopyJobs(t, pool, jobs, func(int) *sundialv1.Job {
		return &sundialv1.Job{
			Tenant: "t", Name: "burst",
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at)}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}
	})
	_, err := pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)

	if prefetchers == 0 {
		st := stage.New(pool, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
		start := time.Now()
		_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = $1`, at)
		require.NoError(t, err)
		stageSingle(t, st)
		took := time.Since(start)
		var staged int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&staged))
		require.Equal(t, jobs, staged)
		return took
	}
	_, root := testinfra.ZooKeeper(t)
	path := root + "/scale"
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	var coords []*rangeleader.Coordinator
	for i := range prefetchers {
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		ipool := pgtest.Pool(t, dsn)
		m := NewMetrics(prometheus.NewRegistry(), path)
		loop, err := New(Config{
			Election: path, NodeID: string(rune('a' + i)), Window: 2 * time.Minute, Chunk: 30 * time.Second, Tick: 50 * time.Millisecond,
			BatchSize: 500, MisfireThreshold: 5 * time.Second, MaxSlotsPerJob: 10000, MaxSkipRecords: 100, FillStep: 10 * time.Second, CatchUpRate: 100,
		}, testRanges, stage.New(ipool, log), nil, log, clock.Real{}, m)
		require.NoError(t, err)
		coord, err := rangeleader.New(rangeleader.Config{
			Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: string(rune('a' + i)), Ranges: testRanges,
			SessionTimeout: 3 * time.Second, Logger: log, Work: loop.Work,
		})
		require.NoError(t, err)
		require.NoError(t, loop.Start(ctx))
		require.NoError(t, coord.Start(ctx))
		stops = append([]func(){func() { coord.Stop(); loop.Stop() }}, stops...)
		coords = append(coords, coord)
	}
	require.Eventually(t, func() bool {
		total := 0
		for _, c := range coords {
			if len(c.Led()) == 0 {
				return false
			}
			total += len(c.Led())
		}
		return total == testRanges
	}, 20*time.Second, 10*time.Millisecond)

	start := time.Now()
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = $1`, at)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE next_fire_at IS NOT NULL`).Scan(&left))
		return left == 0
	}, 5*time.Minute, 20*time.Millisecond)
	took := time.Since(start)
	var staged int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&staged))
	require.Equal(t, jobs, staged)
	return took
}
