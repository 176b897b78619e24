//go:build integration

package stage

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const election = "/sundial/elections/prefetcher"

func opts(epoch int64) Options {
	return Options{
		Election: election, Epoch: epoch, Leader: fmt.Sprintf("leader-%d", epoch),
		Window: 2 * time.Minute, Limit: 500, MisfireThreshold: 5 * time.Second, MaxSlotsPerJob: 10000,
	}
}

func newStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.Schema(t))
	return New(pool, slog.New(slog.NewTextHandler(io.Discard, nil))), pool
}

func cronJob(expr string) *sundialv1.Job {
	return &sundialv1.Job{
		Name:     "cron " + expr,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/hook"}}},
	}
}

func intervalJob(every time.Duration, anchor time.Time, misfire *sundialv1.MisfirePolicy) *sundialv1.Job {
	return &sundialv1.Job{
		Name: "every " + every.String(),
		Schedule: &sundialv1.Schedule{
			Spec:      &sundialv1.Schedule_Interval{Interval: durationpb.New(every)},
			StartTime: timestamppb.New(anchor),
		},
		Target:  &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/hook"}}},
		Misfire: misfire,
	}
}

type outboxRow struct {
	exec      uuid.UUID
	job       uuid.UUID
	scheduled time.Time
	fire      time.Time
	publish   time.Time
	catchUp   bool
	envelope  []byte
}

func outbox(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []outboxRow {
	t.Helper()
	r, err := pool.Query(context.Background(), `SELECT execution_id, job_id, scheduled_at, fire_at, publish_at, catch_up, envelope
		FROM outbox WHERE job_id = $1 ORDER BY scheduled_at`, job)
	require.NoError(t, err)
	rows, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.exec, &o.job, &o.scheduled, &o.fire, &o.publish, &o.catchUp, &o.envelope)
		return o, err
	})
	require.NoError(t, err)
	return rows
}

func nextFireAt(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) *time.Time {
	t.Helper()
	var next *time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT next_fire_at FROM jobs WHERE id = $1`, job).Scan(&next))
	return next
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now.UTC()
}

// Every slot of a per-second cron is staged once, across many ticks, with
// no gap, and the first window holds 120 of them.
func TestSecondCronStagesEachSlotExactlyOnce(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	id := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)

	first, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, first.Claimed)
	rows := outbox(t, pool, id)
	require.Len(t, rows, first.Staged)
	inWindow := 0
	for _, r := range rows {
		if r.scheduled.After(first.Now) && !r.scheduled.After(first.Now.Add(2*time.Minute)) {
			inWindow++
		}
	}
	// (now, now+2m] holds exactly 120 whole seconds.
	require.Equal(t, 120, inWindow, "a per-second cron stages 120 slots per 2-minute window")

	var last Result = first
	for tick := 0; tick < 5; tick++ {
		last, err = st.StageBatch(ctx, opts(1))
		require.NoError(t, err)
		require.Zero(t, last.Duplicates)
	}

	rows = outbox(t, pool, id)
	seen := map[uuid.UUID]bool{}
	for i, r := range rows {
		require.False(t, seen[r.exec], "execution %s staged twice", r.exec)
		seen[r.exec] = true
		require.Equal(t, firing.ExecutionID(id, r.scheduled), r.exec)
		require.Equal(t, r.scheduled, r.fire, "no jitter configured")
		if i > 0 {
			require.Equal(t, time.Second, r.scheduled.Sub(rows[i-1].scheduled), "no gap, no repeat")
		}
		env, err := firing.Decode(r.envelope)
		require.NoError(t, err)
		require.Equal(t, r.exec.String(), env.GetExecutionId())
		require.Equal(t, id.String(), env.GetJobId())
		require.Equal(t, "tenant-a", env.GetTenant())
		require.Equal(t, int32(1), env.GetAttempt())
		require.True(t, env.GetScheduledTime().AsTime().Equal(r.scheduled))
		require.False(t, env.GetCatchUp())
		require.Equal(t, sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, env.GetOrigin())
		require.False(t, r.publish.After(last.Now), "published as soon as staged")
	}
	lastSlot := rows[len(rows)-1].scheduled
	require.False(t, lastSlot.After(last.Now.Add(2*time.Minute)))
	require.True(t, lastSlot.Add(time.Second).Equal(*nextFireAt(t, pool, id)), "next_fire_at is the first slot after the window")
}

func TestOneOffStagesOnceThenNextFireAtIsNull(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	at := dbNow(t, pool).Add(30 * time.Second).Truncate(time.Millisecond)
	job := &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at)}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
	}
	id := pgtest.InsertJob(t, pool, job, `$1`, at)

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Staged)
	require.Nil(t, nextFireAt(t, pool, id))
	var last time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_slot_at FROM jobs WHERE id = $1`, id).Scan(&last))
	require.True(t, last.Equal(at))

	res, err = st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Zero(t, res.Claimed)
	require.Len(t, outbox(t, pool, id), 1)
}

// A deposed leader's transaction fails its epoch check and writes nothing,
// even though it would otherwise have claimed due jobs.
func TestDeposedLeaderIsFencedAndWritesNothing(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	a := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)

	_, err := st.StageBatch(ctx, opts(7))
	require.NoError(t, err)
	before := len(outbox(t, pool, a))
	nextA := nextFireAt(t, pool, a)

	// A job becomes due that only the stale leader could stage.
	b := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)
	nextB := nextFireAt(t, pool, b)

	_, err = st.StageBatch(ctx, opts(6))
	require.ErrorIs(t, err, ErrFenced)
	require.Len(t, outbox(t, pool, a), before)
	require.Empty(t, outbox(t, pool, b))
	require.Equal(t, nextA, nextFireAt(t, pool, a))
	require.Equal(t, nextB, nextFireAt(t, pool, b))
	var epoch int64
	var leader string
	require.NoError(t, pool.QueryRow(ctx, `SELECT epoch, leader FROM leader_epochs WHERE election = $1`, election).Scan(&epoch, &leader))
	require.Equal(t, int64(7), epoch)
	require.Equal(t, "leader-7", leader)

	// The same epoch keeps writing (a term resumed after a blip); a newer
	// one takes over the row.
	_, err = st.StageBatch(ctx, opts(7))
	require.NoError(t, err)
	_, err = st.StageBatch(ctx, opts(8))
	require.NoError(t, err)
	_, err = st.StageBatch(ctx, opts(7))
	require.ErrorIs(t, err, ErrFenced)
}

// While an old leader's transaction holds the epoch row, the new leader's
// transaction waits for it and then sees its effects: no slot is staged by
// both.
func TestConcurrentLeadersSerialiseOnTheEpochRow(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	id := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)
	_, err := st.StageBatch(ctx, opts(1)) // the row exists
	require.NoError(t, err)

	// Hold the row as an in-flight transaction of epoch 1 would.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, fenceSQL, election, int64(1), "old").Scan(&now))

	done := make(chan error, 1)
	go func() {
		_, err := st.StageBatch(ctx, opts(2))
		done <- err
	}()
	// The new leader's fence statement queues behind the old transaction.
	require.Eventually(t, func() bool {
		var waiting int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%leader_epochs%'`).Scan(&waiting)
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the new leader did not wait for the old transaction: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	_, err = st.StageBatch(ctx, opts(1))
	require.ErrorIs(t, err, ErrFenced)

	seen := map[uuid.UUID]bool{}
	for _, r := range outbox(t, pool, id) {
		require.False(t, seen[r.exec])
		seen[r.exec] = true
	}
}

func TestMisfirePoliciesAfterAnOutage(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	anchor := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(action sundialv1.MisfireAction, grace time.Duration, max int32) uuid.UUID {
		// next_fire_at: the slot 10 minutes ago, as if the prefetcher had
		// been down since then.
		return pgtest.InsertJob(t, pool, intervalJob(time.Minute, anchor, &sundialv1.MisfirePolicy{
			Action: action, Grace: durationpb.New(grace), MaxCatchUp: max,
		}), `date_trunc('minute', now()) - interval '10 minutes'`)
	}
	skip := mk(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, time.Hour, 0)
	once := mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, time.Hour, 0)
	all := mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, time.Hour, 3)
	graced := mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 4*time.Minute+30*time.Second, 50)

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 4, res.Claimed)
	lateCut := res.Now.Add(-5 * time.Second)

	check := func(job uuid.UUID, wantCatchUp int) {
		t.Helper()
		var catchUps []time.Time
		for _, r := range outbox(t, pool, job) {
			env, err := firing.Decode(r.envelope)
			require.NoError(t, err)
			require.Equal(t, r.catchUp, env.GetCatchUp(), "row and envelope agree")
			if r.catchUp {
				require.True(t, r.scheduled.Before(lateCut))
				catchUps = append(catchUps, r.scheduled)
			} else {
				require.False(t, r.scheduled.Before(lateCut))
			}
		}
		require.Len(t, catchUps, wantCatchUp)
		// The most recent missed slots are the ones replayed.
		for i, c := range catchUps {
			want := lateCut.Truncate(time.Minute).Add(-time.Duration(wantCatchUp-1-i) * time.Minute)
			require.True(t, c.Equal(want), "catch-up %d: %s, want %s", i, c, want)
		}
	}
	check(skip, 0)
	check(once, 1)
	check(all, 3)
	// Grace 4m30s leaves the 4 or 5 most recent missed minutes, all replayed.
	graceCut := res.Now.Add(-(4*time.Minute + 30*time.Second))
	n := 0
	for m := lateCut.Truncate(time.Minute); !m.Before(graceCut); m = m.Add(-time.Minute) {
		n++
	}
	check(graced, n)
	require.Equal(t, 1+3+n, res.CatchUp)
}

func TestJitterStaysWithinMaxJitter(t *testing.T) {
	st, pool := newStore(t)
	job := cronJob("* * * * * *")
	job.MaxJitter = durationpb.New(30 * time.Second)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('second', now()) + interval '1 second'`)
	_, err := st.StageBatch(context.Background(), opts(1))
	require.NoError(t, err)
	distinct := map[time.Duration]bool{}
	for _, r := range outbox(t, pool, id) {
		j := r.fire.Sub(r.scheduled)
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.Less(t, j, 30*time.Second)
		env, err := firing.Decode(r.envelope)
		require.NoError(t, err)
		require.True(t, env.GetFireTime().AsTime().Equal(r.fire))
		distinct[j] = true
	}
	require.Greater(t, len(distinct), 10)
}

func TestBatchesDrainManyJobs(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	at := dbNow(t, pool).Add(time.Minute)
	for i := 0; i < 1200; i++ {
		pgtest.InsertJob(t, pool, &sundialv1.Job{
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at.Add(time.Duration(i) * time.Millisecond))}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
		}, `$1`, at.Add(time.Duration(i)*time.Millisecond))
	}
	var claimed []int
	for {
		res, err := st.StageBatch(ctx, opts(1))
		require.NoError(t, err)
		claimed = append(claimed, res.Claimed)
		if res.Claimed < 500 {
			break
		}
	}
	require.Equal(t, []int{500, 500, 200}, claimed)
	var rows, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT job_id) FROM outbox`).Scan(&rows, &distinct))
	require.Equal(t, 1200, rows)
	require.Equal(t, 1200, distinct)
}

func TestUnschedulableJobIsParked(t *testing.T) {
	st, pool := newStore(t)
	id := uuid.Must(uuid.NewV7())
	pgtest.InsertRawJob(t, pool, id, "tenant-a", []byte("not a protobuf \xff\xff"), 3, `now()`)
	res, err := st.StageBatch(context.Background(), opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Unschedulable)
	require.Nil(t, nextFireAt(t, pool, id))
	res, err = st.StageBatch(context.Background(), opts(1))
	require.NoError(t, err)
	require.Zero(t, res.Claimed)
}

// The claim must be an index range scan in due order, not a scan and sort
// of every active job.
func TestClaimUsesTheDueIndex(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		INSERT INTO jobs (id, tenant, spec, priority, partition, next_fire_at)
		SELECT gen_random_uuid(), 't', '\x'::bytea, 3, (g % 256), now() + (g || ' seconds')::interval
		  FROM generate_series(1, 20000) AS g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE jobs`)
	require.NoError(t, err)
	r, err := pool.Query(ctx, `EXPLAIN `+claimSQL, time.Now().Add(2*time.Minute), 500)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	t.Logf("claim plan:\n%s", plan)
	require.Contains(t, plan, "jobs_active_next_fire")
	require.NotContains(t, plan, "Sort")
}
