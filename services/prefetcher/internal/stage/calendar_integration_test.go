//go:build integration

package stage

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// testAudit names the test as the calendars' changer.
var testAudit = calendarstore.Audit{Actor: "tenant-a/test"}

func stagedSlots(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) []time.Time {
	t.Helper()
	r, err := pool.Query(context.Background(), `SELECT scheduled_at FROM outbox WHERE job_id = $1 ORDER BY scheduled_at`, id)
	require.NoError(t, err)
	var got []time.Time
	for r.Next() {
		var s time.Time
		require.NoError(t, r.Scan(&s))
		got = append(got, s.UTC())
	}
	require.NoError(t, r.Err())
	return got
}

// A daily job with a SKIP calendar is staged without its holiday's
// instant; one with MOVE_NEXT fires its holiday instants on the next
// business day, once though two holidays move onto it; and a calendar edit
// applies to the instants the next pass stages. The window is days long so
// that one pass reaches past the holidays.
func TestCalendarJobsAreStagedWithoutHolidays(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	day := func(n int) time.Time {
		return time.Date(now.Year(), now.Month(), now.Day()+n, 12, 0, 0, 0, time.UTC)
	}
	date := func(n int) string { return day(n).Format(time.DateOnly) }

	cals := calendarstore.NewStore(pool)
	noWeekend := &sundialv1.Weekend{}
	_, err := cals.Create(ctx, "tenant-a", &sundialv1.Calendar{Name: "ops", Weekend: noWeekend,
		Holidays: []*sundialv1.CalendarHoliday{{Date: date(2), Name: "Founders' Day"}}}, testAudit)
	require.NoError(t, err)
	_, err = cals.Create(ctx, "tenant-a", &sundialv1.Calendar{Name: "bank", Weekend: noWeekend,
		Holidays: []*sundialv1.CalendarHoliday{{Date: date(1)}, {Date: date(2)}}}, testAudit)
	require.NoError(t, err)

	insert := func(cal string, p sundialv1.CalendarPolicy) (uuid.UUID, schedule.Schedule) {
		job := cronJob("0 12 * * *")
		job.Schedule.Calendar, job.Schedule.CalendarPolicy = cal, p
		base, err := jobspec.FromProto(job.GetSchedule(), now)
		require.NoError(t, err)
		c, err := cals.Get(ctx, "tenant-a", cal)
		require.NoError(t, err)
		sch, err := calendar.Apply(base, job.GetSchedule(), c)
		require.NoError(t, err)
		return pgtest.InsertJob(t, pool, job, `$1`, sch.Next(now)), sch
	}
	skip, _ := insert("ops", sundialv1.CalendarPolicy_CALENDAR_POLICY_SKIP)
	move, _ := insert("bank", sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT)

	o := opts(1)
	o.Window = 4*24*time.Hour + time.Minute
	res, err := st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.Equal(t, 2, res.Claimed)

	// Noon of days 0 (if still ahead) to 4, in UTC.
	var plain []time.Time
	for n := 0; n <= 4; n++ {
		if day(n).After(now) && !day(n).After(res.Now.Add(o.Window)) {
			plain = append(plain, day(n))
		}
	}
	without := func(drop ...time.Time) []time.Time {
		var out []time.Time
		for _, p := range plain {
			keep := true
			for _, d := range drop {
				keep = keep && !p.Equal(d)
			}
			if keep {
				out = append(out, p)
			}
		}
		return out
	}
	require.Equal(t, without(day(2)), stagedSlots(t, pool, skip), "SKIP: the holiday's noon is not staged")
	require.Equal(t, without(day(1), day(2)), stagedSlots(t, pool, move)[:len(without(day(1), day(2)))],
		"MOVE_NEXT: days 1 and 2 move onto day 3's noon, which is staged once")
	require.Len(t, stagedSlots(t, pool, move), len(without(day(1), day(2))))

	// Day 6 becomes a holiday: the next pass, reaching past it, skips it.
	// The edit pulled next_fire_at back to just after the last staged slot.
	_, pulled, err := cals.Update(ctx, "tenant-a", "ops", 0, testAudit, func(cur *sundialv1.Calendar) (*sundialv1.Calendar, error) {
		cur.Holidays = append(cur.Holidays, &sundialv1.CalendarHoliday{Date: date(6), Name: "added"})
		return cur, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, pulled, "the one active job using ops")
	o.Window = 8 * 24 * time.Hour
	_, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	got := stagedSlots(t, pool, skip)
	require.Contains(t, got, day(5))
	require.NotContains(t, got, day(6), "the holiday added before its instant was staged")
	require.Contains(t, got, day(7))

	// A job whose calendar is gone cannot be evaluated: it is reported
	// unschedulable, not fired without its holidays.
	job := cronJob("0 12 * * *")
	job.Schedule.Calendar = "missing"
	pgtest.InsertJob(t, pool, job, `now()`)
	res, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.Equal(t, 1, res.Unschedulable)
}

// A holiday removed before its instant is staged brings the instant back:
// the update pulls next_fire_at (already past the holiday) back to just
// after the last staged slot, and the next pass stages the restored
// instant once, and nothing twice.
func TestCalendarEditRestoresAnUnstagedInstant(t *testing.T) {
	st, pool := newStore(t)
	ctx := context.Background()
	now := dbNow(t, pool)
	noon := func(n int) time.Time { return time.Date(now.Year(), now.Month(), now.Day()+n, 12, 0, 0, 0, time.UTC) }

	cals := calendarstore.NewStore(pool)
	_, err := cals.Create(ctx, "tenant-a", &sundialv1.Calendar{Name: "ops", Weekend: &sundialv1.Weekend{},
		Holidays: []*sundialv1.CalendarHoliday{{Date: noon(2).Format(time.DateOnly)}}}, testAudit)
	require.NoError(t, err)
	job := cronJob("0 12 * * *")
	job.Schedule.Calendar = "ops"
	base, err := jobspec.FromProto(job.GetSchedule(), now)
	require.NoError(t, err)
	c, err := cals.Get(ctx, "tenant-a", "ops")
	require.NoError(t, err)
	sch, err := calendar.Apply(base, job.GetSchedule(), c)
	require.NoError(t, err)
	id := pgtest.InsertJob(t, pool, job, `$1`, sch.Next(now))

	// Stage up to day 1's noon: next_fire_at jumps the holiday to day 3.
	o := opts(1)
	o.Window = noon(1).Sub(now) + time.Hour
	_, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	require.Equal(t, noon(3), nextFireAt(t, pool, id).UTC())
	staged := stagedSlots(t, pool, id)
	require.Equal(t, noon(1), staged[len(staged)-1])

	_, pulled, err := cals.Update(ctx, "tenant-a", "ops", 1, testAudit, func(cur *sundialv1.Calendar) (*sundialv1.Calendar, error) {
		cur.Holidays = nil
		return cur, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, pulled)
	require.True(t, nextFireAt(t, pool, id).Before(noon(2)), "next_fire_at pulled back before the restored instant")

	o.Window = noon(3).Sub(now) + time.Hour
	_, err = st.StageBatch(ctx, o)
	require.NoError(t, err)
	got := stagedSlots(t, pool, id)
	require.Equal(t, append(staged, noon(2), noon(3)), got, "day 2 restored, nothing staged twice")

	// A stale expected version is refused and changes nothing.
	_, _, err = cals.Update(ctx, "tenant-a", "ops", 1, testAudit, func(cur *sundialv1.Calendar) (*sundialv1.Calendar, error) { return cur, nil })
	require.ErrorIs(t, err, calendarstore.ErrVersion)
}
