package jobspec

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Limits on a schedule's union, exclusions and run count.
const (
	// MaxAdditionalSchedules: with the primary, schedule.MaxUnion in all.
	MaxAdditionalSchedules = schedule.MaxUnion - 1
	MaxExclusions          = 20
	MaxExclusionNoteLen    = 256
	MaxRuns                = 1_000_000_000
)

// Exclusions is the engine's form of a schedule's exclusions; Validate
// accepted them.
func Exclusions(s *sundialv1.Schedule) ([]schedule.Exclusion, error) {
	out := make([]schedule.Exclusion, 0, len(s.GetExclusions()))
	for i, x := range s.GetExclusions() {
		e, problems := exclusion(x)
		if len(problems) > 0 {
			return nil, fmt.Errorf("schedule.exclusions[%d].%s: %s", i, problems[0].Field, problems[0].Description)
		}
		out = append(out, e)
	}
	return out, nil
}

// exclusion reads one exclusion; problems name fields relative to it
// ("start", "weekdays[1]", or "" for the whole exclusion).
func exclusion(x *sundialv1.Exclusion) (schedule.Exclusion, []FieldViolation) {
	var e schedule.Exclusion
	var vs []FieldViolation
	add := func(field, format string, args ...any) {
		vs = append(vs, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	e.Note = x.GetNote()
	switch {
	case x.GetStart() == "" && x.GetEnd() == "":
		e.Whole = true
	case x.GetStart() == "":
		add("start", "is required with end (both or neither: without them whole days are excluded)")
	case x.GetEnd() == "":
		add("end", "is required with start (both or neither: without them whole days are excluded)")
	default:
		var err error
		if e.Start, err = schedule.ParseTimeOfDay(x.GetStart()); err != nil {
			add("start", "%v", err)
		} else if e.Start >= schedule.TimeOfDay(24*time.Hour) {
			add("start", "24:00 is the end of the day; a window starting at midnight starts at 00:00")
		}
		if e.End, err = schedule.ParseTimeOfDay(x.GetEnd()); err != nil {
			add("end", "%v", err)
		}
		if len(vs) == 0 && e.Start == e.End {
			add("end", "equals start (%s): the window would be empty; leave both out to exclude whole days", e.Start)
		}
	}
	seen := map[sundialv1.Weekday]int{}
	for i, d := range x.GetWeekdays() {
		f := fmt.Sprintf("weekdays[%d]", i)
		if d < sundialv1.Weekday_WEEKDAY_MONDAY || d > sundialv1.Weekday_WEEKDAY_SUNDAY {
			add(f, "unknown value %d: want MONDAY through SUNDAY", d)
			continue
		}
		if j, dup := seen[d]; dup {
			add(f, "%s is already weekdays[%d]", d, j)
			continue
		}
		seen[d] = i
		e.Weekdays = append(e.Weekdays, time.Weekday(int32(d)%7))
	}
	var err error
	if v := x.GetStartDate(); v != "" {
		if e.From, err = schedule.ParseDate(v); err != nil {
			add("start_date", "%v", err)
		}
	}
	if v := x.GetEndDate(); v != "" {
		if e.Until, err = schedule.ParseDate(v); err != nil {
			add("end_date", "%v", err)
		} else if e.From.Year != 0 && e.Until.String() < e.From.String() {
			add("end_date", "%s is before start_date %s", e.Until, e.From)
		}
	}
	if n := utf8.RuneCountInString(e.Note); n > MaxExclusionNoteLen || !utf8.ValidString(e.Note) {
		add("note", "must be at most %d characters of UTF-8", MaxExclusionNoteLen)
	}
	if len(vs) == 0 && e.Whole && len(e.Weekdays) == 0 && e.From.Year == 0 && e.Until.Year == 0 {
		add("", "excludes every moment of every day: give a window (start and end), weekdays or dates")
	}
	return e, vs
}

func validateExclusions(c collector, field string, s *sundialv1.Schedule) {
	xs := s.GetExclusions()
	if len(xs) > MaxExclusions {
		c.add(field+".exclusions", "has %d exclusions, at most %d allowed", len(xs), MaxExclusions)
		return
	}
	ok := true
	engine := make([]schedule.Exclusion, 0, len(xs))
	for i, x := range xs {
		f := fmt.Sprintf("%s.exclusions[%d]", field, i)
		if x == nil {
			c.add(f, "is empty")
			ok = false
			continue
		}
		e, vs := exclusion(x)
		for _, v := range vs {
			if v.Field == "" {
				c.add(f, "%s", v.Description)
			} else {
				c.add(f+"."+v.Field, "%s", v.Description)
			}
		}
		ok = ok && len(vs) == 0
		engine = append(engine, e)
	}
	if !ok || len(engine) == 0 {
		return
	}
	if _, err := schedule.NewExcluded(schedule.Once(time.Unix(0, 0), schedule.Options{}), engine, time.UTC); errors.Is(err, schedule.ErrAllExcluded) {
		c.add(field+".exclusions", "%v", err)
	}
}

// validateAdditional checks a schedule's additional schedules: each as a
// schedule of its own (an empty timezone is the primary's), without the
// parts that belong to the union.
func validateAdditional(c collector, field string, s *sundialv1.Schedule, seed string) {
	as := s.GetAdditionalSchedules()
	if len(as) > MaxAdditionalSchedules {
		c.add(field+".additional_schedules", "has %d schedules, at most %d allowed (%d with the primary)", len(as), MaxAdditionalSchedules, schedule.MaxUnion)
		return
	}
	for i, a := range as {
		f := fmt.Sprintf("%s.additional_schedules[%d]", field, i)
		if a == nil {
			c.add(f, "is empty: set one of cron, once, interval or rrule")
			continue
		}
		if a.GetCalendar() != "" || a.GetCalendarPolicy() != sundialv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED {
			c.add(f+".calendar", "must be empty: %s.calendar applies to every schedule of the job", field)
		}
		if len(a.GetAdditionalSchedules()) > 0 {
			c.add(f+".additional_schedules", "must be empty: list every schedule in %s.additional_schedules", field)
		}
		if len(a.GetExclusions()) > 0 {
			c.add(f+".exclusions", "must be empty: %s.exclusions apply to every schedule of the job", field)
		}
		validateSchedule(c, f, inheritZone(a, s), seed)
	}
}

// inheritZone is a with the primary's zone when it names none.
func inheritZone(a, primary *sundialv1.Schedule) *sundialv1.Schedule {
	if a.GetTimezone() != "" || primary.GetTimezone() == "" {
		return a
	}
	return &sundialv1.Schedule{
		Spec: a.GetSpec(), Timezone: primary.GetTimezone(), StartTime: a.GetStartTime(), EndTime: a.GetEndTime(),
		DstGap: a.GetDstGap(), DstRepeat: a.GetDstRepeat(),
	}
}

func validateMaxRuns(c collector, n int64) {
	if n < 0 || n > MaxRuns {
		c.add("max_runs", "must be between 0 (no limit) and %d, got %d", MaxRuns, n)
	}
}

// RemainingRuns is how many runs a job with max_runs has left after staged
// slots; -1 when it has no limit.
func RemainingRuns(maxRuns, staged int64) int64 {
	if maxRuns <= 0 {
		return -1
	}
	return max(maxRuns-staged, 0)
}

// RunLimitNote is what a preview says when max_runs ended its list.
func RunLimitNote(maxRuns int64) string {
	return fmt.Sprintf("max_runs %d reached: the job completes after its %s run", maxRuns, ordinal(maxRuns))
}

func ordinal(n int64) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
