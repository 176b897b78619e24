package calendar

import (
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The calendar goes under the exclusions: Friday's holiday instant moves
// to Monday, and Monday is excluded, so it does not fire; the notes say
// both.
func TestCalendarGoesUnderTheExclusions(t *testing.T) {
	spec := &sundialv1.Schedule{
		Spec:           &sundialv1.Schedule_Cron{Cron: "0 9 * * FRI"},
		Timezone:       "Europe/Berlin",
		Calendar:       "office",
		CalendarPolicy: sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT,
		Exclusions:     []*sundialv1.Exclusion{{StartDate: "2026-12-28", EndDate: "2026-12-28", Note: "inventory"}},
	}
	sch, err := jobspec.FromProto(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cal := &sundialv1.Calendar{Name: "office", Holidays: []*sundialv1.CalendarHoliday{{Date: "2026-12-25", Name: "Christmas"}}}
	out, err := Apply(sch, spec, cal)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(*schedule.Excluded); !ok {
		t.Fatalf("%T: the exclusions are not outermost", out)
	}
	from := time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)
	got := out.Next(from)
	if want := time.Date(2027, 1, 1, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("next %s, want %s (the 25th moved to the excluded 28th)", got, want)
	}
	notes := schedule.Notes(out, from, got, 10)
	if len(notes) != 2 || !notes[0].To.Equal(time.Date(2026, 12, 28, 8, 0, 0, 0, time.UTC)) ||
		!strings.Contains(notes[1].Reason, "excluded by exclusions[0] (all day on 2026-12-28): inventory") {
		t.Fatalf("notes %+v", notes)
	}
}
