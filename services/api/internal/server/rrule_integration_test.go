//go:build integration

package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// An RRULE job goes through the real api and Postgres: stored with its
// rule, its first slot computed, previewable, and a bad rule or a bad edit
// writes nothing.
func TestIntegrationRRuleJob(t *testing.T) {
	h := newHarness(t, nil)
	bad := everyMinute("bad rrule")
	bad.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=MONTHLY;BYSETPOS=-1"}}
	_, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: bad}, as(tokenAcme))
	if got := violations(t, err)["schedule.rrule"]; got != "BYSETPOS needs another BY rule" {
		t.Fatalf("bad rule: %v", err)
	}
	// Fires from the epoch (what Validate checks without start_time) but
	// never from the creation time: refused inside the transaction.
	bad.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=DAILY;UNTIL=20200101T000000Z"}}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: bad}, as(tokenAcme))
	if got := violations(t, err)["schedule.rrule"]; !strings.Contains(got, "never fires") {
		t.Fatalf("never-firing rule: %v", err)
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("%d jobs written for bad rules", n)
	}

	job := everyMinute("last weekday")
	job.Schedule = &sundialv1.Schedule{
		Spec:     &sundialv1.Schedule_Rrule{Rrule: "RRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17;BYMINUTE=30;BYSECOND=0"},
		Timezone: "America/Chicago",
	}
	created := h.create(tokenAcme, job)
	got, err := h.client.GetJob(h.ctx, &sundialv1.GetJobRequest{Id: created.GetId()}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if got.GetJob().GetSchedule().GetRrule() != job.GetSchedule().GetRrule() {
		t.Fatalf("stored rule %q", got.GetJob().GetSchedule().GetRrule())
	}
	next := got.GetJob().GetNextFireTime().AsTime().In(mustLoad(t, "America/Chicago"))
	weekday := func(d time.Time) bool { return d.Weekday() != time.Saturday && d.Weekday() != time.Sunday }
	ok := next.Hour() == 17 && next.Minute() == 30 && weekday(next)
	for d := next.AddDate(0, 0, 1); d.Month() == next.Month(); d = d.AddDate(0, 0, 1) {
		ok = ok && !weekday(d)
	}
	if !ok {
		t.Fatalf("next_fire_time %v is not the last weekday of a month at 17:30", next)
	}

	// The preview of the stored schedule agrees with next_fire_time.
	pv, err := h.client.PreviewSchedule(h.ctx, &sundialv1.PreviewScheduleRequest{Schedule: got.GetJob().GetSchedule(),
		From: timestamppb.New(time.Now()), Count: 3}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.GetTimes()) != 3 || !pv.GetTimes()[0].AsTime().Equal(next) {
		t.Fatalf("preview %v, next_fire_time %v", pv.GetTimes(), next)
	}

	// An edit to a bad rule is refused and changes nothing.
	edit := &sundialv1.Job{Id: created.GetId(), Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Rrule{Rrule: "FREQ=WEEKLY;BYDAY=-1FR"}}}
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{Job: edit, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule.rrule"}}}, as(tokenAcme))
	if got := violations(t, err)["schedule.rrule"]; !strings.Contains(got, "only allowed with FREQ=MONTHLY or YEARLY") {
		t.Fatalf("bad edit: %v", err)
	}
	if n := h.count(`SELECT version FROM jobs WHERE id = $1`, created.GetId()); n != 1 {
		t.Fatalf("version %d after a refused edit", n)
	}
}

func mustLoad(t *testing.T, zone string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
