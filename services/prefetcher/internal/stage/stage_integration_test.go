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
	"go.opentelemetry.io/otel/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/process/tracing/tracingtest"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

const election = "/sundial/elections/prefetcher"

func opts(epoch int64) Options {
	return Options{
		Election: election, Epoch: epoch, Leader: fmt.Sprintf("leader-%d", epoch),
		Window: 2 * time.Minute, Limit: 500, MisfireThreshold: 5 * time.Second, MaxSlotsPerJob: 10000,
		MaxSkipRecords: 100,
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

func stagedRows(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []outboxRow {
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
	rows := stagedRows(t, pool, id)
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

	rows = stagedRows(t, pool, id)
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
	require.Len(t, stagedRows(t, pool, id), 1)
}

// A deposed leader's transaction fails its epoch check and writes nothing,
// even though it would otherwise have claimed due jobs.
func TestDeposedLeaderIsFencedAndWritesNothing(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	a := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)

	_, err := st.StageBatch(ctx, opts(7))
	require.NoError(t, err)
	before := len(stagedRows(t, pool, a))
	nextA := nextFireAt(t, pool, a)

	// A job becomes due that only the stale leader could stage.
	b := pgtest.InsertJob(t, pool, cronJob("* * * * * *"), `date_trunc('second', now()) + interval '1 second'`)
	nextB := nextFireAt(t, pool, b)

	_, err = st.StageBatch(ctx, opts(6))
	require.ErrorIs(t, err, ErrFenced)
	require.Len(t, stagedRows(t, pool, a), before)
	require.Empty(t, stagedRows(t, pool, b))
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
	for _, r := range stagedRows(t, pool, id) {
		require.False(t, seen[r.exec])
		seen[r.exec] = true
	}
}

type pendingRow struct {
	exec      uuid.UUID
	scheduled time.Time
	fire      time.Time
	status    int16
	attempt   int32
	catchUp   bool
	version   int64
	tenant    string
	reason    string
	created   time.Time
}

func pendingRows(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []pendingRow {
	t.Helper()
	r, err := pool.Query(context.Background(), `SELECT execution_id, scheduled_at, fire_at, status, attempt, catch_up, job_version, tenant, reason, created_at
		FROM ledger_pending WHERE job_id = $1 ORDER BY scheduled_at`, job)
	require.NoError(t, err)
	rows, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (pendingRow, error) {
		var p pendingRow
		err := row.Scan(&p.exec, &p.scheduled, &p.fire, &p.status, &p.attempt, &p.catchUp, &p.version, &p.tenant, &p.reason, &p.created)
		return p, err
	})
	require.NoError(t, err)
	return rows
}

// misfireOracle enumerates, independently of the planner, what a pass at
// now must do with a per-minute job whose next_fire_at is first: which
// missed slots it replays (the most recent keep inside the grace), which
// it records as skipped and why, and which it stages on time.
type misfireOracle struct {
	catchUp, onTime []time.Time
	skipped         map[time.Time]string
}

var graceText = map[time.Duration]string{time.Hour: "1h", 4*time.Minute + 30*time.Second: "4m30s"}

func oracle(first, now time.Time, grace time.Duration, keep int, policyReason string) misfireOracle {
	o := misfireOracle{skipped: map[time.Time]string{}}
	lateCut, graceCut := now.Add(-5*time.Second), now.Add(-grace)
	var inGrace []time.Time
	m := first
	for ; m.Before(lateCut); m = m.Add(time.Minute) {
		if m.Before(graceCut) {
			o.skipped[m] = "misfire: older than the grace of " + graceText[grace]
		} else {
			inGrace = append(inGrace, m)
		}
	}
	cut := max(len(inGrace)-keep, 0)
	for _, s := range inGrace[:cut] {
		o.skipped[s] = policyReason
	}
	if cut < len(inGrace) {
		o.catchUp = inGrace[cut:]
	}
	for ; !m.After(now.Add(2 * time.Minute)); m = m.Add(time.Minute) {
		o.onTime = append(o.onTime, m)
	}
	return o
}

// After an outage each policy stages exactly the slots it should, and
// every slot it does not stage gets a SKIPPED ledger row saying why, in the
// same transaction. A second pass adds nothing.
func TestMisfirePoliciesAfterAnOutage(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	anchor := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	type job struct {
		id    uuid.UUID
		grace time.Duration
		keep  int
		why   string
	}
	mk := func(action sundialv1.MisfireAction, grace time.Duration, max int32, keep int, why, since string) job {
		// next_fire_at: a slot in the past, as if the prefetcher had
		// been down since then.
		id := pgtest.InsertJob(t, pool, intervalJob(time.Minute, anchor, &sundialv1.MisfirePolicy{
			Action: action, Grace: durationpb.New(grace), MaxCatchUp: max,
		}), `date_trunc('minute', now()) - interval '`+since+`'`)
		return job{id: id, grace: grace, keep: keep, why: why}
	}
	const (
		skipWhy = "misfire: policy SKIP replays no missed slot"
		onceWhy = "misfire: policy RUN_ONCE replays only the most recent missed slot"
		all3Why = "misfire: policy RUN_ALL replays only the 3 most recent missed slots"
	)
	jobs := []job{
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, time.Hour, 0, 0, skipWhy, "10 minutes"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, time.Hour, 0, 1, onceWhy, "10 minutes"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, time.Hour, 3, 3, all3Why, "10 minutes"),
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 4*time.Minute+30*time.Second, 50, 50, "", "10 minutes"),
		// Down for 90 minutes: half an hour of it is older than the grace.
		mk(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, time.Hour, 0, 1, onceWhy, "90 minutes"),
	}

	firsts := map[uuid.UUID]time.Time{}
	for _, j := range jobs {
		firsts[j.id] = *nextFireAt(t, pool, j.id)
	}
	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, len(jobs), res.Claimed)

	wantCatchUp, wantRecorded, wantExpired := 0, 0, 0
	for i, j := range jobs {
		first := firsts[j.id].UTC()
		want := oracle(first, res.Now, j.grace, j.keep, j.why)
		var staged time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT min(scheduled_at) FROM (
			SELECT scheduled_at FROM outbox WHERE job_id = $1 UNION ALL SELECT scheduled_at FROM ledger_pending WHERE job_id = $1) s`, j.id).Scan(&staged))
		require.True(t, staged.Equal(first), "job %d: every slot from next_fire_at on is staged or recorded", i)

		var gotCatch, gotOn []time.Time
		for _, r := range stagedRows(t, pool, j.id) {
			env, err := firing.Decode(r.envelope)
			require.NoError(t, err)
			require.Equal(t, r.catchUp, env.GetCatchUp(), "row and envelope agree")
			require.Equal(t, int32(1), env.GetFirstAttempt())
			require.False(t, env.GetLastSlot())
			if r.catchUp {
				gotCatch = append(gotCatch, r.scheduled.UTC())
			} else {
				gotOn = append(gotOn, r.scheduled.UTC())
			}
		}
		require.Equal(t, want.catchUp, gotCatch, "job %d: catch-up slots", i)
		require.Equal(t, want.onTime, gotOn, "job %d: on-time slots", i)

		got := map[time.Time]string{}
		for _, p := range pendingRows(t, pool, j.id) {
			require.Equal(t, firing.ExecutionID(j.id, p.scheduled), p.exec)
			require.Equal(t, int16(sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED), p.status)
			require.Equal(t, int32(1), p.attempt)
			require.Equal(t, int64(1), p.version)
			require.Equal(t, "tenant-a", p.tenant)
			require.False(t, p.catchUp)
			require.True(t, p.created.Equal(res.Now), "written by the staging transaction")
			got[p.scheduled.UTC()] = p.reason
		}
		require.Equal(t, want.skipped, got, "job %d: skipped slots and reasons", i)
		wantCatchUp += len(want.catchUp)
		wantRecorded += len(want.skipped)
		for _, why := range want.skipped {
			if strings.Contains(why, "older than the grace") {
				wantExpired++
			}
		}
	}
	require.Equal(t, wantCatchUp, res.CatchUp)
	require.Equal(t, wantRecorded, res.Recorded)
	require.Equal(t, wantExpired, res.Expired)
	require.GreaterOrEqual(t, wantExpired, 30, "the 90-minute outage: at least 30 slots older than the grace")

	// Nothing is recorded twice: the jobs moved past their skipped slots.
	again, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Zero(t, again.Recorded)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_pending`).Scan(&n))
	require.Equal(t, wantRecorded, n)
}

// A very long outage of a frequent job records the most recent skipped
// slots one by one and one summary row for the rest, not a row per slot.
func TestSkippedSlotsOfALongOutageAreCappedWithASummary(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	id := pgtest.InsertJob(t, pool, intervalJob(time.Second, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: durationpb.New(time.Hour),
	}), `date_trunc('second', now()) - interval '3 hours'`)
	first := nextFireAt(t, pool, id).UTC()
	o := opts(1)
	o.MaxSkipRecords = 20
	res, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	rows := pendingRows(t, pool, id)
	require.Len(t, rows, 21)
	require.Equal(t, 21, res.Recorded)

	sum, listed := rows[0], rows[1:]
	require.True(t, sum.scheduled.Equal(first), "the summary row sits at the first skipped slot")
	require.Equal(t, firing.ExecutionID(id, first), sum.exec)
	newest := res.Now.Add(-5 * time.Second).Truncate(time.Second)
	if newest.Equal(res.Now.Add(-5 * time.Second)) {
		newest = newest.Add(-time.Second) // a slot exactly at the threshold is late, not missed
	}
	for i, r := range listed {
		require.True(t, r.scheduled.Equal(newest.Add(-time.Duration(19-i)*time.Second)), "listed %d: %s", i, r.scheduled)
		require.Equal(t, "misfire: policy SKIP replays no missed slot", r.reason)
	}
	total := int(newest.Sub(first)/time.Second) + 1
	expired := int(res.Now.Add(-time.Hour).Sub(first)/time.Second) + 1
	if first.Add(time.Duration(expired-1) * time.Second).Equal(res.Now.Add(-time.Hour)) {
		expired-- // a slot exactly grace old is still inside the grace
	}
	require.Equal(t, fmt.Sprintf("misfire: %d slots from %s to %s skipped (only the most recent are recorded one by one): %d older than the grace of 1h; %d not replayed by policy SKIP",
		total-20, first.UTC().Format(time.RFC3339Nano), listed[0].scheduled.Add(-time.Second).UTC().Format(time.RFC3339Nano),
		expired, total-20-expired), sum.reason)
	require.Empty(t, outboxCatchUps(t, pool, id))
}

func outboxCatchUps(t *testing.T, pool *pgxpool.Pool, job uuid.UUID) []outboxRow {
	var out []outboxRow
	for _, r := range stagedRows(t, pool, job) {
		if r.catchUp {
			out = append(out, r)
		}
	}
	return out
}

// Catch-up firings of a recovery are released at the configured rate
// across jobs and batches, starting at the database clock, instead of all
// at once; each is published a window before its release instant.
func TestCatchUpReleaseIsPacedAcrossJobsAndBatches(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	var jobs []uuid.UUID
	for range 30 {
		job := intervalJob(time.Minute, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), nil) // RUN_ONCE
		job.MaxJitter = durationpb.New(time.Minute)                                       // pacing replaces jitter
		jobs = append(jobs, pgtest.InsertJob(t, pool, job, `date_trunc('minute', now()) - interval '20 minutes'`))
	}
	o := opts(1)
	o.Limit = 12
	o.CatchUpRate = 0.5 // one every 2 s: 30 catch-ups span a minute, some beyond the window
	o.Window = 30 * time.Second
	var firstNow time.Time
	for batch := 0; ; batch++ {
		res, err := st.StageBatch(ctx, o)
		require.NoError(t, err)
		if batch == 0 {
			firstNow = res.Now
			require.True(t, res.CatchUpCursor.Equal(res.Now.Add(12*2*time.Second)))
		}
		o.CatchUpCursor = res.CatchUpCursor
		if res.Claimed < o.Limit {
			break
		}
	}
	r, err := pool.Query(ctx, `SELECT fire_at, publish_at, created_at, envelope FROM outbox WHERE catch_up ORDER BY fire_at`)
	require.NoError(t, err)
	type row struct {
		fire, publish, created time.Time
		env                    []byte
	}
	rows, err := pgx.CollectRows(r, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.fire, &x.publish, &x.created, &x.env)
	})
	require.NoError(t, err)
	require.Len(t, rows, 30)
	for i, x := range rows {
		want := firstNow.Add(time.Duration(i) * 2 * time.Second)
		require.True(t, x.fire.Equal(want), "catch-up %d fires at %s, want %s", i, x.fire, want)
		env, err := firing.Decode(x.env)
		require.NoError(t, err)
		require.True(t, env.GetFireTime().AsTime().Equal(x.fire))
		require.True(t, env.GetCatchUp())
		// Published a window ahead of release, never before staging.
		wantPub := x.fire.Add(-o.Window)
		if wantPub.Before(x.created) {
			wantPub = x.created
		}
		require.True(t, x.publish.Equal(wantPub), "catch-up %d published at %s, want %s", i, x.publish, wantPub)
	}
	for _, id := range jobs {
		require.Len(t, outboxCatchUps(t, pool, id), 1, "RUN_ONCE: one catch-up per job")
	}
	// On-time slots are not paced.
	var paced int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE NOT catch_up AND publish_at > created_at`).Scan(&paced))
	require.Zero(t, paced)
}

// The fire instant of a slot (slot + jitter) is the same whoever stages
// it and however often: a new leader restaging a slot writes the same row.
func TestJitterIsTheSameAcrossLeadersAndPasses(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	job := cronJob("*/5 * * * * *")
	job.MaxJitter = durationpb.New(time.Minute)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('minute', now()) + interval '1 minute'`)
	var start time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_fire_at FROM jobs WHERE id = $1`, id).Scan(&start))
	_, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	first := map[uuid.UUID]time.Time{}
	for _, r := range stagedRows(t, pool, id) {
		j := r.fire.Sub(r.scheduled)
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.Less(t, j, time.Minute)
		first[r.exec] = r.fire
	}
	require.NotEmpty(t, first)

	// Forget the staging, as if it never committed, and let another
	// leader (another store, a newer epoch) stage the same slots.
	_, err = pool.Exec(ctx, `DELETE FROM outbox WHERE job_id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = $2 WHERE id = $1`, id, start)
	require.NoError(t, err)
	other := New(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err = other.StageBatch(ctx, opts(2))
	require.NoError(t, err)
	again := stagedRows(t, pool, id)
	require.Len(t, again, len(first))
	for _, r := range again {
		require.True(t, first[r.exec].Equal(r.fire), "slot %s: fire %s, first staged %s", r.scheduled, r.fire, first[r.exec])
	}
}

// The schedule's last slot carries last_slot, so the worker can complete
// the job once it finishes; earlier slots do not, and the job stays active
// until then.
func TestLastSlotIsMarked(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	end := now.Add(30 * time.Second)
	job := cronJob("*/5 * * * * *")
	job.Schedule.EndTime = timestamppb.New(end)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('second', now()) + interval '1 second'`)
	_, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	rows := stagedRows(t, pool, id)
	require.GreaterOrEqual(t, len(rows), 5)
	for i, r := range rows {
		env, err := firing.Decode(r.envelope)
		require.NoError(t, err)
		require.Equal(t, i == len(rows)-1, env.GetLastSlot(), "slot %d of %d", i, len(rows))
	}
	require.Nil(t, nextFireAt(t, pool, id))
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, id).Scan(&status))
	require.Equal(t, "active", status, "the worker completes it when the last execution finishes")

	// A one-off's single slot is its last.
	at := now.Add(20 * time.Second).Truncate(time.Millisecond)
	once := pgtest.InsertJob(t, pool, &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(at)}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/x"}}},
	}, `$1`, at)
	_, err = st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	rows = stagedRows(t, pool, once)
	require.Len(t, rows, 1)
	env, err := firing.Decode(rows[0].envelope)
	require.NoError(t, err)
	require.True(t, env.GetLastSlot())
}

// A job whose last slots were all skipped by its misfire policy has no
// firing left to complete it: the prefetcher completes it, records why in
// the ledger and in the audit trail.
func TestJobWhoseLastSlotsWereSkippedIsCompleted(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	job := intervalJob(time.Minute, now.Add(-10*time.Minute).Truncate(time.Minute), &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP,
	})
	job.Schedule.EndTime = timestamppb.New(now.Add(-2 * time.Minute))
	id := pgtest.InsertJob(t, pool, job, `$1`, now.Add(-10*time.Minute).Truncate(time.Minute))

	// A RUN_ONCE job in the same situation replays its last slot instead,
	// marked last_slot, and stays active for the worker to complete.
	job2 := intervalJob(time.Minute, now.Add(-10*time.Minute).Truncate(time.Minute), nil)
	job2.Schedule.EndTime = timestamppb.New(now.Add(-2 * time.Minute))
	id2 := pgtest.InsertJob(t, pool, job2, `$1`, now.Add(-10*time.Minute).Truncate(time.Minute))

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)

	var status string
	var updated time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, updated_at FROM jobs WHERE id = $1`, id).Scan(&status, &updated))
	require.Equal(t, "completed", status)
	require.True(t, updated.Equal(res.Now))
	require.Nil(t, nextFireAt(t, pool, id))
	require.Empty(t, stagedRows(t, pool, id))
	skipped := pendingRows(t, pool, id)
	require.NotEmpty(t, skipped)
	var actor, action string
	var version int64
	var detail map[string]any
	require.NoError(t, pool.QueryRow(ctx, `SELECT actor, action, version, detail FROM job_audit WHERE job_id = $1`, id).Scan(&actor, &action, &version, &detail))
	require.Equal(t, "system:prefetcher", actor)
	require.Equal(t, "complete", action)
	require.Equal(t, int64(1), version, "completion does not bump the version")
	require.Equal(t, skipped[len(skipped)-1].scheduled.UTC().Format(time.RFC3339Nano), detail["last_slot"])

	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, id2).Scan(&status))
	require.Equal(t, "active", status)
	rows := stagedRows(t, pool, id2)
	require.Len(t, rows, 1)
	env, err := firing.Decode(rows[0].envelope)
	require.NoError(t, err)
	require.True(t, env.GetLastSlot())
	require.True(t, env.GetCatchUp())
	var audits int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_audit WHERE job_id = $1`, id2).Scan(&audits))
	require.Zero(t, audits)
}

// Resume fires from now on: the api sets next_fire_at to the first slot
// after its now(), so however long the job was paused, the prefetcher
// sees no missed slot — no catch-up, no skipped-slot rows — even when the
// resume committed a moment before the slot it chose went by.
func TestResumedJobIsNotAMisfire(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	// Two jobs paused three hours ago (last staged slot then), resumed
	// now: a per-minute one whose first slot is ahead, and a per-second
	// one whose first slot passed a second before this pass (a slow
	// commit, a slow tick).
	mk := func(every time.Duration, next string) uuid.UUID {
		id := pgtest.InsertJob(t, pool, intervalJob(every, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), &sundialv1.MisfirePolicy{
			Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, MaxCatchUp: 100,
		}), next)
		_, err := pool.Exec(ctx, `UPDATE jobs SET version = 3, last_slot_at = date_trunc('minute', now()) - interval '3 hours' WHERE id = $1`, id)
		require.NoError(t, err)
		return id
	}
	ahead := mk(time.Minute, `date_trunc('minute', now()) + interval '1 minute'`)
	justPassed := mk(time.Second, `date_trunc('second', now()) - interval '1 second'`)

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 2, res.Claimed)
	require.Zero(t, res.CatchUp)
	require.Zero(t, res.Missed)
	require.Zero(t, res.Expired)
	require.Zero(t, res.Recorded)
	for _, id := range []uuid.UUID{ahead, justPassed} {
		require.Empty(t, pendingRows(t, pool, id))
		require.Empty(t, outboxCatchUps(t, pool, id))
		require.NotEmpty(t, stagedRows(t, pool, id))
	}
}

func TestJitterStaysWithinMaxJitter(t *testing.T) {
	st, pool := newStore(t)
	job := cronJob("* * * * * *")
	job.MaxJitter = durationpb.New(30 * time.Second)
	id := pgtest.InsertJob(t, pool, job, `date_trunc('second', now()) + interval '1 second'`)
	_, err := st.StageBatch(context.Background(), opts(1))
	require.NoError(t, err)
	distinct := map[time.Duration]bool{}
	for _, r := range stagedRows(t, pool, id) {
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
	now := time.Now()
	pgtest.CopyJobs(t, pool, 20000, func(i int) *sundialv1.Job {
		return &sundialv1.Job{Tenant: "t", NextFireTime: timestamppb.New(now.Add(time.Duration(i+1) * time.Second))}
	})
	_, err := pool.Exec(ctx, `ANALYZE jobs`)
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

// With a tracer, a transaction is a prefetch.batch span and every row it
// stages carries the context of its own firing span; sampled out (firing
// ratio 0), rows still carry a context, unsampled, and no firing span is
// recorded. A fenced transaction's span says so.
func TestStagedFiringsCarryTheirTraceContext(t *testing.T) {
	ctx := context.Background()
	for _, ratio := range []float64{1, 0} {
		t.Run(fmt.Sprint("firing-ratio-", ratio), func(t *testing.T) {
			rec := tracingtest.New(t, 1, ratio)
			pool := pgtest.Pool(t, pgtest.Schema(t))
			st := New(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), WithTracer(rec.Tracer()))
			id := pgtest.InsertJob(t, pool, cronJob("*/10 * * * * *"), `date_trunc('second', now()) + interval '1 second'`)

			res, err := st.StageBatch(ctx, opts(1))
			require.NoError(t, err)
			require.Positive(t, res.Staged)
			batches := rec.Named(SpanBatch)
			require.Len(t, batches, 1)
			require.Equal(t, fmt.Sprint(res.Staged), tracingtest.Attr(batches[0], "sundial.firings_staged"))

			fired := map[string]bool{}
			for _, s := range rec.Named(tracing.SpanStage) {
				fired[tracing.Format(s.SpanContext())] = true
				require.Equal(t, batches[0].SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID())
			}
			rows := stagedRows(t, pool, id)
			require.Len(t, rows, res.Staged)
			for _, r := range rows {
				f, err := firing.Decode(r.envelope)
				require.NoError(t, err)
				sc, ok := tracing.Parse(f.GetTraceparent())
				require.True(t, ok, "row %s has traceparent %q", r.exec, f.GetTraceparent())
				require.Equal(t, ratio == 1, sc.IsSampled())
				require.Equal(t, ratio == 1, fired[f.GetTraceparent()], "row %s's context is not a recorded firing span", r.exec)
			}
			if ratio == 0 {
				require.Empty(t, rec.Named(tracing.SpanStage))
			}

			_, err = st.StageBatch(ctx, opts(0))
			require.ErrorIs(t, err, ErrFenced)
			batches = rec.Named(SpanBatch)
			require.Equal(t, codes.Error, batches[len(batches)-1].Status().Code)
		})
	}
}
