package calendar

import (
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseICS(t *testing.T) {
	b, err := os.ReadFile("testdata/holidays.ics")
	if err != nil {
		t.Fatal(err)
	}
	hols, skipped, err := ParseICS(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hols {
		got = append(got, h.GetDate()+"="+h.GetName())
	}
	want := []string{
		"2026-12-25=Christmas, both days",
		"2026-12-26=Christmas, both days; Boxing Day",
		"2026-12-31=Bank closing day",
		"2027-01-01=New Year's Day",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("holidays:\n got %q\nwant %q", got, want)
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0], "Office party") || !strings.Contains(skipped[0], "time of day") ||
		!strings.Contains(skipped[1], "RRULE") {
		t.Fatalf("skipped = %q", skipped)
	}
}

func TestParseICSRefusesNonCalendar(t *testing.T) {
	if _, _, err := ParseICS("hello"); err == nil {
		t.Fatal("want an error")
	}
}

func TestValidateNamesFields(t *testing.T) {
	c := &sundialv1.Calendar{
		Name: "Bad Name",
		Holidays: []*sundialv1.CalendarHoliday{
			{Date: "2026-02-30"}, {Date: "2026-12-25"}, {Date: "2026-12-25"},
		},
		Weekend: &sundialv1.Weekend{Days: []sundialv1.Weekday{9}},
	}
	err := Validate("calendar", c)
	jerr, ok := err.(*jobspec.Error)
	if !ok {
		t.Fatalf("err = %v", err)
	}
	fields := map[string]bool{}
	for _, v := range jerr.Violations {
		fields[v.Field] = true
	}
	for _, f := range []string{"calendar.name", "calendar.holidays[0].date", "calendar.holidays[2].date", "calendar.weekend.days[0]"} {
		if !fields[f] {
			t.Errorf("no violation on %s: %v", f, jerr)
		}
	}
	all := &sundialv1.Calendar{Name: "x", Weekend: &sundialv1.Weekend{Days: []sundialv1.Weekday{1, 2, 3, 4, 5, 6, 7}}}
	if err := Validate("calendar", all); err == nil || !strings.Contains(err.Error(), "calendar.weekend.days") {
		t.Fatalf("all-week weekend: %v", err)
	}
}

func TestWeekdays(t *testing.T) {
	if got := Weekdays(&sundialv1.Calendar{}); len(got) != 2 || got[0] != time.Saturday || got[1] != time.Sunday {
		t.Fatalf("default = %v", got)
	}
	if got := Weekdays(&sundialv1.Calendar{Weekend: &sundialv1.Weekend{}}); len(got) != 0 {
		t.Fatalf("empty = %v", got)
	}
	got := Weekdays(&sundialv1.Calendar{Weekend: &sundialv1.Weekend{Days: []sundialv1.Weekday{sundialv1.Weekday_WEEKDAY_FRIDAY, sundialv1.Weekday_WEEKDAY_SUNDAY}}})
	if len(got) != 2 || got[0] != time.Friday || got[1] != time.Sunday {
		t.Fatalf("fri,sun = %v", got)
	}
}

func TestApply(t *testing.T) {
	spec := &sundialv1.Schedule{
		Spec:           &sundialv1.Schedule_Cron{Cron: "0 9 * * *"},
		Timezone:       "Europe/Berlin",
		Calendar:       "de",
		CalendarPolicy: sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT,
	}
	base, err := jobspec.FromProto(spec, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cal := &sundialv1.Calendar{Name: "de", Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-12-25", Name: "Christmas"}}}
	sch, err := Apply(base, spec, cal)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for tt := range schedule.Preview(sch, time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC), 2) {
		got = append(got, tt.UTC().Format(time.RFC3339))
	}
	// 25th a holiday, 26th/27th weekend: all three move onto Monday 28th,
	// one firing.
	if want := "2026-12-28T08:00:00Z 2026-12-29T08:00:00Z"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	if _, err := Apply(base, spec, &sundialv1.Calendar{Name: "other"}); err == nil {
		t.Fatal("a calendar of another name must be refused")
	}
	spec.Calendar = ""
	if s, err := Apply(base, spec, nil); err != nil || s != base {
		t.Fatalf("no calendar: %v %v", s, err)
	}
}
