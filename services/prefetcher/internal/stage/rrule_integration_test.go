//go:build integration

package stage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// rruleJob is a job on a recurrence rule, with DTSTART at start.
func rruleJob(rule, zone string, start time.Time) *sundialv1.Job {
	return &sundialv1.Job{
		Name:     "rrule",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: rule}, Timezone: zone, StartTime: timestamppb.New(start)},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:1/hook"}}},
	}
}

// An RRULE job is staged like a cron job: exactly the rule's slots in the
// window, each once, and next_fire_at moves to the rule's first slot after
// it. The rule fires every ten seconds (FREQ=HOURLY with every minute and
// six seconds), minus an EXDATE, in a zone with a 30-minute offset.
func TestRRuleJobStagesTheRuleSlots(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	require.NoError(t, err)

	var minutes []string
	for m := range 60 {
		minutes = append(minutes, fmt.Sprint(m))
	}
	// Exclude the slot about a minute from now, by its local wall reading.
	excluded := now.Add(time.Minute).Truncate(10 * time.Second)
	rule := "RRULE:FREQ=HOURLY;BYMINUTE=" + strings.Join(minutes, ",") + ";BYSECOND=0,10,20,30,40,50\nEXDATE:" +
		excluded.In(kolkata).Format("20060102T150405")
	start := now.Truncate(time.Second)
	job := rruleJob(rule, "Asia/Kolkata", start)
	sched, err := jobspec.FromProto(job.GetSchedule(), start)
	require.NoError(t, err)
	first := sched.Next(start.Add(-time.Nanosecond))
	id := pgtest.InsertJob(t, pool, job, `$1`, first)

	res, err := st.StageBatch(ctx, opts(1))
	require.NoError(t, err)
	require.Equal(t, 1, res.Claimed)
	next := nextFireAt(t, pool, id)
	require.NotNil(t, next)
	require.True(t, next.After(res.Now.Add(2*time.Minute)), "next_fire_at %v is past the window", next)

	var want []time.Time
	for s := first; s.Before(*next); s = sched.Next(s) {
		want = append(want, s.UTC())
	}
	require.Equal(t, sched.Next(want[len(want)-1]), next.In(kolkata), "next_fire_at is the rule's first slot after the window")
	require.GreaterOrEqual(t, len(want), 11, "two minutes of a ten-second rule less one EXDATE")

	r, err := pool.Query(ctx, `SELECT scheduled_at FROM outbox WHERE job_id = $1 ORDER BY scheduled_at`, id)
	require.NoError(t, err)
	var got []time.Time
	for r.Next() {
		var s time.Time
		require.NoError(t, r.Scan(&s))
		got = append(got, s.UTC())
	}
	require.NoError(t, r.Err())
	require.Equal(t, want, got)
	require.NotContains(t, got, excluded.UTC(), "the EXDATE is not staged")
	require.Equal(t, len(want), res.Staged)
}
