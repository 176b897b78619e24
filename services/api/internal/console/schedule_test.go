package console

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func postForm(v url.Values) (form, *sundialv1.Job) {
	r := httptest.NewRequest("POST", "/jobs/new", strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return readForm(r)
}

// scheduleValues are the form values formOf's schedule fields post.
func scheduleValues(f form) url.Values {
	return url.Values{"name": {f.Name}, "url": {"https://x.example/run"}, "schedule_kind": {f.SchedKind}, "cron": {f.Cron},
		"once": {f.Once}, "interval": {f.Interval}, "rrule": {f.RRule}, "timezone": {f.Timezone},
		"start_time": {f.Start}, "end_time": {f.End}, "dst_gap": {f.DstGap}, "dst_repeat": {f.DstRepeat},
		"calendar": {f.Calendar}, "calendar_policy": {f.CalPolicy}}
}

// Every schedule kind, with bounds, DST policies and a calendar, read
// into the form and posted back unchanged is the same schedule and
// changes nothing; wall-clock instants are shown and read in the job's
// zone.
func TestScheduleFormRoundTrip(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	at := func(s string) *timestamppb.Timestamp {
		tm, err := time.ParseInLocation("2006-01-02 15:04:05", s, paris)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(tm)
	}
	for _, s := range []*sundialv1.Schedule{
		{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * MON-FRI"}, Timezone: "Europe/Paris", DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP},
		{Spec: &sundialv1.Schedule_Once{Once: at("2027-03-01 09:00:00")}, Timezone: "Europe/Paris"},
		{Spec: &sundialv1.Schedule_Once{Once: at("2027-03-01 09:00:30")}, Timezone: "Europe/Paris"},
		{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Minute)}, Timezone: "Europe/Paris",
			StartTime: at("2026-12-01 00:00:00"), EndTime: at("2027-12-01 00:00:00")},
		{Spec: &sundialv1.Schedule_Rrule{Rrule: "RRULE:FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9;BYMINUTE=0\nEXDATE:20270112T090000"}, Timezone: "Europe/Paris",
			DstRepeat: sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_BOTH, Calendar: "fr-bank", CalendarPolicy: sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT},
	} {
		job := &sundialv1.Job{Name: "j", Schedule: s, Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/run"}}}}
		was := formOf(job)
		f, back := postForm(scheduleValues(was))
		if len(f.Errors) != 0 || !proto.Equal(back.GetSchedule(), s) {
			t.Errorf("%v: read back as %v (%v)", s, back.GetSchedule(), f.Errors)
		}
		if p := scheduleChanges(f, was); len(p) != 0 {
			t.Errorf("%v: unchanged form changes %v", s, p)
		}
	}
	if f := formOf(&sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: at("2027-03-01 09:00:00")}, Timezone: "Europe/Paris"}}); f.Once != "2027-03-01 09:00" {
		t.Errorf("once shown as %q, want the Paris wall clock", f.Once)
	}
}

// A change of kind sends the new kind's path alone (the api's oneof
// replaces the old one); the same instant or duration written otherwise
// is no change; a new zone moves a wall-clock once.
func TestScheduleChanges(t *testing.T) {
	was := formOf(&sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Interval{Interval: durationpb.New(90 * time.Minute)}, Timezone: "UTC"}})
	v := scheduleValues(was)
	v.Set("interval", "1h30m0s")
	v.Set("start_time", "")
	if f, _ := postForm(v); len(scheduleChanges(f, was)) != 0 {
		t.Errorf("90m written as 1h30m0s changes %v", scheduleChanges(f, was))
	}
	v.Set("schedule_kind", "cron")
	v.Set("cron", "0 * * * *")
	f, job := postForm(v)
	if p := scheduleChanges(f, was); !slices.Equal(p, []string{"schedule.cron"}) || job.GetSchedule().GetCron() != "0 * * * *" {
		t.Errorf("interval to cron: %v, %v", p, job.GetSchedule())
	}

	once := formOf(&sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Once{Once: timestamppb.New(time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC))}, Timezone: "UTC"}})
	v = scheduleValues(once)
	v.Set("once", "2027-03-01T09:00:00Z")
	v.Set("calendar", "ops")
	f, _ = postForm(v)
	if p := scheduleChanges(f, once); !slices.Equal(p, []string{"schedule.calendar"}) {
		t.Errorf("the same instant in RFC 3339, and a calendar: %v", p)
	}
	// An instant with its offset is the same instant in any zone.
	v.Set("timezone", "Asia/Tokyo")
	f, _ = postForm(v)
	if p := scheduleChanges(f, once); !slices.Equal(p, []string{"schedule.timezone", "schedule.calendar"}) {
		t.Errorf("RFC 3339 once, new zone: %v", p)
	}
	v.Set("once", "2027-03-01 09:00")
	f, job = postForm(v)
	if p := scheduleChanges(f, once); !slices.Equal(p, []string{"schedule.once", "schedule.timezone", "schedule.calendar"}) ||
		!job.GetSchedule().GetOnce().AsTime().Equal(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("09:00 in Tokyo: %v, %v", p, job.GetSchedule().GetOnce().AsTime())
	}
}

// What the console cannot read itself is an error beside its field, and
// the api is not asked; a form that posts no kind (from before the
// kinds) is a cron form.
func TestScheduleFormErrors(t *testing.T) {
	f, _ := postForm(url.Values{"schedule_kind": {"once"}, "once": {"next tuesday"}, "start_time": {"soon"}, "end_time": {"2027-13-01"},
		"dst_gap": {"jump"}, "dst_repeat": {"twice"}, "calendar_policy": {"ignore"}})
	for _, k := range []string{"Once", "Start", "End", "DstGap", "DstRepeat", "CalPolicy"} {
		if f.Errors[k] == "" {
			t.Errorf("no error beside %s: %v", k, f.Errors)
		}
	}
	for kind, field := range map[string]string{"once": "Once", "interval": "Interval", "hourly": "SchedKind"} {
		if f, _ := postForm(url.Values{"schedule_kind": {kind}}); f.Errors[field] == "" {
			t.Errorf("%s left empty: no error beside %s: %v", kind, field, f.Errors)
		}
	}
	if f, _ := postForm(url.Values{"schedule_kind": {"interval"}, "interval": {"90"}}); !strings.Contains(f.Errors["Interval"], "duration") {
		t.Errorf("interval 90: %v", f.Errors)
	}
	if f, job := postForm(url.Values{"cron": {"@hourly"}}); len(f.Errors) != 0 || f.SchedKind != "cron" || job.GetSchedule().GetCron() != "@hourly" {
		t.Errorf("no kind posted: %v %v", f.Errors, job.GetSchedule())
	}
}

// The api's schedule paths land beside their fields; the schedule as a
// whole beside the chosen kind's.
func TestScheduleFieldOf(t *testing.T) {
	f := form{}
	f.SchedKind = "rrule"
	for path, want := range map[string]string{
		"schedule.once": "Once", "schedule.interval": "Interval", "schedule.rrule": "RRule", "schedule.start_time": "Start",
		"schedule.end_time": "End", "schedule.dst_gap": "DstGap", "schedule.dst_repeat": "DstRepeat", "schedule.calendar": "Calendar",
		"schedule.calendar_policy": "CalPolicy", "schedule.timezone": "Timezone", "schedule": "RRule", "schedule.cron": "Cron",
	} {
		if got := f.fieldOf(path); got != want {
			t.Errorf("%s beside %q, want %q", path, got, want)
		}
	}
}

// An edit from a form that does not post the schedule's newer fields
// keeps them.
func TestKeepScheduleNotPosted(t *testing.T) {
	was := formOf(&sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@daily"}, Timezone: "UTC",
		Calendar: "ops", CalendarPolicy: sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT, DstGap: sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP}})
	v := url.Values{"cron": {"@hourly"}, "timezone": {"UTC"}}
	r := httptest.NewRequest("POST", "/jobs/x/edit", strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	f, _ := readForm(r)
	keepPoliciesNotPosted(r, &f, was)
	if p := scheduleChanges(f, was); !slices.Equal(p, []string{"schedule.cron"}) {
		t.Errorf("an older form's cron edit changes %v", p)
	}
}
