package slots

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
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

// With a chunk, one pass stages the window and up to the job's next chunk
// boundary beyond it (here, phase 0: 12:02:30, the first multiple of 30 s
// at least 15 s past the window's end), and the job is due for its next
// claim only a chunk later: a per-second job over five minutes is claimed
// 10 times, not 300, and gets every slot exactly once.
func TestChunkStagesBeyondTheWindowAndDefersTheNextClaim(t *testing.T) {
	const window, chunk = 2 * time.Minute, 30 * time.Second
	first := now.Truncate(time.Second).Add(time.Second)
	in := Input{Schedule: everySecond(t), NextFireAt: first, Now: now, Window: window, Chunk: chunk, MisfireThreshold: 5 * time.Second, Policy: runOnce()}
	p := Compute(in)
	require.Len(t, p.Slots, 150)
	require.Equal(t, first.Add(150*time.Second), p.Next, "next_fire_at is the first slot after window+chunk")

	// Tick every second for five minutes, claiming as the prefetcher does
	// (next_fire_at within the window).
	seen := map[time.Time]int{}
	for _, s := range p.Slots {
		seen[s.At]++
	}
	claims, next := 1, p.Next
	for tick := 1; tick <= 300; tick++ {
		at := now.Add(time.Duration(tick) * time.Second)
		if next.After(at.Add(window)) {
			continue
		}
		claims++
		in.NextFireAt, in.Now = next, at
		q := Compute(in)
		require.Len(t, q.Slots, 30, "each later claim stages exactly one chunk")
		require.Zero(t, q.Slots[len(q.Slots)-1].At.UnixNano()%int64(chunk), "ending on the grid")
		for _, s := range q.Slots {
			require.False(t, s.CatchUp)
			seen[s.At]++
		}
		next = q.Next
	}
	require.Equal(t, 10, claims)
	for at := first; at.Before(next); at = at.Add(time.Second) {
		require.Equal(t, 1, seen[at], "slot %s", at)
	}
	require.Len(t, seen, int(next.Sub(first)/time.Second))
}

// A chunk does not change the misfire handling: the catch-up slot comes
// first, then the on-time slots (the late one included) up to the chunk's
// end (12:06, the first multiple of 3 minutes at least 1.5 minutes past
// the window's end).
func TestChunkAfterAnOutageKeepsTheMisfirePolicy(t *testing.T) {
	top := now.Truncate(time.Minute) // 12:00, 0.4 s ago: late, not missed
	p := Compute(Input{Schedule: everyMinute(t), NextFireAt: top.Add(-10 * time.Minute), Now: now, Window: 2 * time.Minute, Chunk: 3 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: runOnce(), MaxSkipRecords: 100})
	require.Equal(t, Slot{At: top.Add(-time.Minute), CatchUp: true}, p.Slots[0], "RUN_ONCE replays the most recent missed slot")
	var want []time.Time
	for m := range 7 {
		want = append(want, top.Add(time.Duration(m)*time.Minute))
	}
	require.Equal(t, want, ats(p)[1:])
	require.Len(t, p.Skipped, 9)
	require.Equal(t, top.Add(7*time.Minute), p.Next)
}

// A chunk ends at the first instant at least half a chunk past the
// window's end that lies the job's phase past a multiple of the chunk.
func TestChunkEndIsOnTheJobsPhaseOfTheGrid(t *testing.T) {
	const chunk = 30 * time.Second
	windowEnd := time.Date(2030, 6, 1, 12, 2, 0, 400_000_000, time.UTC)
	for _, c := range []struct {
		phase time.Duration
		want  time.Time
	}{
		{0, time.Date(2030, 6, 1, 12, 2, 30, 0, time.UTC)},
		{7 * time.Second, time.Date(2030, 6, 1, 12, 2, 37, 0, time.UTC)},
		{15*time.Second + 400*time.Millisecond, time.Date(2030, 6, 1, 12, 2, 15, 400_000_000, time.UTC)}, // exactly half a chunk on
		{15*time.Second + 300*time.Millisecond, time.Date(2030, 6, 1, 12, 2, 45, 300_000_000, time.UTC)}, // a millisecond short of it
		{29 * time.Second, time.Date(2030, 6, 1, 12, 2, 29, 0, time.UTC)},
	} {
		got := ChunkEnd(windowEnd, chunk, c.phase)
		require.Equal(t, c.want, got, "phase %s", c.phase)
		require.False(t, got.Before(windowEnd.Add(chunk/2)))
		require.True(t, got.Before(windowEnd.Add(3*chunk/2)))
	}
}

// Per-second jobs registered together are staged in one pass, but after
// that each group is claimed at its own phase of the chunk (the
// prefetcher's 16 ranges): a tick claims one group, never all 3,000 at
// once, and every job still gets every slot exactly once. With one phase
// for all, every claim of the 3,000 would land in the same tick every
// 30 s.
func TestJobsRegisteredTogetherAreClaimedSpreadOverTheChunk(t *testing.T) {
	const jobs, window, chunk = 3000, 2 * time.Minute, 30 * time.Second
	first := now.Truncate(time.Second).Add(time.Second)
	type job struct {
		phase time.Duration
		next  time.Time
		seen  map[time.Time]int
	}
	all := make([]*job, jobs)
	for i := range all {
		j := &job{phase: chunk * time.Duration(i%16) / 16, seen: map[time.Time]int{}}
		p := Compute(Input{Schedule: everySecond(t), NextFireAt: first, Now: now, Window: window, Chunk: chunk, Phase: j.phase, MisfireThreshold: 5 * time.Second, Policy: runOnce()})
		for _, s := range p.Slots {
			j.seen[s.At]++
		}
		j.next = p.Next
		all[i] = j
	}
	most := 0
	for tick := 1; tick <= 300; tick++ {
		at := now.Add(time.Duration(tick) * time.Second)
		claims := 0
		for _, j := range all {
			if j.next.After(at.Add(window)) {
				continue
			}
			claims++
			p := Compute(Input{Schedule: everySecond(t), NextFireAt: j.next, Now: at, Window: window, Chunk: chunk, Phase: j.phase, MisfireThreshold: 5 * time.Second, Policy: runOnce()})
			for _, s := range p.Slots {
				j.seen[s.At]++
			}
			j.next = p.Next
		}
		most = max(most, claims)
	}
	require.LessOrEqual(t, most, 2*jobs/16, "claims per tick: about one group of 3,000/16, not all 3,000")
	for _, j := range all[:50] {
		for at := first; at.Before(j.next); at = at.Add(time.Second) {
			require.Equal(t, 1, j.seen[at], "slot %s", at)
		}
		require.Len(t, j.seen, int(j.next.Sub(first)/time.Second))
	}
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

// A year-long outage of a per-second job does not walk a year of slots:
// the expired stretch is counted up to the walk bound and jumped over.
func TestExpiredSlotsAreSkippedWithoutEnumeration(t *testing.T) {
	counting := &countingSchedule{Schedule: everySecond(t)}
	p := Compute(Input{
		Schedule: counting, NextFireAt: now.AddDate(-1, 0, 0), Now: now, Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: runOnce(), MaxSkipWalk: 1000,
	})
	require.True(t, p.ExpiredAtLeast)
	require.GreaterOrEqual(t, p.Expired, 1000)
	require.Less(t, counting.calls, 2*1000+3600+200, "walks the bound, the grace and the window, not the year")
	require.True(t, p.Slots[0].CatchUp)
	require.Equal(t, now.Truncate(time.Second).Add(-5*time.Second), p.Slots[0].At, "the most recent missed slot")
	require.Equal(t, 3594, p.Missed, "missed inside the grace (11:00:01-11:59:54), not counting the one staged")
	require.Empty(t, p.Skipped, "MaxSkipRecords 0: everything is summarized")
	require.NotNil(t, p.Summary)
	require.True(t, p.Summary.AtLeast)
	require.Equal(t, now.AddDate(-1, 0, 0).Truncate(time.Second).Add(time.Second), p.Summary.First)
	require.Equal(t, p.Slots[0].At.Add(-time.Second), p.Summary.Last)
	require.Equal(t, 3594, p.Summary.Policy)
	require.Equal(t, p.Expired, p.Summary.Expired)
}

// After a year-long outage the most recent skipped slots are still listed
// one by one, expired ones included: the planner jumps to an estimate of
// where the listed stretch begins.
func TestLongOutageStillListsTheMostRecentSkippedSlots(t *testing.T) {
	counting := &countingSchedule{Schedule: everySecond(t)}
	skip := Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: time.Hour, MaxCatchUp: 10}
	p := Compute(Input{
		Schedule: counting, NextFireAt: now.AddDate(-1, 0, 0), Now: now, Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: skip, MaxSkipRecords: 5000, MaxSkipWalk: 20_000,
	})
	require.Less(t, counting.calls, 20_000+2*5000+2+3600+200)
	require.Len(t, p.Skipped, 5000)
	// The last 3595 are inside the grace (11:00:00.4 to 11:59:55.4), the
	// 1405 before them expired.
	last := now.Truncate(time.Second).Add(-5 * time.Second)
	for i, sk := range p.Skipped {
		want := last.Add(-time.Duration(len(p.Skipped)-1-i) * time.Second)
		require.Equal(t, want, sk.At, "skip %d", i)
		if want.Before(now.Add(-time.Hour)) {
			require.Equal(t, SkipExpired, sk.Kind, "skip %d", i)
		} else {
			require.Equal(t, SkipPolicy, sk.Kind, "skip %d", i)
		}
	}
	require.Equal(t, SkipExpired, p.Skipped[1404].Kind)
	require.Equal(t, SkipPolicy, p.Skipped[1405].Kind)
	require.NotNil(t, p.Summary)
	require.True(t, p.Summary.AtLeast)
	require.Equal(t, now.AddDate(-1, 0, 0).Truncate(time.Second).Add(time.Second), p.Summary.First)
	require.Equal(t, p.Skipped[0].At.Add(-time.Second), p.Summary.Last)
	require.Zero(t, p.Summary.Policy)
	require.GreaterOrEqual(t, p.Summary.Expired, 20_000)
}

// Every slot not staged is accounted for: listed with its kind, or in the
// summary, which is older than every listed slot.
func TestSkippedSlotsAreListedThenSummarized(t *testing.T) {
	outageStart := now.Add(-30 * time.Minute).Truncate(time.Second)
	policy := Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: 10 * time.Minute, MaxCatchUp: 3}
	p := Compute(Input{
		Schedule: everySecond(t), NextFireAt: outageStart, Now: now, Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: policy, MaxSkipRecords: 5,
	})
	lateCut := now.Add(-5 * time.Second)
	graceCut := now.Add(-10 * time.Minute)
	var catchUp []time.Time
	for _, s := range p.Slots {
		if s.CatchUp {
			catchUp = append(catchUp, s.At)
		}
	}
	last := lateCut.Truncate(time.Second) // 11:59:55, the newest missed slot
	require.Equal(t, []time.Time{last.Add(-2 * time.Second), last.Add(-time.Second), last}, catchUp)
	require.Len(t, p.Skipped, 5)
	for i, sk := range p.Skipped {
		require.Equal(t, last.Add(-time.Duration(7-i)*time.Second), sk.At)
		require.Equal(t, SkipPolicy, sk.Kind)
	}
	expired := int(graceCut.Truncate(time.Second).Add(time.Second).Sub(outageStart) / time.Second) // outageStart .. 11:50:00
	missed := int(last.Sub(graceCut.Truncate(time.Second))/time.Second) + 0                        // 11:50:01 .. 11:59:55
	require.Equal(t, expired, p.Expired)
	require.False(t, p.ExpiredAtLeast)
	require.Equal(t, missed-3, p.Missed)
	require.Equal(t, &Summary{
		First: outageStart, Last: p.Skipped[0].At.Add(-time.Second),
		Expired: expired, Policy: missed - 3 - 5,
	}, p.Summary)
	require.Equal(t, int(last.Sub(outageStart)/time.Second)+1, p.Summary.Count()+len(p.Skipped)+len(catchUp), "every missed or expired slot accounted once")
}

func TestLastSlotAndExhausted(t *testing.T) {
	first := now.Truncate(time.Second).Add(time.Second)
	end := now.Add(10 * time.Second)
	s, err := schedule.Parse("* * * * * *", schedule.Options{End: end})
	require.NoError(t, err)
	p := Compute(Input{Schedule: s, NextFireAt: first, Now: now, Window: 2 * time.Minute, Policy: runOnce()})
	require.True(t, p.LastSlot())
	require.False(t, p.Exhausted())

	// The window ends before the schedule does: not the last slot yet.
	p = Compute(Input{Schedule: s, NextFireAt: first, Now: now, Window: 5 * time.Second, Policy: runOnce()})
	require.False(t, p.LastSlot())
	require.False(t, p.Exhausted())

	// A schedule that ended during an outage, its last slots skipped by
	// SKIP: nothing is staged and nothing is left.
	skip := Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: time.Hour, MaxCatchUp: 10}
	p = Compute(Input{Schedule: s, NextFireAt: first, Now: now.Add(time.Minute), Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: skip, MaxSkipRecords: 100})
	require.True(t, p.Exhausted())
	require.False(t, p.LastSlot())
	require.Len(t, p.Skipped, 10)

	// The same under RUN_ONCE: the last slot is replayed, and it is the last.
	p = Compute(Input{Schedule: s, NextFireAt: first, Now: now.Add(time.Minute), Window: 2 * time.Minute,
		MisfireThreshold: 5 * time.Second, Policy: runOnce(), MaxSkipRecords: 100})
	require.True(t, p.LastSlot())
	require.Equal(t, []Slot{{At: first.Add(9 * time.Second), CatchUp: true}}, p.Slots)
	require.Len(t, p.Skipped, 9)
}

func TestReasons(t *testing.T) {
	once := runOnce()
	require.Equal(t, "misfire: older than the grace of 1h", once.Reason(SkipExpired))
	require.Equal(t, "misfire: policy RUN_ONCE replays only the most recent missed slot", once.Reason(SkipPolicy))
	all := Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: 4*time.Minute + 30*time.Second, MaxCatchUp: 3}
	require.Equal(t, "misfire: older than the grace of 4m30s", all.Reason(SkipExpired))
	require.Equal(t, "misfire: policy RUN_ALL replays only the 3 most recent missed slots", all.Reason(SkipPolicy))
	skip := Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, Grace: 90 * time.Minute}
	require.Equal(t, "misfire: older than the grace of 1h30m", skip.Reason(SkipExpired))
	require.Equal(t, "misfire: policy SKIP replays no missed slot", skip.Reason(SkipPolicy))

	sum := Summary{First: time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC), Last: time.Date(2030, 6, 1, 11, 0, 0, 0, time.UTC), Expired: 100, Policy: 21}
	require.Equal(t, "misfire: 121 slots from 2030-06-01T09:00:00Z to 2030-06-01T11:00:00Z skipped (only the most recent are recorded one by one):"+
		" 100 older than the grace of 1h; 21 not replayed by policy RUN_ONCE", once.SummaryReason(sum))
	sum.AtLeast, sum.Policy = true, 0
	require.Equal(t, "misfire: at least 100 slots from 2030-06-01T09:00:00Z to 2030-06-01T11:00:00Z skipped (only the most recent are recorded one by one):"+
		" 100 older than the grace of 1h", once.SummaryReason(sum))
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

func TestPolicyDefaults(t *testing.T) {
	p := PolicyOf(&sundialv1.Job{})
	require.Equal(t, runOnce(), p)
	p = PolicyOf(&sundialv1.Job{Misfire: &sundialv1.MisfirePolicy{
		Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: durationpb.New(time.Minute), MaxCatchUp: 3,
	}})
	require.Equal(t, Policy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, Grace: time.Minute, MaxCatchUp: 3}, p)
}
