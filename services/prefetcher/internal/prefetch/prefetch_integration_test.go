//go:build integration

package prefetch

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// electionPath is an election under the test's own ZooKeeper root.
func electionPath(t *testing.T) string {
	_, root := testinfra.ZooKeeper(t)
	return root + "/election"
}

// startInstance is a one-range prefetcher (--ranges 1: a single leader
// for every partition).
func startInstance(t *testing.T, dsn, path, id string, tick time.Duration) *rangeInstance {
	t.Helper()
	return startInstanceWith(t, dsn, path, id, 1, Config{Tick: tick, BatchSize: 7}, slog.LevelInfo)
}

// rangeZero is the leader_epochs key of a one-range group's only range.
func rangeZero(path string) string { return path + "/ranges/" + rangeleader.LockName(0) }

type epochRow struct {
	leader  string
	epoch   int64
	updated time.Time
}

func currentLeader(t *testing.T, pool *pgxpool.Pool, election string) epochRow {
	var r epochRow
	err := pool.QueryRow(context.Background(), `SELECT leader, epoch, updated_at FROM leader_epochs WHERE election = $1`, election).
		Scan(&r.leader, &r.epoch, &r.updated)
	if err != nil && err != pgx.ErrNoRows {
		require.NoError(t, err)
	}
	return r
}

// assertEverySecondExactlyOnce checks that each per-second job has one row
// per second from its first slot to its last, none missing, none twice, and
// that staging reached at least until.
func assertEverySecondExactlyOnce(t *testing.T, pool *pgxpool.Pool, jobs []uuid.UUID, until time.Time) {
	t.Helper()
	for _, id := range jobs {
		var n, distinct int
		var first, last time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT count(*), count(DISTINCT scheduled_at), min(scheduled_at), max(scheduled_at)
			  FROM outbox WHERE job_id = $1`, id).Scan(&n, &distinct, &first, &last))
		require.Equal(t, n, distinct, "job %s: a slot was staged twice", id)
		require.Equal(t, int(last.Sub(first)/time.Second)+1, n, "job %s: a slot is missing between %s and %s", id, first, last)
		require.False(t, last.Before(until), "job %s: staged only until %s, want %s", id, last, until)
	}
}

// With one range, two prefetchers are a leader and a standby: exactly one
// stages; when it stops, the other takes the range over on a newer epoch
// and every slot is staged exactly once across the handover.
func TestTwoInstancesStageEachSlotOnceAcrossAHandover(t *testing.T) {
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	group := electionPath(t)
	path := rangeZero(group)
	var jobs []uuid.UUID
	for range 20 {
		jobs = append(jobs, pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `date_trunc('second', now()) + interval '1 second'`))
	}

	a := startInstance(t, dsn, group, "a", 200*time.Millisecond)
	b := startInstance(t, dsn, group, "b", 200*time.Millisecond)
	var first epochRow
	require.Eventually(t, func() bool { first = currentLeader(t, pool, path); return first.leader != "" }, 15*time.Second, 20*time.Millisecond)
	lead, standby := a, b
	if first.leader == "b" {
		lead, standby = b, a
	}
	// A few passes by the first leader.
	require.Eventually(t, func() bool { return currentLeader(t, pool, path).updated.After(first.updated.Add(time.Second)) }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, []int{0}, lead.coord.Led())
	require.Empty(t, standby.coord.Led(), "one range, one leader: the standby leads nothing")
	require.Equal(t, 0.0, testutil.ToFloat64(standby.metrics.Leader))

	handover := time.Now()
	lead.stop()
	var second epochRow
	require.Eventually(t, func() bool { second = currentLeader(t, pool, path); return second.leader == standby.id }, 15*time.Second, 10*time.Millisecond)
	t.Logf("graceful handover from %s to %s took %s", lead.id, standby.id, time.Since(handover))
	require.Greater(t, second.epoch, first.epoch)
	require.Eventually(t, func() bool { return currentLeader(t, pool, path).updated.After(second.updated.Add(time.Second)) }, 15*time.Second, 20*time.Millisecond)
	final := currentLeader(t, pool, path)
	standby.stop()

	assertEverySecondExactlyOnce(t, pool, jobs, final.updated.Add(2*time.Minute-2*time.Second))
}

// A notification on sundial_jobs makes the leader stage a job created
// after its last pass without waiting for the tick.
func TestJobsNotificationWakesTheLeader(t *testing.T) {
	dsn := pgtest.Schema(t)
	pool := pgtest.Pool(t, dsn)
	group := electionPath(t)
	path := rangeZero(group)
	// With a tick just under the window, only a notification can wake the
	// loop within the test's deadline once its start-up passes are done:
	// one for the new term and one for the listener's wake-up on
	// connecting, which may coincide. So wait for the term's pass and for
	// the listener's LISTEN to have completed (seen in pg_stat_activity by
	// the application name this instance connects with): its wake-up is
	// sent right after, well before the job below exists.
	app := testinfra.UniqueName(t, 60)
	in := startInstance(t, dsn+"&application_name="+app, group, "a", 119*time.Second)
	require.Eventually(t, func() bool { return currentLeader(t, pool, path).leader == "a" }, 15*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		var listening bool
		_ = pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %' AND state = 'idle')`, app).Scan(&listening)
		return listening && histogramCount(t, in.metrics.TickDuration) >= 1
	}, 15*time.Second, 20*time.Millisecond)
	id := pgtest.InsertJob(t, pool, &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "* * * * * *"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
	}, `date_trunc('second', now()) + interval '1 second'`)
	_, err := pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, jobwake.Channel, id.String())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE job_id = $1`, id).Scan(&n)
		return n >= 120
	}, 15*time.Second, 20*time.Millisecond)
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	var m dto.Metric
	require.NoError(t, h.Write(&m))
	return m.GetHistogram().GetSampleCount()
}
