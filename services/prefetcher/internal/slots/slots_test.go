package slots

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2030, 6, 1, 12, 0, 0, 400_000_000, time.UTC) // not on a second

func everySecond(t *testing.T) schedule.Schedule {
	s, err := schedule.Parse("* * * * * *", schedule.Options{})
	require.NoError(t, err)
	return s
}

func everyMinute(t *testing.T) schedule.Schedule {
	s, err := schedule.Every(time.Minute, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), schedule.Options{})
	require.NoError(t, err)
	return s
}

func runOnce() Policy {
	return Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, Grace: time.Hour, MaxCatchUp: 10}
}

func ats(p Plan) []time.Time {
	out := make([]time.Time, len(p.Slots))
	for i, s := range p.Slots {
		out[i] = s.At
	}
	return out
}

func TestSecondCronStages120SlotsPerWindow(t *testing.T) {
	first := now.Truncate(time.Second).Add(time.Second)
	p := Compute(Input{Schedule: everySecond(t), NextFireAt: first, Now: now, Window: 2 * time.Minute, MisfireThreshold: 5 * time.Second, Policy: runOnce()})
	require.Len(t, p.Slots, 120)
	require.Equal(t, first, p.Slots[0].At)
	require.Equal(t, first.Add(119*time.Second), p.Slots[119].At)
	require.Equal(t, first.Add(120*time.Second), p.Next, "next_fire_at is the first slot after the window")
	for _, s := range p.Slots {
		require.False(t, s.CatchUp)
	}

	// The next pass, a second later, stages exactly the one new slot.
	later := Compute(Input{Schedule: everySecond(t), NextFireAt: p.Next, Now: now.Add(time.Second), Window: 2 * time.Minute, MisfireThreshold: 5 * time.Second, Policy: runOnce()})
	require.Equal(t, []time.Time{p.Next}, ats(later))
}

func TestRoundedNextFireAtStillFindsItsSlot(t *testing.T) {
	slot := now.Add(10*time.Second + 700) // nanoseconds Postgres cannot keep
	s := schedule.Once(slot, schedule.Options{})
	p := Compute(Input{Schedule: s, NextFireAt: slot.Round(time.Microsecond), Now: now, Window: time.Minute, Policy: runOnce()})
	require.Equal(t, []time.Time{slot}, ats(p))
	require.True(t, p.Next.IsZero())
}

func TestOneOffStagesOnceThenNone(t *testing.T) {
	at := now.Add(30 * time.Second)
	s := schedule.Once(at, schedule.Options{})
	p := Compute(Input{Schedule: s, NextFireAt: at, Now: now, Window: 2 * time.Minute, Policy: runOnce()})
	require.Equal(t, []time.Time{at}, ats(p))
	require.True(t, p.Next.IsZero(), "no slots left: next_fire_at becomes NULL")
	// Nothing to do for a job without next_fire_at.
	require.Empty(t, Compute(Input{Schedule: s, Now: now, Window: 2 * time.Minute, Policy: runOnce()}).Slots)
}

func TestOneOffOutsideWindowWaits(t *testing.T) {
	at := now.Add(10 * time.Minute)
	p := Compute(Input{Schedule: schedule.Once(at, schedule.Options{}), NextFireAt: at, Now: now, Window: 2 * time.Minute, Policy: runOnce()})
	require.Empty(t, p.Slots)
	require.Equal(t, at, p.Next)
}

// After a 10-minute outage a per-minute job has 10 missed slots.
func TestMisfirePolicies(t *testing.T) {
	sched := everyMinute(t)
	outageStart := time.Date(2030, 6, 1, 11, 50, 0, 0, time.UTC)
	missed := []time.Time{}
	for m := outageStart; m.Before(now.Add(-5 * time.Second)); m = m.Add(time.Minute) {
		missed = append(missed, m)
	}
	require.Len(t, missed, 10) // 11:50 … 11:59
	onTime := []time.Time{
		time.Date(2030, 6, 1, 12, 1, 0, 0, time.UTC),
		time.Date(2030, 6, 1, 12, 2, 0, 0, time.UTC),
	}
	// 12:00:00 is 0.4 s old: late, but inside the threshold, so on time.
	late := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

	cases := []struct {
		name       string
		policy     Policy
		wantCatch  []time.Time
		wantMissed int
	}{
		{"skip", Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: time.Hour, MaxCatchUp: 10}, nil, 10},
		{"run once", runOnce(), missed[9:], 9},
		{"run all capped", Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: time.Hour, MaxCatchUp: 3}, missed[7:], 7},
		{"run all under cap", Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: time.Hour, MaxCatchUp: 50}, missed, 0},
		{"grace cuts the oldest", Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: 4*time.Minute + 30*time.Second, MaxCatchUp: 50}, missed[6:], 0},
		{"zero grace replays nothing", Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: 0, MaxCatchUp: 50}, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Compute(Input{Schedule: sched, NextFireAt: outageStart, Now: now, Window: 2 * time.Minute, MisfireThreshold: 5 * time.Second, Policy: c.policy})
			var gotCatch, gotOn []time.Time
			for _, s := range p.Slots {
				if s.CatchUp {
					require.Empty(t, gotOn, "catch-up slots come first, in order")
					gotCatch = append(gotCatch, s.At)
				} else {
					gotOn = append(gotOn, s.At)
				}
			}
			require.Equal(t, c.wantCatch, gotCatch)
			require.Equal(t, c.wantMissed, p.Missed)
			if c.policy.Grace == 0 {
				// now-grace = now: the late slot is older than the grace too.
				require.Equal(t, onTime, gotOn)
			} else {
				require.Equal(t, append([]time.Time{late}, onTime...), gotOn)
			}
			require.Equal(t, time.Date(2030, 6, 1, 12, 3, 0, 0, time.UTC), p.Next)
		})
	}
}

// A year-long outage of a per-second job does not walk a year of slots.
func TestExpiredSlotsAreSkippedWithoutEnumeration(t *testing.T) {
	counting := &countingSchedule{Schedule: everySecond(t)}
	p := Compute(Input{
		Schedule: counting, NextFireAt: now.AddDate(-1, 0, 0), Now: now, Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: runOnce(),
	})
	require.True(t, p.Expired)
	require.Less(t, counting.calls, 3600+200, "walks the grace and the window, not the year")
	require.True(t, p.Slots[0].CatchUp)
	require.Equal(t, now.Truncate(time.Second).Add(-5*time.Second), p.Slots[0].At, "the most recent missed slot")
	require.Equal(t, 3594, p.Missed, "missed inside the grace (11:00:01-11:59:54), not counting the one staged")
}

type countingSchedule struct {
	Schedule
	calls int
}

func (c *countingSchedule) Next(after time.Time) time.Time {
	c.calls++
	return c.Schedule.Next(after)
}

func TestMaxSlotsCapsAPassWithoutLosingSlots(t *testing.T) {
	first := now.Truncate(time.Second).Add(time.Second)
	p := Compute(Input{Schedule: everySecond(t), NextFireAt: first, Now: now, Window: 2 * time.Minute, Policy: runOnce(), MaxSlots: 50})
	require.Len(t, p.Slots, 50)
	require.Equal(t, first.Add(50*time.Second), p.Next, "the next pass resumes at the first unstaged slot")
}

func TestScheduleEndGivesNoNext(t *testing.T) {
	end := now.Add(10 * time.Second)
	s, err := schedule.Parse("* * * * * *", schedule.Options{End: end})
	require.NoError(t, err)
	p := Compute(Input{Schedule: s, NextFireAt: now.Truncate(time.Second).Add(time.Second), Now: now, Window: 2 * time.Minute, Policy: runOnce()})
	require.Len(t, p.Slots, 10)
	require.True(t, p.Next.IsZero())
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	job := uuid.MustParse("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f")
	require.Zero(t, Jitter(job, now, 0))
	require.Zero(t, Jitter(job, now, 500*time.Microsecond))
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		slot := now.Add(time.Duration(i) * time.Second)
		j := Jitter(job, slot, time.Minute)
		require.GreaterOrEqual(t, j, time.Duration(0))
		require.Less(t, j, time.Minute)
		require.Equal(t, j, Jitter(job, slot, time.Minute), "same (job, slot), same jitter")
		require.Zero(t, j%time.Millisecond)
		seen[j/time.Second] = true
	}
	require.Greater(t, len(seen), 50, "spread across the minute")
}

func TestPolicyDefaults(t *testing.T) {
	p := PolicyOf(&sundialv1.Job{})
	require.Equal(t, runOnce(), p)
	p = PolicyOf(&sundialv1.Job{Misfire: &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: durationpb.New(time.Minute), MaxCatchUp: 3,
	}})
	require.Equal(t, Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: time.Minute, MaxCatchUp: 3}, p)
}
