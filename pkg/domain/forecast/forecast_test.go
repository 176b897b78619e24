package forecast

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// cronJob is a job with a cron schedule in zone.
func cronJob(id, tenant, expr, zone string, jitter time.Duration, opts ...func(*sundialv1.Schedule)) *sundialv1.Job {
	s := &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}, Timezone: zone}
	for _, o := range opts {
		o(s)
	}
	return &sundialv1.Job{Id: id, Tenant: tenant, Name: "job-" + id, Schedule: s, MaxJitter: durationpb.New(jitter), Priority: sundialv1.Priority_PRIORITY_MEDIUM}
}

func build(t *testing.T, o Options, jobs ...*sundialv1.Job) *Forecast {
	t.Helper()
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, j := range jobs {
		b.Add(FromJob(j, created, nil))
	}
	return b.Forecast()
}

// firingMinutes lists the minutes (as instants) with firings.
func firingMinutes(f *Forecast) map[time.Time]int64 {
	out := map[time.Time]int64{}
	for i, n := range f.Minutes {
		if n > 0 {
			out[f.From.Add(time.Duration(i)*time.Minute)] = n
		}
	}
	return out
}

// TestForecastDSTDay: the forecast is the engine's, per zone: a 09:00 New
// York job moves from 14:00 to 13:00 UTC when the clocks go forward on
// 2026-03-08, a 02:30 job fires at the end of the gap (03:00 EDT, 07:00
// UTC) with the default policy and not at all with SKIP, and a London job
// does not move that week.
func TestForecastDSTDay(t *testing.T) {
	from := time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC)
	f := build(t, Options{From: from, Window: 4 * 24 * time.Hour},
		cronJob("a", "t1", "0 9 * * *", "America/New_York", 0),
		cronJob("b", "t1", "30 2 * * *", "America/New_York", 0),
		cronJob("c", "t1", "30 2 * * *", "America/New_York", 0, func(s *sundialv1.Schedule) {
			s.DstGap = sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP
		}),
		cronJob("d", "t1", "0 9 * * *", "Europe/London", 0),
	)
	utc := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) }
	want := map[time.Time]int64{
		utc(6, 14, 0): 1, utc(7, 14, 0): 1, utc(8, 13, 0): 1, utc(9, 13, 0): 1, // New York 09:00
		utc(6, 7, 30): 2, utc(7, 7, 30): 2, utc(8, 7, 0): 1, utc(9, 6, 30): 2, // 02:30 EST, the gap, 02:30 EDT
		utc(6, 9, 0): 1, utc(7, 9, 0): 1, utc(8, 9, 0): 1, utc(9, 9, 0): 1, // London 09:00 GMT
	}
	got := firingMinutes(f)
	for at, n := range want {
		if got[at] != n {
			t.Errorf("%s: %d firings, want %d", at.Format(time.RFC3339), got[at], n)
		}
	}
	if len(got) != len(want) || f.Firings != 15 {
		t.Errorf("firings at %v (%d in all), want exactly %v (15)", got, f.Firings, want)
	}
}

// TestForecastFallBack: on 2026-11-01 New York repeats 01:00-02:00; a
// 01:30 job fires once by default and twice with RepeatBoth, and an
// every-30-minutes job fires 50 times in the 25-hour local day.
func TestForecastFallBack(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, ny)
	f := build(t, Options{From: from, Window: 25 * time.Hour},
		cronJob("a", "t", "30 1 * * *", "America/New_York", 0),
		cronJob("b", "t", "30 1 * * *", "America/New_York", 0, func(s *sundialv1.Schedule) {
			s.DstRepeat = sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_BOTH
		}),
	)
	if f.Firings != 3 {
		t.Fatalf("%d firings of 01:30 on the fall-back day, want 3 (first only + both)", f.Firings)
	}
	got := firingMinutes(f)
	if got[time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)] != 2 || got[time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC)] != 1 {
		t.Fatalf("firings %v, want 2 at 05:30Z and 1 at 06:30Z", got)
	}
	g := build(t, Options{From: from, Window: 25 * time.Hour}, cronJob("c", "t", "*/30 * * * *", "America/New_York", 0))
	if g.Firings != 50 {
		t.Fatalf("*/30 over the 25-hour day: %d firings, want 50", g.Firings)
	}
}

// TestForecastHerd: many jobs due at one instant make a herd, with the
// jobs without jitter counted and the schedules listed with suggestions.
func TestForecastHerd(t *testing.T) {
	from := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	var jobs []*sundialv1.Job
	for i := range 150 {
		jobs = append(jobs, cronJob(fmt.Sprint("n", i), "acme", "0 0 * * *", "UTC", 0))
	}
	for i := range 50 {
		jobs = append(jobs, cronJob(fmt.Sprint("j", i), "acme", "0 0 * * *", "UTC", 30*time.Second))
	}
	for i := range 30 {
		jobs = append(jobs, cronJob(fmt.Sprint("h", i), "globex", "@daily", "UTC", 0))
	}
	for i := range 99 { // one below the threshold: not a herd
		jobs = append(jobs, cronJob(fmt.Sprint("q", i), "acme", "15 3 * * *", "UTC", 0))
	}
	f := build(t, Options{From: from, Window: 24 * time.Hour, HerdThreshold: 100, JobsPerHerd: 5}, jobs...)
	if len(f.Herds) != 1 {
		t.Fatalf("%d herds, want 1: %+v", len(f.Herds), f.Herds)
	}
	h := f.Herds[0]
	if !h.At.Equal(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)) || h.Firings != 230 || h.NoJitter != 180 {
		t.Fatalf("herd at %s: %d firings, %d without jitter; want midnight, 230, 180", h.At, h.Firings, h.NoJitter)
	}
	if len(h.Schedules) != 2 {
		t.Fatalf("herd lists %d schedules, want 2 (the 0 0 * * * jobs, with and without jitter, share one)", len(h.Schedules))
	}
	top := h.Schedules[0]
	if top.Expr != "0 0 * * *" || top.Jobs != 200 || top.NoJitter != 150 || len(top.Sample) != 5 || top.MoreJobs != 195 {
		t.Fatalf("top schedule %+v", top)
	}
	if top.SuggestH != "H 0 * * *" || top.SuggestJitter != time.Minute {
		t.Fatalf("suggestions %q, %s; want H 0 * * * and 1m", top.SuggestH, top.SuggestJitter)
	}
	for _, j := range top.Sample {
		s, err := schedule.Parse(j.Slot, schedule.Options{})
		if err != nil || !strings.HasSuffix(j.Slot, " 0 * * *") {
			t.Fatalf("job %s slot %q (%v): want a minute of hour 0", j.ID, j.Slot, err)
		}
		h2, _ := schedule.Parse("H 0 * * *", schedule.Options{HashSeed: j.ID})
		if s.String() != h2.String() {
			t.Fatalf("job %s: slot %q is not where H puts it (%q)", j.ID, j.Slot, h2)
		}
	}
	if second := h.Schedules[1]; second.Expr != "@daily" || second.SuggestH != "H H * * *" || second.Jobs != 30 {
		t.Fatalf("second schedule %+v", second)
	}
	// The 99 jobs at 03:15 are the second-busiest minute but no herd.
	if len(f.Peaks) < 2 || f.Peaks[1].Firings != 99 || !f.Peaks[1].At.Equal(time.Date(2026, 11, 29, 3, 15, 0, 0, time.UTC)) {
		t.Fatalf("peaks %+v", f.Peaks)
	}
}

// TestForecastJitterSpreads: the due count at an instant is every job, but
// jitter spreads what fires per second over the jitter window.
func TestForecastJitterSpreads(t *testing.T) {
	from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var jobs []*sundialv1.Job
	for i := range 600 {
		jobs = append(jobs, cronJob(fmt.Sprint(i), "t", "0 12 * * *", "UTC", time.Minute))
	}
	for i := range 120 {
		jobs = append(jobs, cronJob(fmt.Sprint("s", i), "t", "0 12 * * *", "UTC", 0))
	}
	f := build(t, Options{From: from, Window: 24 * time.Hour}, jobs...)
	p := f.Peaks[0]
	if !p.At.Equal(from.Add(12*time.Hour)) || p.Due[0] != 720 {
		t.Fatalf("peak %s due %d at :00, want 12:00 and 720", p.At, p.Due[0])
	}
	if math.Abs(p.Expected[0]-130) > 0.2 || math.Abs(p.Expected[1]-10) > 0.2 || math.Abs(p.Expected[59]-10) > 0.2 {
		t.Fatalf("expected per second %v: want 120+10 at :00, then 10 a second", p.Expected)
	}
	sum := 0.0
	for _, v := range p.Expected {
		sum += v
	}
	if math.Abs(sum-720) > 1 {
		t.Fatalf("jitter lost firings: %v in the minute, want 720", sum)
	}
	h := f.Herds[0]
	if h.NoJitter != 120 || h.ExpectedPeak != 130 {
		t.Fatalf("herd %+v: want 120 without jitter, peak 130 a second", h)
	}
}

// TestForecastBreakdown: tenants and priorities each get their series.
func TestForecastBreakdown(t *testing.T) {
	from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	a := cronJob("1", "acme", "*/10 * * * *", "UTC", 0)
	a.Priority = sundialv1.Priority_PRIORITY_CRITICAL
	b := cronJob("2", "globex", "0 * * * *", "UTC", 0)
	c := cronJob("3", "globex", "0 * * * *", "UTC", 0)
	c.Priority = sundialv1.Priority_PRIORITY_UNSPECIFIED // MEDIUM
	f := build(t, Options{From: from, Window: time.Hour}, a, b, c)
	if f.Firings != 6+2 || f.Jobs != 3 || f.Schedules != 2 {
		t.Fatalf("firings %d jobs %d schedules %d; want 8, 3, 2", f.Firings, f.Jobs, f.Schedules)
	}
	if len(f.ByTenant) != 2 || f.ByTenant[0].Name != "acme" || f.ByTenant[0].Total != 6 || f.ByTenant[1].Total != 2 || f.ByTenant[1].Peak != 2 {
		t.Fatalf("tenants %+v", f.ByTenant)
	}
	if len(f.ByPriority) != 2 || f.ByPriority[0].Name != "PRIORITY_CRITICAL" || f.ByPriority[1].Name != "PRIORITY_MEDIUM" || f.ByPriority[1].Total != 2 {
		t.Fatalf("priorities %+v", f.ByPriority)
	}
}

// TestForecastOncePerSchedule: jobs sharing a schedule cost one
// evaluation; a cap drops the rarest schedules and says so.
func TestForecastOncePerSchedule(t *testing.T) {
	from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	b, err := New(Options{From: from, Window: time.Hour, MaxSchedules: 2})
	if err != nil {
		t.Fatal(err)
	}
	builds := map[string]int{}
	add := func(key, expr string, n int) {
		for i := range n {
			b.Add(Job{ID: fmt.Sprint(key, i), Tenant: "t", Key: key, Expr: expr, Build: func() (schedule.Schedule, error) {
				builds[key]++
				return schedule.Parse(expr, schedule.Options{})
			}})
		}
	}
	add("every-minute", "* * * * *", 1000)
	add("hourly", "0 * * * *", 10)
	add("rare", "30 * * * *", 1)
	f := b.Forecast()
	if builds["every-minute"] != 1 || builds["hourly"] != 1 || builds["rare"] != 0 {
		t.Fatalf("schedules built %v; want each shared one once, the rarest not at all", builds)
	}
	if f.Firings != 60*1000+10 || f.SkippedJobs != 1 || f.SkippedScheds != 1 || !strings.Contains(f.Partial, "max_schedules") {
		t.Fatalf("firings %d skipped %d/%d partial %q", f.Firings, f.SkippedJobs, f.SkippedScheds, f.Partial)
	}
	// The firing budget stops a dense schedule and says so.
	c, _ := New(Options{From: from, Window: time.Hour, MaxFirings: 100})
	c.Add(Job{ID: "x", Key: "k", Build: func() (schedule.Schedule, error) { return schedule.Parse("* * * * * *", schedule.Options{}) }})
	c.Add(Job{ID: "y", Key: "k2", Build: func() (schedule.Schedule, error) { return schedule.Parse("* * * * *", schedule.Options{}) }})
	g := c.Forecast()
	if g.Firings != 100 || !strings.Contains(g.Partial, "max_firings") || g.SkippedJobs != 1 {
		t.Fatalf("firings %d partial %q skipped %d", g.Firings, g.Partial, g.SkippedJobs)
	}
}

func TestFromJobKeys(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := func(j *sundialv1.Job, at time.Time) string { return FromJob(j, at, nil).Key }
	if k(cronJob("1", "t", "0 0 * * *", "UTC", 0), created) != k(cronJob("2", "u", "0 0 * * *", "UTC", time.Second), created.Add(time.Hour)) {
		t.Error("equal cron schedules have different keys")
	}
	if k(cronJob("1", "t", "0 0 * * *", "UTC", 0), created) == k(cronJob("1", "t", "0 0 * * *", "Europe/Paris", 0), created) {
		t.Error("zones do not enter the key")
	}
	every := func(id string) *sundialv1.Job {
		return &sundialv1.Job{Id: id, Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Second)}}}
	}
	if k(every("1"), created) == k(every("2"), created.Add(time.Second)) {
		t.Error("intervals anchored at different creations share a key")
	}
	started := every("3")
	started.Schedule.StartTime = timestamppb.New(created)
	if k(started, created) != k(started, created.Add(time.Hour)) {
		t.Error("an interval with a start_time depends on its creation")
	}
	// H resolves per job: two jobs share a key exactly when their H lands
	// on the same minute.
	minute := func(id string) uint64 { return schedule.HashSlot(id, "minute") % 60 }
	var same, apart string
	for i := 2; same == "" || apart == ""; i++ {
		id := fmt.Sprint(i)
		if minute(id) == minute("1") {
			same = id
		} else {
			apart = id
		}
	}
	if k(cronJob("1", "t", "H 0 * * *", "UTC", 0), created) != k(cronJob(same, "t", "H 0 * * *", "UTC", 0), created) {
		t.Error("H schedules resolving to the same minute have different keys")
	}
	if k(cronJob("1", "t", "H 0 * * *", "UTC", 0), created) == k(cronJob(apart, "t", "H 0 * * *", "UTC", 0), created) {
		t.Error("H schedules resolving to different minutes share a key")
	}
}

// TestForecastHashedFleet: a fleet that follows the forecast's own advice
// (every job "H * * * *") is counted whole within a cap far below its
// size, through FromJob and through the Decoder alike: each job's H
// resolves, and the jobs landing on the same minute share one schedule,
// so 3,000 jobs are at most 60 schedules; every minute's count is what
// each job's own schedule gives.
func TestForecastHashedFleet(t *testing.T) {
	from := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	want := map[time.Time]int64{}
	var jobs []*sundialv1.Job
	for i := range 3000 {
		j := cronJob(fmt.Sprintf("0193a1b2-%04d-7000-8000-000000000001", i), "t", "H * * * *", "UTC", 0)
		jobs = append(jobs, j)
		s, err := schedule.Parse("H * * * *", schedule.Options{HashSeed: j.Id})
		if err != nil {
			t.Fatal(err)
		}
		for at := s.Next(from.Add(-time.Nanosecond)); at.Before(from.Add(time.Hour)); at = s.Next(at) {
			want[at.Truncate(time.Minute)]++
		}
	}
	decode := func() *Forecast {
		b, err := New(Options{From: from, Window: time.Hour, MaxSchedules: 60})
		if err != nil {
			t.Fatal(err)
		}
		d := NewDecoder(nil)
		for _, j := range jobs {
			raw, err := proto.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			fj, err := d.Job(raw, j.Id, j.Tenant, j.Name, j.Priority, created)
			if err != nil {
				t.Fatal(err)
			}
			b.Add(fj)
		}
		return b.Forecast()
	}
	for name, f := range map[string]*Forecast{"FromJob": build(t, Options{From: from, Window: time.Hour, MaxSchedules: 60}, jobs...), "Decoder": decode()} {
		if f.Partial != "" || f.Failed != 0 || f.Firings != 3000 || f.Schedules > 60 || f.Schedules < 50 {
			t.Errorf("%s: partial %q, failed %d, firings %d, schedules %d; want all 3,000 firings from at most 60 schedules", name, f.Partial, f.Failed, f.Firings, f.Schedules)
		}
		got := firingMinutes(f)
		if len(got) != len(want) {
			t.Errorf("%s: %d minutes with firings, want %d", name, len(got), len(want))
		}
		for m, n := range want {
			if got[m] != n {
				t.Errorf("%s: %s: %d firings, want %d", name, m.Format("15:04"), got[m], n)
			}
		}
	}
}

func TestSuggestH(t *testing.T) {
	for in, want := range map[string]string{
		"0 0 * * *":        "H 0 * * *",
		"30 2 * * 1-5":     "H 2 * * 1-5",
		"*/5 * * * *":      "H/5 * * * *",
		"0 0 0 * * *":      "0 H 0 * * *",
		"0 * * * * *":      "H * * * * *",
		"*/10 * * * * *":   "H/10 * * * * *",
		"@daily":           "H H * * *",
		"@HOURLY":          "H * * * *",
		"* * * * *":        "",
		"0-30/10 1 * * *":  "",
		"@every 1m":        "",
		"":                 "",
		"H 0 * * *":        "",
		"1,31 0 * * *":     "",
		"0 0 1 * * * 2026": "",
	} {
		if got := SuggestH(in); got != want {
			t.Errorf("SuggestH(%q) = %q, want %q", in, got, want)
			continue
		}
		if want != "" {
			if _, err := schedule.Parse(want, schedule.Options{HashSeed: "x"}); err != nil {
				t.Errorf("SuggestH(%q) = %q does not parse: %v", in, want, err)
			}
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	_, err := New(Options{Window: 8 * 24 * time.Hour, MaxHerds: -1})
	for _, field := range []string{"from:", "window:", "max_herds:"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
	if _, err := New(Options{From: time.Now(), Window: 90 * time.Second}); err == nil {
		t.Error("a window of 90s (not whole minutes) was accepted")
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Errorf("want three problems, got %v", err)
	}
}
