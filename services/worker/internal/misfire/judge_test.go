package misfire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/misfire"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func policy(a sundialv1.MisfireAction, grace time.Duration, maxCatchUp int32) *sundialv1.MisfirePolicy {
	return &sundialv1.MisfirePolicy{Action: a, Grace: durationpb.New(grace), MaxCatchUp: maxCatchUp}
}

// fir is a per-second job's firing at t0 + sec.
func fir(job string, sec int, p *sundialv1.MisfirePolicy) *sundialv1.Firing {
	at := timestamppb.New(t0.Add(time.Duration(sec) * time.Second))
	return &sundialv1.Firing{JobId: job, ScheduledTime: at, FireTime: at, Misfire: p,
		Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE}
}

func newJudge(now time.Time) (*Judge, *clock.Fake) {
	clk := clock.NewFake(now)
	return New(Config{}, clk), clk
}

func TestNotLateFiresWhateverThePolicy(t *testing.T) {
	j, clk := newJudge(t0.Add(5 * time.Second)) // exactly the threshold: not late
	skip := policy(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, time.Hour, 0)
	j.Arrived(fir("a", 0, skip))
	j.Arrived(fir("a", 1, skip))
	require.Equal(t, Verdict{Fire: true}, j.Judge(fir("a", 0, skip)))
	clk.Advance(time.Millisecond)
	v := j.Judge(fir("a", 0, skip))
	require.False(t, v.Fire, "a millisecond past the threshold is a misfire")
	require.Equal(t, 5*time.Second+time.Millisecond, v.Late)
}

func TestSkipSkipsEveryLateFiring(t *testing.T) {
	j, _ := newJudge(t0.Add(10 * time.Second))
	p := policy(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, time.Hour, 0)
	j.Arrived(fir("a", 0, p))
	v := j.Judge(fir("a", 0, p))
	require.Equal(t, Verdict{Late: 10 * time.Second, Kind: misfire.NotReplayed, Reason: "misfire: policy SKIP replays no missed slot"}, v)
	require.Zero(t, j.Jobs(), "SKIP needs no memory")
}

func TestRunOnceFiresOnlyTheNewestLateFiring(t *testing.T) {
	j, clk := newJudge(t0.Add(20 * time.Second))
	p := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, time.Hour, 0)
	for s := 0; s <= 30; s++ { // the consumer holds 0 … 30; 0 … 14 are late (cut at 15)
		j.Arrived(fir("a", s, p))
	}
	for s := 0; s < 14; s++ {
		v := j.Judge(fir("a", s, p))
		require.False(t, v.Fire, "slot %d: a newer firing is late too", s)
		require.Equal(t, misfire.NotReplayed, v.Kind)
		require.Equal(t, "misfire: policy RUN_ONCE replays only the most recent missed slot", v.Reason)
	}
	v := j.Judge(fir("a", 14, p))
	require.True(t, v.Fire, "the newest late firing fires")
	require.Equal(t, 6*time.Second, v.Late)
	require.True(t, j.Judge(fir("a", 15, p)).Fire, "15 is not late (exactly the threshold)")

	// Judged out of order: an old one after the newest still knows of it.
	require.False(t, j.Judge(fir("a", 3, p)).Fire)

	// Another job is judged on its own.
	j.Arrived(fir("b", 1, p))
	require.True(t, j.Judge(fir("b", 1, p)).Fire)

	// Time moves on (cut at 21): 15 … 20 become late, 20 the newest.
	clk.Advance(6 * time.Second)
	require.False(t, j.Judge(fir("a", 19, p)).Fire)
	require.True(t, j.Judge(fir("a", 20, p)).Fire)
}

func TestRunAllFiresTheMostRecentUpToTheCap(t *testing.T) {
	j, _ := newJudge(t0.Add(30 * time.Second))
	p := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, time.Hour, 3)
	for s := 0; s <= 40; s++ { // late: 0 … 24
		j.Arrived(fir("a", s, p))
	}
	var fired []int
	for s := 0; s <= 24; s++ {
		v := j.Judge(fir("a", s, p))
		if v.Fire {
			fired = append(fired, s)
			continue
		}
		require.Equal(t, "misfire: policy RUN_ALL replays only the 3 most recent missed slots", v.Reason)
	}
	require.Equal(t, []int{22, 23, 24}, fired)
}

func TestBeyondTheGraceIsExpired(t *testing.T) {
	j, _ := newJudge(t0.Add(10 * time.Minute))
	p := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL, 4*time.Minute+30*time.Second, 50)
	j.Arrived(fir("a", 0, p))
	v := j.Judge(fir("a", 0, p))
	require.Equal(t, Verdict{Late: 10 * time.Minute, Kind: misfire.Expired, Reason: "misfire: older than the grace of 4m30s"}, v)

	// The defaults (no policy in the envelope): RUN_ONCE, grace 1 h.
	j2, _ := newJudge(t0.Add(time.Hour + time.Second))
	v = j2.Judge(fir("b", 0, nil))
	require.Equal(t, misfire.Expired, v.Kind)
	require.Equal(t, "misfire: older than the grace of 1h", v.Reason)
}

func TestOnlyScheduleFiringsAreJudged(t *testing.T) {
	j, _ := newJudge(t0.Add(time.Hour * 2))
	skip := policy(sundialv1.MisfireAction_MISFIRE_ACTION_SKIP, time.Minute, 0)
	for _, o := range []sundialv1.FiringOrigin{
		sundialv1.FiringOrigin_FIRING_ORIGIN_RETRY, sundialv1.FiringOrigin_FIRING_ORIGIN_TRIGGER,
		sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL, sundialv1.FiringOrigin_FIRING_ORIGIN_REDRIVE,
	} {
		f := fir("a", 0, skip)
		f.Origin = o
		j.Arrived(f)
		require.Equal(t, Verdict{Fire: true}, j.Judge(f), o.String())
	}
	catchUp := fir("a", 0, skip)
	catchUp.CatchUp = true
	require.Equal(t, Verdict{Fire: true}, j.Judge(catchUp), "a catch-up was judged by the prefetcher")
	unspecified := fir("a", 0, skip)
	unspecified.Origin = sundialv1.FiringOrigin_FIRING_ORIGIN_UNSPECIFIED
	require.False(t, j.Judge(unspecified).Fire, "unspecified is SCHEDULE")

	// A retry arriving with a later instant does not supersede a late slot.
	once := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, 3*time.Hour, 0)
	retry := fir("c", 100, once)
	retry.Origin = sundialv1.FiringOrigin_FIRING_ORIGIN_RETRY
	j.Arrived(fir("c", 0, once))
	j.Arrived(retry)
	require.True(t, j.Judge(fir("c", 0, once)).Fire)
}

func TestMemoryIsBounded(t *testing.T) {
	j, clk := newJudge(t0)
	p := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, 10*time.Minute, 0)
	// A per-second job held for a day ahead, judged as time passes: only
	// the instants not yet late and one late one stay.
	for s := 0; s < 600; s++ {
		j.Arrived(fir("a", s, p))
	}
	clk.Set(t0.Add(300 * time.Second))
	require.True(t, j.Judge(fir("a", 294, p)).Fire)
	j.mu.Lock()
	n := len(j.jobs["a"].instants)
	j.mu.Unlock()
	require.Equal(t, 1+(600-295), n, "one late instant, and the ones not late yet")

	// Jobs whose newest instant is older than their grace are forgotten.
	for i := range 1000 {
		j.Arrived(fir(string(rune('A'+i%26))+time.Duration(i).String(), 300, p))
	}
	require.Equal(t, 1001, j.Jobs())
	clk.Set(t0.Add(300*time.Second + 11*time.Minute))
	j.Arrived(fir("z", 1000, p))
	require.Equal(t, 2, j.Jobs(), "a's newest (599 s) and z are within the grace")
	// (pruning runs at most once per tenth of MaxGrace: 6 minutes later)
	clk.Set(t0.Add(599*time.Second + 13*time.Minute))
	j.Arrived(fir("y", 1300, p))
	require.Equal(t, 2, j.Jobs(), "a is forgotten; z and y are left")

	// MaxGrace caps a long grace.
	clk.Set(t0)
	long := policy(sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, 7*24*time.Hour, 0)
	j2 := New(Config{MaxGrace: time.Hour}, clk)
	j2.Arrived(fir("a", 0, long))
	clk.Advance(time.Hour + time.Minute)
	j2.Arrived(fir("b", 3700, long))
	require.Equal(t, 1, j2.Jobs())
}

func TestConfigValidateNamesTheField(t *testing.T) {
	require.ErrorContains(t, Config{Threshold: -1}.Validate(), "misfire-threshold")
	require.ErrorContains(t, Config{MaxGrace: -1}.Validate(), "misfire-max-grace")
	require.NoError(t, Config{}.Validate())
}
