//go:build integration

package apitest_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// pkg/client's calendar calls against the real api: create, read, list,
// replace, import, delete, a field error, and another tenant's NotFound.
func TestIntegrationGoClientCalendars(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})
	ctx := context.Background()
	acme, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	globex, err := client.New(api.GRPCAddr, apitest.TokenGlobex, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer globex.Close()

	_, err = acme.CreateCalendar(ctx, &sundialv1.Calendar{Name: "ops", Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-02-30"}}})
	if vs := client.FieldViolations(err); len(vs) != 1 || vs[0].Field != "calendar.holidays[0].date" {
		t.Fatalf("bad date: %v %v", vs, err)
	}
	c, err := acme.CreateCalendar(ctx, &sundialv1.Calendar{Name: "ops", Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-12-25"}}})
	if err != nil || c.GetVersion() != 1 {
		t.Fatalf("create: %v %v", c, err)
	}
	c, err = acme.UpdateCalendar(ctx, &sundialv1.Calendar{Name: "ops", Description: "ops"}, 0)
	if err != nil || c.GetVersion() != 2 || len(c.GetHolidays()) != 0 {
		t.Fatalf("update: %v %v", c, err)
	}
	imp, err := acme.ImportCalendar(ctx, &sundialv1.ImportCalendarRequest{Name: "ops", Replace: true,
		Ics: "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20270101\nSUMMARY:New Year\nEND:VEVENT\nEND:VCALENDAR\n"})
	if err != nil || len(imp.GetCalendar().GetHolidays()) != 1 || imp.GetCalendar().GetDescription() != "ops" {
		t.Fatalf("import: %v %v", imp, err)
	}
	cals, next, err := acme.Calendars(ctx, 10, "")
	if err != nil || len(cals) != 1 || next != "" {
		t.Fatalf("list: %v %q %v", cals, next, err)
	}
	if _, err := globex.Calendar(ctx, "ops"); status.Code(err) != codes.NotFound {
		t.Fatalf("globex reads acme's calendar: %v", err)
	}
	if err := acme.DeleteCalendar(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Calendar(ctx, "ops"); status.Code(err) != codes.NotFound {
		t.Fatalf("after delete: %v", err)
	}
}
