package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func cronSchedule(expr string) *sundialv1.Schedule {
	return &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: expr}}
}

func violations(err error) []string {
	var jerr *Error
	if !errors.As(err, &jerr) {
		return nil
	}
	var out []string
	for _, v := range jerr.Violations {
		out = append(out, v.Field+": "+v.Description)
	}
	return out
}

func TestUnionWithExclusions(t *testing.T) {
	j := goodJob()
	j.Schedule = &sundialv1.Schedule{
		Spec:                &sundialv1.Schedule_Cron{Cron: "0 * * * *"},
		Timezone:            "Europe/Berlin",
		AdditionalSchedules: []*sundialv1.Schedule{cronSchedule("30 2 * * *"), cronSchedule("0 3 * * *")},
		Exclusions:          []*sundialv1.Exclusion{{Start: "02:00", End: "04:00", Weekdays: []sundialv1.Weekday{sundialv1.Weekday_WEEKDAY_SUNDAY}, Note: "backups"}},
	}
	j.MaxRuns = 5
	if err := Validate(j); err != nil {
		t.Fatal(err)
	}
	Normalize(j)
	if tz := j.Schedule.AdditionalSchedules[0].GetTimezone(); tz != "Europe/Berlin" {
		t.Fatalf("an additional schedule's zone is the primary's when unset; got %q", tz)
	}
	sch, err := Schedule(j, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// Saturday 2026-11-28 01:30 Berlin: Saturday's 02:00, 02:30 (the
	// additional schedule, once), 03:00 (both schedules: once), 04:00; then
	// Sunday's 01:00, [02:00, 02:30, 03:00 excluded], 04:00.
	from := time.Date(2026, 11, 28, 1, 30, 0, 0, berlin)
	var got []string
	for tt := range schedule.Preview(sch, from, 7) {
		got = append(got, tt.In(berlin).Format("Mon 15:04"))
	}
	want := []string{"Sat 02:00", "Sat 02:30", "Sat 03:00", "Sat 04:00", "Sat 05:00", "Sat 06:00", "Sat 07:00"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got = got[:0]
	for tt := range schedule.Preview(sch, time.Date(2026, 11, 29, 0, 30, 0, 0, berlin), 2) {
		got = append(got, tt.In(berlin).Format("Mon 15:04"))
	}
	if want := []string{"Sun 01:00", "Sun 04:00"}; !slices.Equal(got, want) {
		t.Fatalf("Sunday: got %v, want %v", got, want)
	}
	notes := schedule.Notes(sch, time.Date(2026, 11, 29, 0, 30, 0, 0, berlin), time.Date(2026, 11, 29, 4, 0, 0, 0, berlin), 10)
	if len(notes) != 3 || notes[0].Reason != "excluded by exclusions[0] (02:00-04:00 on Sun): backups; skipped" {
		t.Fatalf("notes %+v", notes)
	}
}

func TestValidateSchedulesNamesFields(t *testing.T) {
	many := func(n int) []*sundialv1.Schedule {
		out := make([]*sundialv1.Schedule, n)
		for i := range out {
			out[i] = cronSchedule("0 9 * * *")
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(j *sundialv1.Job)
		want string
	}{
		{"bad additional cron", func(j *sundialv1.Job) {
			j.Schedule.AdditionalSchedules = []*sundialv1.Schedule{cronSchedule("0 9 * * *"), cronSchedule("0 0 32 * *")}
		}, "schedule.additional_schedules[1].cron: day-of-month: 32 is out of range 1-31"},
		{"impossible additional cron", func(j *sundialv1.Job) {
			j.Schedule.AdditionalSchedules = []*sundialv1.Schedule{cronSchedule("0 0 30 2 *")}
		}, "schedule.additional_schedules[0].cron: expression: \"0 0 30 2 *\" never fires"},
		{"nested calendar", func(j *sundialv1.Job) {
			a := cronSchedule("0 9 * * *")
			a.Calendar = "us"
			j.Schedule.AdditionalSchedules = []*sundialv1.Schedule{a}
		}, "schedule.additional_schedules[0].calendar: must be empty"},
		{"too many schedules", func(j *sundialv1.Job) { j.Schedule.AdditionalSchedules = many(10) },
			"schedule.additional_schedules: has 10 schedules, at most 9 allowed"},
		{"bad start", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "01:00", End: "02:00"}, {Start: "25:00", End: "04:00"}}
		}, "schedule.exclusions[1].start: \"25:00\" is not a time of day"},
		{"start without end", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "02:00"}}
		}, "schedule.exclusions[0].end: is required with start"},
		{"empty window", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "02:00", End: "02:00"}}
		}, "schedule.exclusions[0].end: equals start"},
		{"bad date", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{StartDate: "2026-02-30"}}
		}, "schedule.exclusions[0].start_date: \"2026-02-30\" is not a date"},
		{"dates backwards", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{StartDate: "2026-12-31", EndDate: "2026-12-24"}}
		}, "schedule.exclusions[0].end_date: 2026-12-24 is before start_date 2026-12-31"},
		{"duplicate weekday", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Weekdays: []sundialv1.Weekday{6, 6}}}
		}, "schedule.exclusions[0].weekdays[1]: WEEKDAY_SATURDAY is already weekdays[0]"},
		{"everything", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{}}
		}, "schedule.exclusions[0]: excludes every moment of every day"},
		{"everything together", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = []*sundialv1.Exclusion{{Start: "06:00", End: "18:00"}, {Start: "18:00", End: "06:00"}}
		}, "schedule.exclusions: the exclusions cover every moment of every day"},
		{"too many exclusions", func(j *sundialv1.Job) {
			j.Schedule.Exclusions = make([]*sundialv1.Exclusion, 21)
		}, "schedule.exclusions: has 21 exclusions, at most 20 allowed"},
		{"negative max_runs", func(j *sundialv1.Job) { j.MaxRuns = -1 }, "max_runs: must be between 0 (no limit) and 1000000000, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := goodJob()
			j.Schedule = cronSchedule("0 * * * *")
			tc.edit(j)
			vs := violations(Validate(j))
			if !slices.ContainsFunc(vs, func(v string) bool { return strings.HasPrefix(v, tc.want) }) {
				t.Fatalf("got %q, want one starting %q", vs, tc.want)
			}
			// PreviewSchedule's check says the same of the schedule.
			if strings.HasPrefix(tc.want, "schedule") {
				if vs := violations(ValidateSchedule(j.Schedule)); !slices.ContainsFunc(vs, func(v string) bool { return strings.HasPrefix(v, tc.want) }) {
					t.Fatalf("ValidateSchedule: got %q", vs)
				}
			}
		})
	}
}

func TestRunLimitNote(t *testing.T) {
	for n, want := range map[int64]string{1: "1st", 2: "2nd", 3: "3rd", 11: "11th", 12: "12th", 22: "22nd", 101: "101st", 113: "113th"} {
		if got := RunLimitNote(n); !strings.HasSuffix(got, want+" run") {
			t.Errorf("%d: %q", n, got)
		}
	}
	if RemainingRuns(0, 5) != -1 || RemainingRuns(3, 5) != 0 || RemainingRuns(10, 4) != 6 {
		t.Fatal("RemainingRuns")
	}
}
