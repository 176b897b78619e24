package console

import (
	"context"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// scheduleFields are the form's schedule, as typed: which kind (cron, a
// single instant, a fixed interval or an RFC 5545 rule), each kind's
// text, and what applies to all of them (bounds, DST policies, a business
// calendar). The time zone is the form's Timezone.
type scheduleFields struct {
	// SchedKind is "cron", "once", "interval" or "rrule".
	SchedKind           string
	Once, Interval      string
	RRule               string
	Start, End          string
	DstGap, DstRepeat   string
	Calendar, CalPolicy string
}

// scheduleKinds, and the policies' choices as the form names them ("" is
// the api's default: shift, first, skip).
var (
	scheduleKinds    = []string{"cron", "once", "interval", "rrule"}
	dstGaps          = []string{"shift", "skip"}
	dstRepeats       = []string{"first", "last", "both"}
	calendarPolicies = []string{"skip", "move_next", "move_previous"}
)

// wallLayouts are what the instant fields (once, start, end) accept
// without an offset, read as wall-clock time in the form's time zone.
var wallLayouts = []string{"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"}

// parseWall reads an instant typed in the form: RFC 3339 with its own
// offset, or a wall-clock time in zone (UTC when the zone is empty or not
// one the console can load: the api then refuses the zone, beside its
// field).
func parseWall(text, zone string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339, text); err == nil {
		return t, true
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" {
		loc = time.UTC
	}
	for _, l := range wallLayouts {
		if t, err := time.ParseInLocation(l, text, loc); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// wallText prints an instant as the form shows it: wall-clock time in the
// job's zone, seconds only when it has them.
func wallText(ts *timestamppb.Timestamp, zone string) string {
	if ts == nil {
		return ""
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	t := ts.AsTime().In(loc)
	if t.Second() != 0 || t.Nanosecond() != 0 {
		return t.Format("2006-01-02 15:04:05")
	}
	return t.Format("2006-01-02 15:04")
}

// normWall is an instant field's value as the instant it means in zone,
// so "2026-12-01T09:00" and "2026-12-01 09:00" are the same value; text
// the console cannot read is compared as written.
func normWall(text, zone string) string {
	if text == "" {
		return ""
	}
	if t, ok := parseWall(text, zone); ok {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return text
}

// normRule compares rules by their lines' words, so line endings and
// spacing typed differently are not a change.
func normRule(s string) string { return strings.Join(strings.Fields(s), " ") }

const wallHint = "a time such as 2026-12-01 09:00 (in the time zone above) or 2026-12-01T09:00:00Z"

// readSchedule reads the schedule's fields (get is PostFormValue or, for
// the live preview, Query().Get) into f and returns the schedule they
// describe. What the console cannot read itself (an instant, a duration,
// an unknown choice) is an error beside its field; the rest is the api's
// to judge (fieldOf puts its answer beside the same fields).
func readSchedule(f *form, get func(string) string) *sundialv1.Schedule {
	v := func(k string) string { return strings.TrimSpace(get(k)) }
	f.SchedKind, f.Once, f.Interval, f.RRule = v("schedule_kind"), v("once"), v("interval"), strings.TrimSpace(get("rrule"))
	f.Start, f.End, f.DstGap, f.DstRepeat = v("start_time"), v("end_time"), v("dst_gap"), v("dst_repeat")
	f.Calendar, f.CalPolicy = v("calendar"), v("calendar_policy")
	if f.SchedKind == "" {
		// A form or script from before the other kinds posts a cron only.
		f.SchedKind = "cron"
	}
	s := &sundialv1.Schedule{Timezone: f.Timezone, Calendar: f.Calendar}
	instant := func(key, text string) *timestamppb.Timestamp {
		if text == "" {
			return nil
		}
		t, ok := parseWall(text, f.Timezone)
		if !ok {
			f.Errors[key] = wallHint
			return nil
		}
		return timestamppb.New(t)
	}
	switch f.SchedKind {
	case "cron":
		s.Spec = &sundialv1.Schedule_Cron{Cron: f.Cron}
	case "once":
		if f.Once == "" {
			f.Errors["Once"] = "the instant to run at: " + wallHint
		} else if ts := instant("Once", f.Once); ts != nil {
			s.Spec = &sundialv1.Schedule_Once{Once: ts}
		}
	case "interval":
		if d, err := time.ParseDuration(f.Interval); err != nil {
			f.Errors["Interval"] = "a duration such as 15m or 1h30m"
		} else {
			s.Spec = &sundialv1.Schedule_Interval{Interval: durationpb.New(d)}
		}
	case "rrule":
		s.Spec = &sundialv1.Schedule_Rrule{Rrule: f.RRule}
	default:
		f.Errors["SchedKind"] = "unknown schedule kind " + f.SchedKind + ": cron, once, interval or rrule"
	}
	s.StartTime = instant("Start", f.Start)
	s.EndTime = instant("End", f.End)
	choice := func(key, text, prefix string, names map[string]int32, into func(int32)) {
		if text == "" {
			return
		}
		if n, ok := names[prefix+strings.ToUpper(text)]; ok {
			into(n)
		} else {
			f.Errors[key] = "unknown choice " + text
		}
	}
	choice("DstGap", f.DstGap, "DST_GAP_POLICY_", sundialv1.DstGapPolicy_value, func(n int32) { s.DstGap = sundialv1.DstGapPolicy(n) })
	choice("DstRepeat", f.DstRepeat, "DST_REPEAT_POLICY_", sundialv1.DstRepeatPolicy_value, func(n int32) { s.DstRepeat = sundialv1.DstRepeatPolicy(n) })
	choice("CalPolicy", f.CalPolicy, "CALENDAR_POLICY_", sundialv1.CalendarPolicy_value, func(n int32) { s.CalendarPolicy = sundialv1.CalendarPolicy(n) })
	return s
}

// scheduleFormOf fills f's schedule fields from a stored schedule.
func scheduleFormOf(f *form, s *sundialv1.Schedule) {
	zone := s.GetTimezone()
	switch {
	case s.GetOnce() != nil:
		f.SchedKind, f.Once = "once", wallText(s.GetOnce(), zone)
	case s.GetInterval() != nil:
		f.SchedKind, f.Interval = "interval", s.GetInterval().AsDuration().String()
	case s.GetRrule() != "":
		f.SchedKind, f.RRule = "rrule", s.GetRrule()
	default:
		f.SchedKind = "cron"
	}
	f.Start, f.End = wallText(s.GetStartTime(), zone), wallText(s.GetEndTime(), zone)
	lower := func(v interface{ String() string }, prefix string) string {
		return strings.ToLower(strings.TrimPrefix(v.String(), prefix))
	}
	if g := s.GetDstGap(); g != sundialv1.DstGapPolicy_DST_GAP_POLICY_UNSPECIFIED {
		f.DstGap = lower(g, "DST_GAP_POLICY_")
	}
	if r := s.GetDstRepeat(); r != sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_UNSPECIFIED {
		f.DstRepeat = lower(r, "DST_REPEAT_POLICY_")
	}
	f.Calendar = s.GetCalendar()
	if p := s.GetCalendarPolicy(); p != sundialv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED {
		f.CalPolicy = lower(p, "CALENDAR_POLICY_")
	}
}

// scheduleChanges are the update mask paths of what the form changed in
// the schedule. The spec's path is the chosen kind's: setting one member
// of the api's oneof replaces another, so a cron job made a one-off sends
// schedule.once alone.
func scheduleChanges(f, was form) []string {
	var paths []string
	diff := func(path, now, then string) {
		if now != then {
			paths = append(paths, path)
		}
	}
	spec := func(g form) string {
		switch g.SchedKind {
		case "once":
			return normWall(g.Once, g.Timezone)
		case "interval":
			return normDuration(g.Interval)
		case "rrule":
			return normRule(g.RRule)
		}
		return g.Cron
	}
	if f.SchedKind != was.SchedKind || spec(f) != spec(was) {
		paths = append(paths, "schedule."+f.SchedKind)
	}
	diff("schedule.timezone", f.Timezone, was.Timezone)
	diff("schedule.start_time", normWall(f.Start, f.Timezone), normWall(was.Start, was.Timezone))
	diff("schedule.end_time", normWall(f.End, f.Timezone), normWall(was.End, was.Timezone))
	diff("schedule.dst_gap", f.DstGap, was.DstGap)
	diff("schedule.dst_repeat", f.DstRepeat, was.DstRepeat)
	diff("schedule.calendar", f.Calendar, was.Calendar)
	diff("schedule.calendar_policy", f.CalPolicy, was.CalPolicy)
	return paths
}

// scheduleField is the form field beside which the api's complaint about
// a schedule path goes; "" when path is not the schedule's.
func (f *form) scheduleField(path string) string {
	switch path {
	case "schedule.timezone":
		return "Timezone"
	case "schedule.cron":
		return "Cron"
	case "schedule.once":
		return "Once"
	case "schedule.interval":
		return "Interval"
	case "schedule.rrule":
		return "RRule"
	case "schedule.start_time":
		return "Start"
	case "schedule.end_time":
		return "End"
	case "schedule.dst_gap":
		return "DstGap"
	case "schedule.dst_repeat":
		return "DstRepeat"
	case "schedule.calendar":
		return "Calendar"
	case "schedule.calendar_policy":
		return "CalPolicy"
	}
	if path == "schedule" || strings.HasPrefix(path, "schedule.") {
		// The schedule as a whole ("has no instant after now"): beside the
		// chosen kind's field.
		switch f.SchedKind {
		case "once":
			return "Once"
		case "interval":
			return "Interval"
		case "rrule":
			return "RRule"
		}
		return "Cron"
	}
	return ""
}

// schedulePosted are the schedule's form keys; an edit that does not post
// one keeps its value (keepPoliciesNotPosted).
func schedulePosted(f, was *form) map[string][2]*string {
	return map[string][2]*string{
		"schedule_kind": {&f.SchedKind, &was.SchedKind}, "once": {&f.Once, &was.Once}, "interval": {&f.Interval, &was.Interval},
		"rrule": {&f.RRule, &was.RRule}, "start_time": {&f.Start, &was.Start}, "end_time": {&f.End, &was.End},
		"dst_gap": {&f.DstGap, &was.DstGap}, "dst_repeat": {&f.DstRepeat, &was.DstRepeat},
		"calendar": {&f.Calendar, &was.Calendar}, "calendar_policy": {&f.CalPolicy, &was.CalPolicy},
	}
}

// calendarNames are the tenant's business calendars the form offers (the
// first 200, by name); none when the api has no calendars or does not
// answer: the field still takes a name, which the api checks.
func (c *Console) calendarNames(ctx context.Context, s *session) []string {
	resp, err := c.cals.ListCalendars(s.call(ctx), &sundialv1.ListCalendarsRequest{PageSize: 200})
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(resp.GetCalendars()))
	for _, cal := range resp.GetCalendars() {
		names = append(names, cal.GetName())
	}
	return names
}

// The create and edit form's folded sections (<details>) open when they
// hold a value or an error, so nothing set or refused is hidden; a new
// job's form shows only name, schedule, time zone, target, priority and
// labels.

func (f form) anyOf(values []string, fields ...string) bool {
	for _, v := range values {
		if v != "" {
			return true
		}
	}
	for _, k := range fields {
		if f.Errors[k] != "" {
			return true
		}
	}
	return false
}

// ScheduleMoreOpen: bounds, DST policies, calendar.
func (f form) ScheduleMoreOpen() bool {
	return f.anyOf([]string{f.Start, f.End, f.DstGap, f.DstRepeat, f.Calendar, f.CalPolicy},
		"Start", "End", "DstGap", "DstRepeat", "Calendar", "CalPolicy")
}

// RetryOpen: attempts and backoff.
func (f form) RetryOpen() bool {
	return f.anyOf([]string{f.MaxAttempts, f.Backoff, f.InitialDelay, f.MaxDelay}, "MaxAttempts", "Backoff", "InitialDelay", "MaxDelay")
}

// PoliciesOpen: misfire, overlap, timeout, jitter, callback.
func (f form) PoliciesOpen() bool {
	return f.anyOf([]string{f.Misfire, f.MisfireGrace, f.MaxCatchUp, f.Overlap, f.Timeout, f.Jitter, f.Callback},
		"Misfire", "MisfireGrace", "MaxCatchUp", "Overlap", "Timeout", "Jitter", "Callback")
}

// MoreOpen: payload and idempotency key.
func (f form) MoreOpen() bool {
	return f.anyOf([]string{f.Payload, f.IdempotencyKey}, "Payload", "IdempotencyKey")
}

// pickerValue is a one-off's instant as the date and time picker
// (datetime-local, to the second) takes it: a wall-clock time the form
// can read becomes 2026-12-01T09:00:00; anything else (an instant with
// an offset typed without the picker, text that was refused) is kept as
// typed, for the field's error to stand beside.
func pickerValue(text string) string {
	for _, l := range wallLayouts {
		if t, err := time.ParseInLocation(l, text, time.UTC); err == nil {
			return t.Format(localInput)
		}
	}
	return text
}
