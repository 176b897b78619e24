// Package calendar is Sundial's business calendars: a tenant's named
// holiday sets (sundial.v1.Calendar) checked, turned into the engine's
// schedule.Calendar and imported from iCalendar files. Package
// calendarstore keeps them in the calendars table.
//
// A job names a calendar in its schedule (schedule.calendar) with a policy
// (schedule.calendar_policy): its instants on holidays and weekend days are
// skipped or moved to the next or previous business day (Apply). The api
// resolves the calendar when it computes a job's next instant and for
// PreviewSchedule; the prefetcher loads it (calendarstore.Load) inside its
// staging transaction.
package calendar

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Limits on a calendar's fields.
const (
	MaxHolidays       = 10000
	MaxHolidayNameLen = 256
	MaxDescriptionLen = 1024
)

// Validate checks a calendar as a client submitted it; field names are
// under prefix (e.g. "calendar"). The error is a *jobspec.Error.
func Validate(prefix string, c *sundialv1.Calendar) error {
	var vs []jobspec.FieldViolation
	add := func(field, format string, args ...any) {
		vs = append(vs, jobspec.FieldViolation{Field: prefix + "." + field, Description: fmt.Sprintf(format, args...)})
	}
	if c == nil {
		return &jobspec.Error{Violations: []jobspec.FieldViolation{{Field: prefix, Description: "is required"}}}
	}
	if !jobspec.ValidCalendarName(c.GetName()) {
		add("name", "%q is not a calendar name: 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit", c.GetName())
	}
	if n := utf8.RuneCountInString(c.GetDescription()); n > MaxDescriptionLen || !utf8.ValidString(c.GetDescription()) {
		add("description", "must be at most %d characters of UTF-8", MaxDescriptionLen)
	}
	if n := len(c.GetHolidays()); n > MaxHolidays {
		add("holidays", "has %d dates, at most %d allowed", n, MaxHolidays)
	}
	seen := make(map[string]int, len(c.GetHolidays()))
	for i, h := range c.GetHolidays() {
		f := fmt.Sprintf("holidays[%d]", i)
		if _, err := schedule.ParseDate(h.GetDate()); err != nil {
			add(f+".date", "%v", err)
		} else if j, dup := seen[h.GetDate()]; dup {
			add(f+".date", "%s is already holidays[%d]; a date may appear once", h.GetDate(), j)
		} else {
			seen[h.GetDate()] = i
		}
		if n := utf8.RuneCountInString(h.GetName()); n > MaxHolidayNameLen || !utf8.ValidString(h.GetName()) {
			add(f+".name", "must be at most %d characters of UTF-8", MaxHolidayNameLen)
		}
	}
	if w := c.GetWeekend(); w != nil {
		days := map[sundialv1.Weekday]bool{}
		for i, d := range w.GetDays() {
			if d == sundialv1.Weekday_WEEKDAY_UNSPECIFIED || sundialv1.Weekday_name[int32(d)] == "" {
				add(fmt.Sprintf("weekend.days[%d]", i), "unknown value %d: want MONDAY through SUNDAY", d)
				continue
			}
			days[d] = true
		}
		if len(days) == 7 {
			add("weekend.days", "names all seven days, so no day would be a business day")
		}
	}
	if len(vs) > 0 {
		return &jobspec.Error{Violations: vs}
	}
	return nil
}

// Weekdays is the calendar's weekend as time.Weekday values: Saturday and
// Sunday when unset.
func Weekdays(c *sundialv1.Calendar) []time.Weekday {
	if c.GetWeekend() == nil {
		return slices.Clone(schedule.DefaultWeekend)
	}
	var out []time.Weekday
	for _, d := range c.GetWeekend().GetDays() {
		if d >= sundialv1.Weekday_WEEKDAY_MONDAY && d <= sundialv1.Weekday_WEEKDAY_SUNDAY {
			out = append(out, time.Weekday(int32(d)%7))
		}
	}
	return out
}

// Engine turns a stored calendar into the schedule engine's.
func Engine(c *sundialv1.Calendar) (*schedule.Calendar, error) {
	hols := make([]schedule.Holiday, 0, len(c.GetHolidays()))
	for _, h := range c.GetHolidays() {
		d, err := schedule.ParseDate(h.GetDate())
		if err != nil {
			return nil, fmt.Errorf("calendar %s: %w", c.GetName(), err)
		}
		hols = append(hols, schedule.Holiday{Date: d, Name: h.GetName()})
	}
	return schedule.NewCalendar(c.GetName(), hols, Weekdays(c))
}

// Policy is the engine's policy for a schedule's calendar_policy; SKIP when
// unspecified.
func Policy(p sundialv1.CalendarPolicy) schedule.CalendarPolicy {
	switch p {
	case sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT:
		return schedule.CalendarNext
	case sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_PREVIOUS:
		return schedule.CalendarPrevious
	default:
		return schedule.CalendarSkip
	}
}

// Apply puts the calendar that spec names on sch (built from spec by
// jobspec). cal must be that calendar; with no calendar named, sch comes
// back unchanged.
func Apply(sch schedule.Schedule, spec *sundialv1.Schedule, cal *sundialv1.Calendar) (schedule.Schedule, error) {
	if spec.GetCalendar() == "" {
		return sch, nil
	}
	if cal == nil || cal.GetName() != spec.GetCalendar() {
		return nil, fmt.Errorf("calendar: schedule names calendar %q but %q was given", spec.GetCalendar(), cal.GetName())
	}
	ec, err := Engine(cal)
	if err != nil {
		return nil, err
	}
	return ApplyEngine(sch, spec, ec)
}

// ApplyEngine is Apply with the calendar already built (Engine), for a
// caller that applies one calendar to many jobs.
func ApplyEngine(sch schedule.Schedule, spec *sundialv1.Schedule, ec *schedule.Calendar) (schedule.Schedule, error) {
	if spec.GetCalendar() == "" {
		return sch, nil
	}
	if ec == nil || ec.Name() != spec.GetCalendar() {
		return nil, fmt.Errorf("calendar: schedule names calendar %q but another was given", spec.GetCalendar())
	}
	var err error
	loc := time.UTC
	if tz := spec.GetTimezone(); tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, fmt.Errorf("calendar: schedule.timezone: %w", err)
		}
	}
	if ex, ok := sch.(*schedule.Excluded); ok {
		// The calendar goes under the exclusions: an instant it moves into
		// an excluded stretch does not fire either.
		cs, err := schedule.WithCalendar(ex.Base(), ec, Policy(spec.GetCalendarPolicy()), loc)
		if err != nil {
			return nil, err
		}
		return ex.WithBase(cs), nil
	}
	return schedule.WithCalendar(sch, ec, Policy(spec.GetCalendarPolicy()), loc)
}
