//go:build integration

package prefetch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

const testRanges = 16

// rangeInstance is one in-process prefetcher, composed as main composes
// it: listener, loop, coordinator.
type rangeInstance struct {
	id      string
	coord   *rangeleader.Coordinator
	loop    *Service
	list    *Listener
	metrics *Metrics
	once    sync.Once
}

func startRangeInstance(t *testing.T, dsn, path, id string) *rangeInstance {
	t.Helper()
	return startInstanceWith(t, dsn, path, id, testRanges, Config{Tick: 200 * time.Millisecond, BatchSize: 50, CatchUpRate: 100}, slog.LevelWarn)
}

// startInstanceWith starts an instance with ranges ranges and cfg's Tick,
// BatchSize and CatchUpRate.
func startInstanceWith(t *testing.T, dsn, path, id string, ranges int, cfg Config, level slog.Level) *rangeInstance {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})).With("instance", id)
	pool := pgtest.Pool(t, dsn)
	m := NewMetrics(prometheus.NewRegistry(), path)
	list := NewListener(pool.Config().ConnConfig.Copy(), jobwake.Channel, log, clock.Real{})
	loop, err := New(Config{
		Election: path, NodeID: id, Window: 2 * time.Minute, Tick: cfg.Tick,
		BatchSize: cfg.BatchSize, MisfireThreshold: 5 * time.Second, MaxSlotsPerJob: 10000, CatchUpRate: cfg.CatchUpRate,
	}, ranges, stage.New(pool, log), list.C(), log, clock.Real{}, m)
	require.NoError(t, err)
	coord, err := rangeleader.New(rangeleader.Config{
		Servers: testinfra.ZooKeeperAddrs(t), Path: path, NodeID: id, Ranges: ranges,
		SessionTimeout: 2 * time.Second, Logger: log, Work: loop.Work, OnChange: m.ObserveRanges,
	})
	require.NoError(t, err)
	in := &rangeInstance{id: id, coord: coord, loop: loop, list: list, metrics: m}
	require.NoError(t, list.Start(context.Background()))
	require.NoError(t, loop.Start(context.Background()))
	require.NoError(t, coord.Start(context.Background()))
	t.Cleanup(in.stop)
	return in
}

// stop shuts down in main's order: coordinator (range work first), loop,
// listener.
func (in *rangeInstance) stop() {
	in.once.Do(func() {
		in.coord.Stop()
		in.loop.Stop()
		in.list.Stop()
	})
}

// rangeLeaders is who last wrote each range's leader_epochs row.
func rangeLeaders(t *testing.T, pool *pgxpool.Pool, path string) map[int]string {
	rows, err := pool.Query(context.Background(), `SELECT election, leader FROM leader_epochs WHERE election LIKE $1 || '/ranges/%'`, path)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var e, l string
		require.NoError(t, rows.Scan(&e, &l))
		var r int
		_, err := fmt.Sscanf(e[len(path)+len("/ranges/"):], "r%04d", &r)
		require.NoError(t, err)
		out[r] = l
	}
	require.NoError(t, rows.Err())
	return out
}

func perSecondJobs(t *testing.T, pool *pgxpool.Pool, n int) []uuid.UUID {
	var jobs []uuid.UUID
	for range n {
		jobs = append(jobs, pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `date_trunc('second', now()) + interval '1 second'`))
	}
	return jobs
}

// requireEverySlotOnce: each job's staged slots are distinct and
// contiguous, and reach at least until.
func requireEverySlotOnce(t *testing.T, pool *pgxpool.Pool, jobs []uuid.UUID, until time.Time) {
	t.Helper()
	for _, id := range jobs {
		var n, distinct int
		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &lo, &hi))
		require.Equal(t, n, distinct, "job %s (partition %d): slot doubled", id, firing.Partition(id))
		require.Equal(t, int(hi.Sub(lo)/time.Second)+1, n, "job %s (partition %d): slot lost between %s and %s", id, firing.Partition(id), lo, hi)
		require.False(t, hi.Before(until), "job %s (partition %d): staged only to %s", id, firing.Partition(id), hi)
	}
}

// Two prefetchers lead at once, each its half of the ranges; each range's
// epoch row names the member leading it; together they stage every slot
// exactly once. When one leaves, only its ranges move, to the other, with
// newer epochs, and staging goes on without a gap or a double.
func TestTwoPrefetchersLeadRangesAtOnceAndOneLeaving(t *testing.T) {
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	_, root := testinfra.ZooKeeper(t)
	path := root + "/prefetch"
	jobs := perSecondJobs(t, pool, 120)

	a := startRangeInstance(t, dsn, path, "a")
	b := startRangeInstance(t, dsn, path, "b")
	require.Eventually(t, func() bool {
		return len(a.coord.Led()) == testRanges/2 && len(b.coord.Led()) == testRanges/2
	}, 20*time.Second, 20*time.Millisecond, "ranges never split: a %v, b %v", a.coord.Led(), b.coord.Led())
	ledA, ledB := a.coord.Led(), b.coord.Led()
	require.Equal(t, float64(testRanges/2), testutil.ToFloat64(a.metrics.RangesLed))

	// Each range's row names its leader once that leader has written.
	require.Eventually(t, func() bool {
		rows := rangeLeaders(t, pool, path)
		for _, r := range ledA {
			if rows[r] != "a" {
				return false
			}
		}
		for _, r := range ledB {
			if rows[r] != "b" {
				return false
			}
		}
		return len(rows) == testRanges
	}, 20*time.Second, 20*time.Millisecond)
	requireStagedThrough(t, pool, jobs)
	epochs := rangeEpochs(t, pool, path)

	// b leaves: its ranges go to a, a's stay put.
	b.stop()
	require.Eventually(t, func() bool { return len(a.coord.Led()) == testRanges }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		rows := rangeLeaders(t, pool, path)
		for r := 0; r < testRanges; r++ {
			if rows[r] != "a" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	after := rangeEpochs(t, pool, path)
	for _, r := range ledA {
		require.Equal(t, epochs[r], after[r], "range %d of the staying member changed epoch", r)
	}
	for _, r := range ledB {
		require.Greater(t, after[r], epochs[r], "range %d moved without a newer epoch", r)
	}
	// Let a stage past the handover, then check every slot again.
	requireStagedThrough(t, pool, jobs)
}

// requireStagedThrough waits until every job is staged a window past the
// database clock as it is now (next_fire_at beyond it), then checks every
// job's slots: none doubled, none missing, up to there.
func requireStagedThrough(t *testing.T, pool *pgxpool.Pool, jobs []uuid.UUID) {
	t.Helper()
	var until time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT now() + interval '2 minutes'`).Scan(&until))
	require.Eventually(t, func() bool {
		var behind int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE next_fire_at <= $1`, until).Scan(&behind)
		return behind == 0
	}, 20*time.Second, 20*time.Millisecond)
	requireEverySlotOnce(t, pool, jobs, until.Add(-time.Second))
}

func rangeEpochs(t *testing.T, pool *pgxpool.Pool, path string) map[int]int64 {
	rows, err := pool.Query(context.Background(), `SELECT election, epoch FROM leader_epochs WHERE election LIKE $1 || '/ranges/%'`, path)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var e string
		var epoch int64
		require.NoError(t, rows.Scan(&e, &epoch))
		var r int
		_, err := fmt.Sscanf(e[len(path)+len("/ranges/"):], "r%04d", &r)
		require.NoError(t, err)
		out[r] = epoch
	}
	return out
}
