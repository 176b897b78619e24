//go:build integration

package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// A job with two schedules that share instants stages each instant once:
// every 5 and every 10 seconds is every 5 seconds, one row per slot, and
// an exclusion of a stretch of the wall clock stages none of its slots.
func TestUnionStagesEachInstantOnceAndExclusionsSkip(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	// Exclude the wall-clock minute that starts about a minute from now.
	ex := now.Add(time.Minute).In(ny).Truncate(time.Minute)
	job := cronJob("*/10 * * * * *")
	job.Schedule.Timezone = "America/New_York"
	job.Schedule.AdditionalSchedules = []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "*/5 * * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "*/10 * * * * *"}},
	}
	job.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: ex.Format("15:04:05"), End: ex.Add(time.Minute).Format("15:04:05"), Note: "deploy"}}
	require.NoError(t, jobspec.Validate(job))
	jobspec.Normalize(job)
	sched, err := jobspec.Schedule(job, now)
	require.NoError(t, err)
	first := sched.Next(now)
	id := pgtest.InsertJob(t, pool, job, `$1`, first)

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	next := nextFireAt(t, pool, id)
	require.NotNil(t, next)

	rows := stagedRows(t, pool, id)
	var got []time.Time
	for _, r := range rows {
		got = append(got, r.scheduled.UTC())
	}
	var want []time.Time
	for s := first; s.Before(*next); s = sched.Next(s) {
		want = append(want, s.UTC())
	}
	require.Equal(t, want, got, "the union's instants, each once")
	require.Equal(t, len(want), res.Staged)
	for i := 1; i < len(got); i++ {
		gap := got[i].Sub(got[i-1])
		if !(got[i-1].Before(ex) && !got[i].Before(ex.Add(time.Minute))) {
			require.Equal(t, 5*time.Second, gap, "every five seconds outside the exclusion, at %s", got[i])
		}
	}
	for _, g := range got {
		require.False(t, !g.Before(ex) && g.Before(ex.Add(time.Minute)), "%s is in the excluded minute", g)
	}
	require.GreaterOrEqual(t, len(got), 12, "two minutes less the excluded one, every five seconds")

	// A second pass from another leader stages nothing twice.
	res, err = st.StageBatch(ctx, opts(2))
	require.NoError(t, err)
	require.Zero(t, res.Duplicates)
	require.Len(t, stagedRows(t, pool, id), len(rows)+res.Staged)
}

// max_runs: a job staged in passes stages exactly max_runs slots across
// them, counted once each in the staging transactions; the last one is
// marked last_slot (the worker completes the job after it) and
// next_fire_at is cleared. Catch-ups count. A job that has none left is
// completed by the prefetcher.
func TestMaxRunsStagesNThenTheJobEnds(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	count := func(id any) (int64, string) {
		var n int64
		var status string
		require.NoError(t, pool.QueryRow(ctx, `SELECT runs_staged, status FROM jobs WHERE id = $1`, id).Scan(&n, &status))
		return n, status
	}

	// Every 20 s with 2 minutes of window stages 6 per pass; the limit, 9,
	// takes two passes.
	anchor := now.Truncate(time.Minute)
	job := intervalJob(20*time.Second, anchor, nil)
	job.MaxRuns = 9
	first := anchor
	for !first.After(now) {
		first = first.Add(20 * time.Second)
	}
	id := pgtest.InsertJob(t, pool, job, `$1`, first)
	o := opts(1)
	o.Window = 90 * time.Second
	res, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	n, status := count(id)
	require.Equal(t, int64(res.Staged), n, "every staged slot is counted")
	require.Less(t, n, int64(9))
	require.Equal(t, "active", status)

	// The next pass, from further on (as if time went by): pull
	// next_fire_at into the window by moving the job's anchor back.
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = next_fire_at - interval '5 minutes', runs_counted_through = runs_counted_through - interval '5 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM outbox WHERE job_id = $1`, id)
	require.NoError(t, err)
	o.Window = 10 * time.Minute
	res, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	n, status = count(id)
	require.Equal(t, int64(9), n)
	require.Nil(t, nextFireAt(t, pool, id), "no slot after the 9th")
	require.Equal(t, "active", status, "the worker completes it once the last run settles")
	rows := stagedRows(t, pool, id)
	require.Len(t, rows, 9-int(n-int64(res.Staged)))
	env, err := firing.Decode(rows[len(rows)-1].envelope)
	require.NoError(t, err)
	require.True(t, env.GetLastSlot())

	// Staged again from before the counted slots (an update that dropped
	// the unpublished rows): nothing is counted twice, and the limit
	// holds.
	_, err = pool.Exec(ctx, `DELETE FROM outbox WHERE job_id = $1`, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE jobs SET next_fire_at = $2 WHERE id = $1`, id, rows[0].scheduled)
	require.NoError(t, err)
	_, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	n, _ = count(id)
	require.Equal(t, int64(9), n)
	require.Len(t, stagedRows(t, pool, id), len(rows), "the same slots again, no more")

	// A job whose limit is already used up (max_runs lowered) is
	// completed by the prefetcher, saying why.
	done := cronJob("*/5 * * * * *")
	done.MaxRuns = 3
	id2 := pgtest.InsertJob(t, pool, done, `date_trunc('second', now()) + interval '1 second'`)
	_, err = pool.Exec(ctx, `UPDATE jobs SET runs_staged = 3 WHERE id = $1`, id2)
	require.NoError(t, err)
	res, err = st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Completed)
	_, status = count(id2)
	require.Equal(t, "completed", status)
	require.Empty(t, stagedRows(t, pool, id2))
	var detail map[string]any
	require.NoError(t, pool.QueryRow(ctx, `SELECT detail FROM job_audit WHERE job_id = $1`, id2).Scan(&detail))
	require.Equal(t, "max_runs reached", detail["reason"])

	// Catch-ups count: RUN_ALL after an outage replays 3 missed slots, and
	// with max_runs 2 only the 2 most recent are staged, the second last.
	past := now.Add(-5 * time.Minute).Truncate(time.Minute)
	cu := intervalJob(time.Minute, past, &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, MaxCatchUp: 3})
	cu.MaxRuns = 2
	cu.Schedule.EndTime = timestamppb.New(now.Add(time.Hour))
	id3 := pgtest.InsertJob(t, pool, cu, `$1`, past)
	_, err = st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	rows = stagedRows(t, pool, id3)
	require.Len(t, rows, 2)
	require.True(t, rows[0].catchUp && rows[1].catchUp)
	env, err = firing.Decode(rows[1].envelope)
	require.NoError(t, err)
	require.True(t, env.GetLastSlot())
	n, _ = count(id3)
	require.Equal(t, int64(2), n)
}
