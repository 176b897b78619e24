//go:build integration

package apitest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// Every change to a tenant's calendars on the real api over real
// Postgres: create, update, import (new and replacing) and delete each
// write one audit row naming the caller, the calendar and the version;
// refused changes write none; the trail pages, filters by calendar and
// outlives the calendar; an operator reads it by naming the tenant, and
// another tenant cannot read it.
func TestIntegrationCalendarAudit(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme := sundialv1.NewCalendarServiceClient(dial(t, api, apitest.TokenAcme))
	globex := sundialv1.NewCalendarServiceClient(dial(t, api, apitest.TokenGlobex))
	operator := sundialv1.NewCalendarServiceClient(dial(t, api, apitest.TokenOperator))
	trail := func(c sundialv1.CalendarServiceClient, ctx context.Context, req *sundialv1.ListCalendarAuditRequest) []*sundialv1.CalendarAuditEntry {
		t.Helper()
		resp, err := c.ListCalendarAudit(ctx, req)
		if err != nil {
			t.Fatalf("ListCalendarAudit: %v", err)
		}
		return resp.GetEntries()
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM calendar_audit`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const ics = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20270101\nSUMMARY:New Year\nEND:VEVENT\nEND:VCALENDAR\n"

	if _, err := acme.CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops",
		Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-12-25"}, {Date: "2026-12-26"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.UpdateCalendar(ctx, &sundialv1.UpdateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops", Description: "ops"}, ExpectedVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.ImportCalendar(ctx, &sundialv1.ImportCalendarRequest{Name: "ops", Replace: true, Ics: ics}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.ImportCalendar(ctx, &sundialv1.ImportCalendarRequest{Name: "bank", Ics: ics}); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 4 {
		t.Fatalf("%d audit rows after four changes", n)
	}

	// Refused changes write nothing.
	if _, err := acme.CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops"}}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	if _, err := acme.UpdateCalendar(ctx, &sundialv1.UpdateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "ops"}, ExpectedVersion: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale version: %v", err)
	}
	if _, err := acme.CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: &sundialv1.Calendar{Name: "bad",
		Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-02-30"}}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad date: %v", err)
	}
	if _, err := globex.DeleteCalendar(ctx, &sundialv1.DeleteCalendarRequest{Name: "ops"}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex deleting acme's: %v", err)
	}
	if _, err := operator.DeleteCalendar(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.DeleteCalendarRequest{Name: "ops"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator deleting acme's: %v", err)
	}
	job := cronJob("on-bank-days")
	job.Schedule.Calendar = "bank"
	if _, err := sundialv1.NewJobServiceClient(dial(t, api, apitest.TokenAcme)).CreateJob(ctx, &sundialv1.CreateJobRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.DeleteCalendar(ctx, &sundialv1.DeleteCalendarRequest{Name: "bank"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deleting a calendar in use: %v", err)
	}
	if n := rows(); n != 4 {
		t.Fatalf("%d audit rows after refused changes, want 4", n)
	}

	if _, err := acme.DeleteCalendar(ctx, &sundialv1.DeleteCalendarRequest{Name: "ops"}); err != nil {
		t.Fatal(err)
	}
	all := trail(acme, ctx, &sundialv1.ListCalendarAuditRequest{})
	want := []struct {
		cal, action string
		version     int64
		detail      map[string]any
	}{
		{"ops", "delete", 3, map[string]any{}},
		{"bank", "create", 1, map[string]any{"holidays": 1.0, "import": true, "skipped_events": 0.0}},
		{"ops", "update", 3, map[string]any{"holidays": 1.0, "jobs_rescheduled": 0.0, "import": true, "skipped_events": 0.0}},
		{"ops", "update", 2, map[string]any{"holidays": 0.0, "jobs_rescheduled": 0.0}},
		{"ops", "create", 1, map[string]any{"holidays": 2.0}},
	}
	if len(all) != len(want) {
		t.Fatalf("trail: %v", all)
	}
	for i, w := range want {
		e := all[i]
		var detail map[string]any
		if err := json.Unmarshal([]byte(e.GetDetail()), &detail); err != nil {
			t.Fatalf("entry %d detail %q: %v", i, e.GetDetail(), err)
		}
		if e.GetCalendar() != w.cal || e.GetAction() != w.action || e.GetVersion() != w.version || e.GetActor() != "acme/ops" || e.GetTime() == nil || len(detail) != len(w.detail) {
			t.Fatalf("entry %d: %v, want %+v", i, e, w)
		}
		for k, v := range w.detail {
			if detail[k] != v {
				t.Fatalf("entry %d detail %s = %v, want %v (%v)", i, k, detail[k], v, e)
			}
		}
	}

	// One calendar's trail (outliving it), paged two at a time.
	page, err := acme.ListCalendarAudit(ctx, &sundialv1.ListCalendarAuditRequest{Name: "ops", PageSize: 2})
	if err != nil || len(page.GetEntries()) != 2 || page.GetNextPageToken() == "" || page.GetEntries()[0].GetAction() != "delete" {
		t.Fatalf("ops page 1: %v %v", page, err)
	}
	page2, err := acme.ListCalendarAudit(ctx, &sundialv1.ListCalendarAuditRequest{Name: "ops", PageSize: 2, PageToken: page.GetNextPageToken()})
	if err != nil || len(page2.GetEntries()) != 2 || page2.GetNextPageToken() != "" || page2.GetEntries()[1].GetAction() != "create" {
		t.Fatalf("ops page 2: %v %v", page2, err)
	}
	for _, e := range append(page.GetEntries(), page2.GetEntries()...) {
		if e.GetCalendar() != "ops" {
			t.Fatalf("ops trail holds %v", e)
		}
	}
	if _, err := acme.ListCalendarAudit(ctx, &sundialv1.ListCalendarAuditRequest{Name: "bank", PageToken: page.GetNextPageToken()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ops's page token on bank: %v", err)
	}
	if _, err := acme.ListCalendarAudit(ctx, &sundialv1.ListCalendarAuditRequest{Name: "Not A Name"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "name") {
		t.Fatalf("bad name: %v", err)
	}

	// Another tenant: its own (empty) trail, acme's refused; an operator
	// reads acme's by naming it.
	if got := trail(globex, ctx, &sundialv1.ListCalendarAuditRequest{}); len(got) != 0 {
		t.Fatalf("globex sees %v", got)
	}
	if _, err := globex.ListCalendarAudit(metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.ListCalendarAuditRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("globex naming acme: %v", err)
	}
	if got := trail(operator, metadata.AppendToOutgoingContext(ctx, auth.TenantHeader, "acme"), &sundialv1.ListCalendarAuditRequest{}); len(got) != len(want) {
		t.Fatalf("operator reading acme's: %v", got)
	}

	code, _, body := post(t, api, "/v1/calendars:audit?name=bank", apitest.TokenAcme, nil)
	entries, _ := body["entries"].([]any)
	if code != http.StatusOK || len(entries) != 1 || entries[0].(map[string]any)["calendar"] != "bank" {
		t.Fatalf("GET /v1/calendars:audit: %d %v", code, body)
	}
}
