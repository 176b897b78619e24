package forecast

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Counting jobs by (tenant, priority, schedule, jitter) with AddN gives
// the forecast of adding them one by one: the same jobs, schedules,
// minutes, series, peaks and herds. H schedules stay one per job (the
// count carries the job's id), intervals one per creation second.
func TestCountAgreesWithJobs(t *testing.T) {
	from := time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC) // New York springs forward
	specs := []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}, Timezone: "America/New_York", DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H H * * *"}},
		{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(7 * time.Minute)}},
	}
	type countKey struct {
		tenant        string
		prio          sundialv1.Priority
		sched, jitter string
		anchor        time.Time
		jobID         string
	}
	perJob, err := New(Options{From: from, Window: 24 * time.Hour, HerdThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[countKey]*Count{}
	var order []countKey
	d := NewDecoder(nil)
	for i := range 400 {
		s := specs[i%len(specs)]
		job := &sundialv1.Job{Id: fmt.Sprintf("0193a1b2-0000-7000-8000-%012d", i), Tenant: fmt.Sprint("t", i%3),
			Name: fmt.Sprint("job-", i), Priority: sundialv1.Priority(1 + i%2), Schedule: s}
		if i%5 == 0 {
			job.MaxJitter = durationpb.New(20 * time.Second)
		}
		created := from.Add(-time.Duration(i%2) * time.Second)
		raw, err := proto.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		j, err := d.Job(raw, job.Id, job.Tenant, job.Name, job.Priority, created)
		if err != nil {
			t.Fatal(err)
		}
		perJob.Add(j)
		sched, _ := proto.Marshal(s)
		var jit []byte
		if job.MaxJitter != nil {
			jit, _ = proto.Marshal(job.MaxJitter)
		}
		k := countKey{tenant: job.Tenant, prio: job.Priority, sched: string(sched), jitter: string(jit)}
		if _, ok := s.GetSpec().(*sundialv1.Schedule_Interval); ok {
			k.anchor = created.Truncate(time.Second)
		}
		if i%len(specs) == 2 {
			k.jobID = job.Id
		}
		c := counts[k]
		if c == nil {
			c = &Count{Tenant: k.tenant, Priority: k.prio, Schedule: sched, Jitter: jit, Anchor: k.anchor, JobID: k.jobID}
			counts[k] = c
			order = append(order, k)
		}
		c.Jobs++
		c.Sample = append(c.Sample, job.Id)
	}
	byCount, err := New(Options{From: from, Window: 24 * time.Hour, HerdThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	d = NewDecoder(nil)
	for _, k := range order {
		j, sample, err := d.Count(*counts[k])
		if err != nil {
			t.Fatal(err)
		}
		byCount.AddN(j, counts[k].Jobs, sample)
	}
	want, got := perJob.Forecast(), byCount.Forecast()
	if got.Jobs != want.Jobs || got.Schedules != want.Schedules || got.Firings != want.Firings || got.Failed != 0 {
		t.Fatalf("counted: %d jobs %d schedules %d firings %d failed; per job: %d, %d, %d",
			got.Jobs, got.Schedules, got.Firings, got.Failed, want.Jobs, want.Schedules, want.Firings)
	}
	if got.Schedules <= len(specs) {
		t.Fatalf("%d schedules: H jobs must each be one", got.Schedules)
	}
	if !slices.Equal(got.Minutes, want.Minutes) {
		t.Fatal("minutes differ")
	}
	for i := range want.ByTenant {
		if got.ByTenant[i].Name != want.ByTenant[i].Name || got.ByTenant[i].Total != want.ByTenant[i].Total {
			t.Fatalf("tenant series %d: %+v, per job %+v", i, got.ByTenant[i].Total, want.ByTenant[i].Total)
		}
	}
	if len(got.Herds) == 0 || len(got.Herds) != len(want.Herds) {
		t.Fatalf("%d herds, per job %d", len(got.Herds), len(want.Herds))
	}
	for i := range want.Herds {
		g, w := got.Herds[i], want.Herds[i]
		if !g.At.Equal(w.At) || g.Firings != w.Firings || g.NoJitter != w.NoJitter || g.ExpectedPeak != w.ExpectedPeak || len(g.Schedules) != len(w.Schedules) {
			t.Fatalf("herd %d: %+v, per job %+v", i, g, w)
		}
		for k := range w.Schedules {
			if g.Schedules[k].Jobs != w.Schedules[k].Jobs || len(g.Schedules[k].Sample) != len(w.Schedules[k].Sample) {
				t.Fatalf("herd %d schedule %d: %d jobs %d listed, per job %d, %d", i, k,
					g.Schedules[k].Jobs, len(g.Schedules[k].Sample), w.Schedules[k].Jobs, len(w.Schedules[k].Sample))
			}
		}
	}
}

// A fleet of H jobs counted a row per place their H lands, the row named
// by any one of its jobs (what the api's fold keeps), forecasts as the
// jobs one by one do, in far fewer rows than jobs.
func TestHashedKeyGroupsAnHFleet(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // Chicago falls back
	specs := []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "H H * * *"}, Timezone: "America/Chicago"},
		{Spec: &sundialv1.Schedule_Cron{Cron: "H/15 * * * *"}},
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}, AdditionalSchedules: []*sundialv1.Schedule{{Spec: &sundialv1.Schedule_Cron{Cron: "H 12 * * *"}}}},
	}
	perJob, err := New(Options{From: from, Window: 48 * time.Hour, HerdThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	type rowKey struct{ sched, hashed string }
	rows := map[rowKey]*Count{}
	var order []rowKey
	d := NewDecoder(nil)
	const jobs = 6000
	for i := range jobs {
		s := specs[i%len(specs)]
		job := &sundialv1.Job{Id: fmt.Sprintf("0193a1b2-0000-7000-8000-%012d", i), Tenant: "t", Priority: sundialv1.Priority_PRIORITY_MEDIUM, Schedule: s}
		raw, err := proto.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		j, err := d.Job(raw, job.Id, job.Tenant, "", job.Priority, from)
		if err != nil {
			t.Fatal(err)
		}
		perJob.Add(j)
		sched, _ := proto.Marshal(s)
		h, err := d.HashedKey(sched, job.Id)
		if err != nil || h == "" {
			t.Fatalf("job %d: hashed key %q, %v", i, h, err)
		}
		k := rowKey{string(sched), h}
		c := rows[k]
		if c == nil {
			c = &Count{Tenant: "t", Priority: job.Priority, Schedule: sched, JobID: job.Id}
			rows[k] = c
			order = append(order, k)
		}
		c.Jobs++
		c.Sample = append(c.Sample, job.Id)
	}
	if max := 1440 + 15 + 60; len(rows) > max {
		t.Fatalf("%d rows for %d jobs: more than the %d places their H can land", len(rows), jobs, max)
	}
	byRow, err := New(Options{From: from, Window: 48 * time.Hour, HerdThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	d = NewDecoder(nil)
	for _, k := range order {
		j, sample, err := d.Count(*rows[k])
		if err != nil {
			t.Fatal(err)
		}
		byRow.AddN(j, rows[k].Jobs, sample)
	}
	want, got := perJob.Forecast(), byRow.Forecast()
	if got.Jobs != want.Jobs || got.Schedules != want.Schedules || got.Firings != want.Firings || got.Failed != 0 {
		t.Fatalf("by row: %d jobs %d schedules %d firings %d failed; per job: %d, %d, %d",
			got.Jobs, got.Schedules, got.Firings, got.Failed, want.Jobs, want.Schedules, want.Firings)
	}
	if !slices.Equal(got.Minutes, want.Minutes) {
		t.Fatal("minutes differ")
	}
	if len(got.Herds) != len(want.Herds) {
		t.Fatalf("%d herds, per job %d", len(got.Herds), len(want.Herds))
	}
	for i := range want.Herds {
		if g, w := got.Herds[i], want.Herds[i]; !g.At.Equal(w.At) || g.Firings != w.Firings {
			t.Fatalf("herd %d: %v %d firings, per job %v %d", i, g.At, g.Firings, w.At, w.Firings)
		}
	}
	plain, _ := proto.Marshal(&sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}})
	if h, err := d.HashedKey(plain, "x"); h != "" || err != nil {
		t.Fatalf("a schedule without H: key %q, %v", h, err)
	}
	if _, err := d.HashedKey([]byte{0xff}, "x"); err == nil {
		t.Fatal("a schedule that is not an encoding was keyed")
	}
}
