package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Several schedules, exclusions and max_runs are refused field by field,
// before the store is reached.
func TestCreateJobRefusesBadUnionsAndExclusions(t *testing.T) {
	s := newService(t, untouchable{t: t})
	cron := func(expr string) *sundialv1.Schedule {
		return &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}}
	}
	for _, tc := range []struct {
		edit         func(j *sundialv1.Job)
		field, words string
	}{
		{func(j *sundialv1.Job) { j.Schedule.AdditionalSchedules = []*sundialv1.Schedule{cron("0 0 30 2 *")} },
			"schedule.additional_schedules[0].cron", "never fires"},
		{func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "02:00", End: "04:00"}, {Start: "2:00", End: "04:00"}}
		}, "schedule.exclusions[1].start", "is not a time of day"},
		{func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "00:00", End: "24:00"}}
		}, "schedule.exclusions", "cover every moment"},
		{func(j *sundialv1.Job) { j.MaxRuns = -3 }, "max_runs", "must be between 0"},
	} {
		j := validJob()
		tc.edit(j)
		_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
		got, ok := violations(t, err)[tc.field]
		if !ok || !strings.Contains(got, tc.words) {
			t.Errorf("violations %v, want %s: ...%s...", violations(t, err), tc.field, tc.words)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.field+": ") {
			t.Errorf("message %q does not name %s", msg, tc.field)
		}
	}
}

// A union whose every instant is excluded never fires: the create is
// refused as an impossible cron would be, and nothing is stored.
func TestCreateJobRefusesAUnionThatNeverFires(t *testing.T) {
	s := newService(t, fixedNowStore{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)})
	j := validJob()
	j.Schedule = &sundialv1.Schedule{
		Spec:                &sundialv1.Schedule_Cron{Cron: "0 3 * * *"},
		AdditionalSchedules: []*sundialv1.Schedule{{Spec: &sundialv1.Schedule_Cron{Cron: "30 2 * * *"}}},
		Exclusions:          []*sundialv1.Exclusion{{Start: "02:00", End: "04:00"}},
	}
	_, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
	if got := violations(t, err)["schedule"]; !strings.Contains(got, "has no instant after now") {
		t.Fatalf("got %v", err)
	}
	j.MaxRuns = 4
	j.Schedule.Exclusions[0].Start = "02:45"
	resp, err := s.CreateJob(tenantCtx, &sundialv1.CreateJobRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetJob().GetNextFireTime().AsTime(); !got.Equal(time.Date(2026, 11, 27, 2, 30, 0, 0, time.UTC)) {
		t.Fatalf("next_fire_time %v", got)
	}
	if resp.GetJob().GetRemainingRuns() != 4 {
		t.Fatalf("remaining_runs %d", resp.GetJob().GetRemainingRuns())
	}
}

// Preview of a union with an exclusion: each instant once, the excluded
// ones listed with their reason, and a run-count limit that ends the list
// says so.
func TestPreviewScheduleUnionExclusionsAndLimit(t *testing.T) {
	s := newService(t, untouchable{t: t})
	req := &sundialv1.PreviewScheduleRequest{
		Schedule: &sundialv1.Schedule{
			Spec:                &sundialv1.Schedule_Cron{Cron: "0 * * * *"},
			Timezone:            "America/New_York",
			AdditionalSchedules: []*sundialv1.Schedule{{Spec: &sundialv1.Schedule_Cron{Cron: "30 2,5 * * *"}}},
			Exclusions:          []*sundialv1.Exclusion{{Start: "02:00", End: "04:00", Note: "backups"}},
		},
		From:  timestamppb.New(time.Date(2026, 11, 26, 5, 30, 0, 0, time.UTC)), // 00:30 EST
		Count: 5,
	}
	resp, err := s.PreviewSchedule(tenantCtx, req)
	if err != nil {
		t.Fatal(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	var got []string
	for _, ts := range resp.GetTimes() {
		got = append(got, ts.AsTime().In(ny).Format("15:04"))
	}
	if strings.Join(got, " ") != "01:00 04:00 05:00 05:30 06:00" {
		t.Fatalf("times %v", got)
	}
	var notes []string
	for _, a := range resp.GetAdjustments() {
		notes = append(notes, a.GetTime().AsTime().In(ny).Format("15:04")+" "+a.GetReason())
		if a.GetMovedTo() != nil {
			t.Fatalf("an exclusion moves nothing: %v", a)
		}
	}
	want := []string{
		"02:00 excluded by exclusions[0] (02:00-04:00): backups; skipped",
		"02:30 excluded by exclusions[0] (02:00-04:00): backups; skipped",
		"03:00 excluded by exclusions[0] (02:00-04:00): backups; skipped",
	}
	if strings.Join(notes, "|") != strings.Join(want, "|") {
		t.Fatalf("adjustments %q", notes)
	}
	if resp.GetRunLimit() != "" || !strings.Contains(resp.GetDescription(), "; and ") || !strings.Contains(resp.GetDescription(), "except 02:00-04:00") {
		t.Fatalf("run_limit %q description %q", resp.GetRunLimit(), resp.GetDescription())
	}

	req.MaxRuns = 3
	resp, err = s.PreviewSchedule(tenantCtx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTimes()) != 3 || resp.GetRunLimit() != "max_runs 3 reached: the job completes after its 3rd run" {
		t.Fatalf("times %v run_limit %q", resp.GetTimes(), resp.GetRunLimit())
	}
	req.MaxRuns = -1
	_, err = s.PreviewSchedule(tenantCtx, req)
	if _, ok := violations(t, err)["max_runs"]; !ok {
		t.Fatalf("negative max_runs: %v", err)
	}
}
