package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// fakeCalendars is the CalendarService side of the fake api: it records
// requests and answers with the calendar it was sent.
type fakeCalendars struct {
	sundialv1.UnimplementedCalendarServiceServer
	mu      sync.Mutex
	created *sundialv1.CreateCalendarRequest
	updated *sundialv1.UpdateCalendarRequest
	import_ *sundialv1.ImportCalendarRequest
	deleted string
}

func (f *fakeCalendars) CreateCalendar(_ context.Context, req *sundialv1.CreateCalendarRequest) (*sundialv1.CreateCalendarResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = req
	c := proto.Clone(req.GetCalendar()).(*sundialv1.Calendar)
	c.Version = 1
	return &sundialv1.CreateCalendarResponse{Calendar: c}, nil
}

func (f *fakeCalendars) UpdateCalendar(_ context.Context, req *sundialv1.UpdateCalendarRequest) (*sundialv1.UpdateCalendarResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = req
	return &sundialv1.UpdateCalendarResponse{Calendar: req.GetCalendar()}, nil
}

func (f *fakeCalendars) GetCalendar(_ context.Context, req *sundialv1.GetCalendarRequest) (*sundialv1.GetCalendarResponse, error) {
	if req.GetName() == "missing" {
		return nil, status.Error(codes.NotFound, "calendar not found")
	}
	return &sundialv1.GetCalendarResponse{Calendar: &sundialv1.Calendar{Name: req.GetName(), Version: 3,
		Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-12-25", Name: "Christmas Day"}}}}, nil
}

func (f *fakeCalendars) ListCalendars(_ context.Context, req *sundialv1.ListCalendarsRequest) (*sundialv1.ListCalendarsResponse, error) {
	if req.GetPageToken() == "" {
		return &sundialv1.ListCalendarsResponse{Calendars: []*sundialv1.Calendar{{Name: "de", Weekend: &sundialv1.Weekend{}}}, NextPageToken: "p2"}, nil
	}
	return &sundialv1.ListCalendarsResponse{Calendars: []*sundialv1.Calendar{{Name: "us", Holidays: []*sundialv1.CalendarHoliday{{Date: "2027-01-01"}, {Date: "2026-12-25"}}}}}, nil
}

func (f *fakeCalendars) DeleteCalendar(_ context.Context, req *sundialv1.DeleteCalendarRequest) (*sundialv1.DeleteCalendarResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = req.GetName()
	return &sundialv1.DeleteCalendarResponse{}, nil
}

func (f *fakeCalendars) ImportCalendar(_ context.Context, req *sundialv1.ImportCalendarRequest) (*sundialv1.ImportCalendarResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.import_ = req
	return &sundialv1.ImportCalendarResponse{Calendar: &sundialv1.Calendar{Name: req.GetName()}, Skipped: []string{`event "Party" (line 3): timed`}}, nil
}

func TestCalendarCreateSendsHolidaysAndWeekend(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "calendar create", "us-bank", "--holiday", "2026-12-25=Christmas Day", "--holiday", "2027-01-01",
		"--weekend", "fri,SAT", "--description", "bank days")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c := f.cals.created.GetCalendar()
	if c.GetName() != "us-bank" || len(c.GetHolidays()) != 2 || c.GetHolidays()[0].GetName() != "Christmas Day" ||
		c.GetHolidays()[1].GetDate() != "2027-01-01" || c.GetDescription() != "bank days" {
		t.Fatalf("sent %v", c)
	}
	if d := c.GetWeekend().GetDays(); len(d) != 2 || d[0] != sundialv1.Weekday_WEEKDAY_FRIDAY || d[1] != sundialv1.Weekday_WEEKDAY_SATURDAY {
		t.Fatalf("weekend %v", d)
	}
	if !strings.Contains(out, "2026-12-25  Christmas Day") || !strings.Contains(out, "FRI,SAT") {
		t.Fatalf("output:\n%s", out)
	}
	// No --weekend: unset, the server's default; "none": an empty weekend.
	run(t, addr, nil, "calendar create", "a")
	if f.cals.created.GetCalendar().GetWeekend() != nil {
		t.Fatal("weekend sent without --weekend")
	}
	run(t, addr, nil, "calendar update", "a", "--weekend", "none", "--expected-version", "4")
	if w := f.cals.updated.GetCalendar().GetWeekend(); w == nil || len(w.GetDays()) != 0 || f.cals.updated.GetExpectedVersion() != 4 {
		t.Fatalf("update sent %v", f.cals.updated)
	}
	if code, _, stderr := run(t, addr, nil, "calendar create", "a", "--weekend", "caturday"); code != 2 || !strings.Contains(stderr, "caturday") {
		t.Fatalf("bad weekend: exit %d: %s", code, stderr)
	}
}

func TestCalendarImportListShowDelete(t *testing.T) {
	f, addr := startFake(t)
	code, _, stderr := run(t, addr, nil, "calendar import", "de", "testdata/holidays.ics", "--replace")
	if code != 0 || !strings.Contains(stderr, `skipped event "Party"`) {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	if req := f.cals.import_; !req.GetReplace() || !strings.HasPrefix(req.GetIcs(), "BEGIN:VCALENDAR") {
		t.Fatalf("import sent %v", req)
	}
	code, out, _ := run(t, addr, nil, "calendar list")
	if code != 0 || !strings.Contains(out, "de ") || !strings.Contains(out, "none") ||
		!strings.Contains(out, "2026-12-25  2027-01-01") || !strings.Contains(out, "SAT,SUN (default)") {
		t.Fatalf("list: exit %d:\n%s", code, out)
	}
	if code, out, _ := run(t, addr, nil, "calendar show", "us", "-o", "json"); code != 0 || !strings.Contains(out, `"date": "2026-12-25"`) {
		t.Fatalf("show: exit %d:\n%s", code, out)
	}
	if code, _, stderr := run(t, addr, nil, "calendar show", "missing"); code != 1 || !strings.Contains(stderr, "NotFound") {
		t.Fatalf("show missing: exit %d: %s", code, stderr)
	}
	if code, _, _ := run(t, addr, nil, "calendar delete", "de"); code != 0 || f.cals.deleted != "de" {
		t.Fatalf("delete: exit %d, deleted %q", code, f.cals.deleted)
	}
}

func TestCreateWithCalendar(t *testing.T) {
	f, addr := startFake(t)
	code, out, stderr := run(t, addr, nil, "create", "--cron", "0 9 * * *", "--url", "http://x/", "--calendar", "us-bank", "--calendar-policy", "move_next")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s := f.create.GetJob().GetSchedule()
	if s.GetCalendar() != "us-bank" || s.GetCalendarPolicy() != sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT {
		t.Fatalf("sent %v", s)
	}
	if !strings.Contains(out, "[calendar us-bank, MOVE_NEXT]") {
		t.Fatalf("output:\n%s", out)
	}
	if code, _, stderr := run(t, addr, nil, "create", "--cron", "0 9 * * *", "--url", "http://x/", "--calendar", "c", "--calendar-policy", "sideways"); code != 2 || !strings.Contains(stderr, "--calendar-policy") {
		t.Fatalf("bad policy: exit %d: %s", code, stderr)
	}
	// A job file may say calendar_policy: MOVE_PREVIOUS.
	job, err := parseJobFile([]byte("schedule:\n  cron: '0 9 * * *'\n  calendar: us-bank\n  calendar_policy: move_previous\n"))
	if err != nil || job.GetSchedule().GetCalendarPolicy() != sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_PREVIOUS {
		t.Fatalf("job file: %v %v", job, err)
	}
}
