//go:build integration

package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// calHarness is the real JobService and CalendarService over a fresh
// schema behind a real gRPC server with the authentication interceptor.
type calHarness struct {
	*harness
	cals sundialv1.CalendarServiceClient
}

func newCalHarness(t *testing.T) *calHarness {
	t.Helper()
	pool := pgtest.Migrated(t)
	rdb, prefix := testinfra.Redis(t)
	versions := &recordingVersions{Store: lease.New(rdb, lease.WithPrefix(prefix)), published: map[string][]int64{}}
	metrics := NewMetrics(nil)
	calStore := calendarstore.NewStore(pool)
	jobs, err := NewJobService(Config{Store: store.New(pool), Versions: versions, Metrics: metrics, Calendars: calStore})
	if err != nil {
		t.Fatal(err)
	}
	cals, err := NewCalendarService(CalendarConfig{Store: calStore, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens(map[string]string{tokenAcme: "acme", tokenGlobex: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: jobs, Calendars: cals, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &calHarness{
		harness: &harness{t: t, pool: pool, rdb: rdb, versions: versions, conn: conn, client: sundialv1.NewJobServiceClient(conn), metrics: metrics, ctx: ctx},
		cals:    sundialv1.NewCalendarServiceClient(conn),
	}
}

func wantCode(t *testing.T, err error, c codes.Code) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("got %v, want %s", err, c)
	}
}

// dailyNoon is a job firing at 12:00 UTC every day, on a calendar.
func dailyNoon(cal string, p sundialv1.CalendarPolicy) *sundialv1.Job {
	j := everyMinute("noon on " + cal)
	j.Schedule = &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 12 * * *"}, Calendar: cal, CalendarPolicy: p}
	return j
}

func TestIntegrationCalendarLifecycle(t *testing.T) {
	h := newCalHarness(t)
	tomorrow := time.Now().UTC().AddDate(0, 0, 1)
	d := func(n int) string { return tomorrow.AddDate(0, 0, n).Format(time.DateOnly) }

	// Bad input names the field and writes nothing.
	_, err := h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{
		Name: "Ops", Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-13-01"}},
		Weekend: &sundialv1.Weekend{Days: []sundialv1.Weekday{sundialv1.Weekday(12)}},
	}}, as(tokenAcme))
	vs := violations(t, err)
	for _, f := range []string{"calendar.name", "calendar.holidays[0].date", "calendar.weekend.days[0]"} {
		if vs[f] == "" {
			t.Errorf("no violation on %s: %v", f, vs)
		}
	}
	if n := h.count(`SELECT count(*) FROM calendars`); n != 0 {
		t.Fatalf("%d calendars written for bad input", n)
	}

	created, err := h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{
		Name: "ops", Description: "ops holidays", Weekend: &sundialv1.Weekend{},
		Holidays: []*sundialv1.CalendarHoliday{{Date: d(0), Name: "Founders' Day"}},
	}}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if c := created.GetCalendar(); c.GetTenant() != "acme" || c.GetVersion() != 1 || len(c.GetHolidays()) != 1 {
		t.Fatalf("created %v", c)
	}
	_, err = h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops"}}, as(tokenAcme))
	wantCode(t, err, codes.AlreadyExists)

	// A job on it: its first slot is not the holiday's noon.
	job := h.create(tokenAcme, dailyNoon("ops", sundialv1.CalendarPolicy_CALENDAR_POLICY_SKIP))
	holidayNoon := time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 12, 0, 0, 0, time.UTC)
	if next := job.GetNextFireTime().AsTime(); next.Equal(holidayNoon) || next.After(holidayNoon.Add(24*time.Hour)) {
		t.Fatalf("next_fire_time %v: want the noon before or after the holiday %s", next, d(0))
	}

	// Preview says what the calendar removed and why.
	pv, err := h.client.PreviewSchedule(h.ctx, &sundialv1.PreviewScheduleRequest{Schedule: job.GetSchedule(),
		From: timestamppb.New(holidayNoon.Add(-time.Hour)), Count: 2}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.GetTimes()) != 2 || !pv.GetTimes()[0].AsTime().Equal(holidayNoon.Add(24*time.Hour)) {
		t.Fatalf("preview times %v", pv.GetTimes())
	}
	if a := pv.GetAdjustments(); len(a) != 1 || !a[0].GetTime().AsTime().Equal(holidayNoon) || a[0].GetMovedTo() != nil ||
		!strings.Contains(a[0].GetReason(), "Founders' Day") || !strings.Contains(a[0].GetReason(), "skipped") {
		t.Fatalf("adjustments %v", a)
	}
	if !strings.Contains(pv.GetDescription(), "calendar ops") {
		t.Fatalf("description %q", pv.GetDescription())
	}
	// MOVE_NEXT: the holiday's noon moves to the next day's, one firing.
	moveSched := dailyNoon("ops", sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT).GetSchedule()
	pv, err = h.client.PreviewSchedule(h.ctx, &sundialv1.PreviewScheduleRequest{Schedule: moveSched,
		From: timestamppb.New(holidayNoon.Add(-time.Hour)), Count: 2}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if a := pv.GetAdjustments(); len(a) != 1 || !a[0].GetMovedTo().AsTime().Equal(holidayNoon.Add(24*time.Hour)) {
		t.Fatalf("adjustments %v", a)
	}
	if len(pv.GetTimes()) != 2 || !pv.GetTimes()[1].AsTime().Equal(holidayNoon.Add(48*time.Hour)) {
		t.Fatalf("MOVE_NEXT times %v: the moved instant and the next day's are one firing", pv.GetTimes())
	}

	// Update replaces the holidays and bumps the version; a stale expected
	// version is refused.
	upd, err := h.cals.UpdateCalendar(h.ctx, &sundialv1.UpdateCalendarRequest{Calendar: &sundialv1.Calendar{
		Name: "ops", Holidays: []*sundialv1.CalendarHoliday{{Date: d(0)}, {Date: d(1)}},
	}, ExpectedVersion: 1}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if c := upd.GetCalendar(); c.GetVersion() != 2 || len(c.GetHolidays()) != 2 || c.GetWeekend() != nil {
		t.Fatalf("updated %v", c)
	}
	_, err = h.cals.UpdateCalendar(h.ctx, &sundialv1.UpdateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops"}, ExpectedVersion: 1}, as(tokenAcme))
	wantCode(t, err, codes.FailedPrecondition)

	// In use: not deleted until the job stops using it.
	_, err = h.cals.DeleteCalendar(h.ctx, &sundialv1.DeleteCalendarRequest{Name: "ops"}, as(tokenAcme))
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), job.GetId()) {
		t.Fatalf("in-use refusal does not name the job: %v", err)
	}
	_, err = h.client.UpdateJob(h.ctx, &sundialv1.UpdateJobRequest{
		Job:        &sundialv1.Job{Id: job.GetId(), Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 12 * * *"}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule"}},
	}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.cals.DeleteCalendar(h.ctx, &sundialv1.DeleteCalendarRequest{Name: "ops"}, as(tokenAcme)); err != nil {
		t.Fatal(err)
	}
	_, err = h.cals.GetCalendar(h.ctx, &sundialv1.GetCalendarRequest{Name: "ops"}, as(tokenAcme))
	wantCode(t, err, codes.NotFound)
}

func TestIntegrationCalendarJobValidation(t *testing.T) {
	h := newCalHarness(t)
	for _, tc := range []struct {
		cal   string
		p     sundialv1.CalendarPolicy
		field string
		want  string
	}{
		{"nope", 0, "schedule.calendar", `no calendar "nope"`},
		{"Bad Name", 0, "schedule.calendar", "is not a calendar name"},
		{"", sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT, "schedule.calendar_policy", "schedule.calendar is empty"},
		{"nope", sundialv1.CalendarPolicy(7), "schedule.calendar_policy", "unknown value 7"},
	} {
		_, err := h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: dailyNoon(tc.cal, tc.p)}, as(tokenAcme))
		if got := violations(t, err)[tc.field]; !strings.Contains(got, tc.want) {
			t.Errorf("calendar %q policy %d: %s = %q, want %q (%v)", tc.cal, tc.p, tc.field, got, tc.want, err)
		}
		_, err = h.client.PreviewSchedule(h.ctx, &sundialv1.PreviewScheduleRequest{Schedule: dailyNoon(tc.cal, tc.p).GetSchedule()}, as(tokenAcme))
		if got := violations(t, err)[tc.field]; !strings.Contains(got, tc.want) {
			t.Errorf("preview: calendar %q policy %d: %s = %q, want %q", tc.cal, tc.p, tc.field, got, tc.want)
		}
	}
	if n := h.count(`SELECT count(*) FROM jobs`); n != 0 {
		t.Fatalf("%d jobs written for bad calendar references", n)
	}
}

// Tenant B can neither see nor use tenant A's calendar, and may have one
// of the same name of its own.
func TestIntegrationCalendarTenantIsolation(t *testing.T) {
	h := newCalHarness(t)
	_, err := h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{
		Name: "acme-only", Holidays: []*sundialv1.CalendarHoliday{{Date: "2030-01-01"}}}}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.cals.GetCalendar(h.ctx, &sundialv1.GetCalendarRequest{Name: "acme-only"}, as(tokenGlobex))
	wantCode(t, err, codes.NotFound)
	list, err := h.cals.ListCalendars(h.ctx, &sundialv1.ListCalendarsRequest{}, as(tokenGlobex))
	if err != nil || len(list.GetCalendars()) != 0 {
		t.Fatalf("globex lists %v (%v)", list.GetCalendars(), err)
	}
	_, err = h.client.CreateJob(h.ctx, &sundialv1.CreateJobRequest{Job: dailyNoon("acme-only", 0)}, as(tokenGlobex))
	if got := violations(t, err)["schedule.calendar"]; !strings.Contains(got, `no calendar "acme-only"`) {
		t.Fatalf("globex used acme's calendar: %v", err)
	}
	_, err = h.client.PreviewSchedule(h.ctx, &sundialv1.PreviewScheduleRequest{Schedule: dailyNoon("acme-only", 0).GetSchedule()}, as(tokenGlobex))
	wantCode(t, err, codes.InvalidArgument)
	_, err = h.cals.UpdateCalendar(h.ctx, &sundialv1.UpdateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "acme-only"}}, as(tokenGlobex))
	wantCode(t, err, codes.NotFound)
	_, err = h.cals.DeleteCalendar(h.ctx, &sundialv1.DeleteCalendarRequest{Name: "acme-only"}, as(tokenGlobex))
	wantCode(t, err, codes.NotFound)
	if _, err := h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "acme-only"}}, as(tokenGlobex)); err != nil {
		t.Fatalf("globex's own calendar of the same name: %v", err)
	}
	got, err := h.cals.GetCalendar(h.ctx, &sundialv1.GetCalendarRequest{Name: "acme-only"}, as(tokenAcme))
	if err != nil || len(got.GetCalendar().GetHolidays()) != 1 {
		t.Fatalf("acme's calendar after globex made its own: %v (%v)", got, err)
	}
}

func TestIntegrationCalendarImportAndList(t *testing.T) {
	h := newCalHarness(t)
	ics := "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261227\r\nSUMMARY:Christmas\r\nEND:VEVENT\r\n" +
		"BEGIN:VEVENT\r\nDTSTART:20261224T150000Z\r\nSUMMARY:Party\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
	resp, err := h.cals.ImportCalendar(h.ctx, &sundialv1.ImportCalendarRequest{Name: "de", Ics: ics}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if hs := resp.GetCalendar().GetHolidays(); len(hs) != 2 || hs[0].GetDate() != "2026-12-25" || hs[1].GetDate() != "2026-12-26" {
		t.Fatalf("imported %v", hs)
	}
	if len(resp.GetSkipped()) != 1 || !strings.Contains(resp.GetSkipped()[0], "Party") {
		t.Fatalf("skipped %v", resp.GetSkipped())
	}
	_, err = h.cals.ImportCalendar(h.ctx, &sundialv1.ImportCalendarRequest{Name: "de", Ics: ics}, as(tokenAcme))
	wantCode(t, err, codes.AlreadyExists)
	_, err = h.cals.ImportCalendar(h.ctx, &sundialv1.ImportCalendarRequest{Name: "de", Ics: "nope"}, as(tokenAcme))
	if violations(t, err)["ics"] == "" {
		t.Fatalf("bad file: %v", err)
	}
	one := "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20270101\nSUMMARY:New Year\nEND:VEVENT\nEND:VCALENDAR\n"
	resp, err = h.cals.ImportCalendar(h.ctx, &sundialv1.ImportCalendarRequest{Name: "de", Ics: one, Replace: true,
		Weekend: &sundialv1.Weekend{Days: []sundialv1.Weekday{sundialv1.Weekday_WEEKDAY_SUNDAY}}}, as(tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.GetCalendar(); len(c.GetHolidays()) != 1 || c.GetVersion() != 2 || len(c.GetWeekend().GetDays()) != 1 {
		t.Fatalf("replaced %v", c)
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := h.cals.CreateCalendar(h.ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: name}}, as(tokenAcme)); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	tok := ""
	for {
		page, err := h.cals.ListCalendars(h.ctx, &sundialv1.ListCalendarsRequest{PageSize: 3, PageToken: tok}, as(tokenAcme))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.GetCalendars() {
			names = append(names, c.GetName())
		}
		if tok = page.GetNextPageToken(); tok == "" {
			break
		}
	}
	if strings.Join(names, ",") != "a,b,c,de" {
		t.Fatalf("listed %v", names)
	}
}
