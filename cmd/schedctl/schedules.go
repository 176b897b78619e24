package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, "; ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// excludeUsage is the --exclude flags' help.
const excludeUsage = "do not fire in the wall-clock stretch `SPEC` (repeatable): space-separated parts, any of " +
	`HH:MM-HH:MM (a window each day; "22:00-06:00" runs past midnight), weekdays MON,TUE,... (only on those days), ` +
	`YYYY-MM-DD..YYYY-MM-DD or one date YYYY-MM-DD (only then; either side of ".." may be empty), and #NOTE (the reason ` +
	`a preview shows); without a window, whole days. E.g. "02:00-04:00", "SAT,SUN", "2026-12-24..2026-12-26 #freeze"`

// parseExclusion reads one --exclude value. It checks the syntax only;
// the api (or, offline, jobspec) checks the values, naming the field.
func parseExclusion(v string) (*sundialv1.Exclusion, error) {
	x := &sundialv1.Exclusion{}
	text := v
	if i := strings.Index(v, "#"); i >= 0 {
		x.Note = strings.TrimSpace(v[i+1:])
		text = v[:i]
	}
	parts := strings.Fields(text)
	if len(parts) == 0 {
		return nil, fmt.Errorf("%q: give a window HH:MM-HH:MM, weekdays or dates", v)
	}
	for _, p := range parts {
		switch {
		case strings.Contains(p, ".."):
			from, to, _ := strings.Cut(p, "..")
			x.StartDate, x.EndDate = from, to
		case len(p) == len("2006-01-02") && strings.Count(p, "-") == 2:
			x.StartDate, x.EndDate = p, p
		case strings.Contains(p, ":"):
			from, to, ok := strings.Cut(p, "-")
			if !ok {
				return nil, fmt.Errorf("%q: a window is HH:MM-HH:MM, got %q", v, p)
			}
			x.Start, x.End = from, to
		default:
			for _, w := range strings.Split(p, ",") {
				i := slices.Index(weekdayWords, strings.ToUpper(strings.TrimSpace(w)))
				if i < 0 {
					return nil, fmt.Errorf("%q: %q is not a window, a date or a weekday MON..SUN", v, w)
				}
				x.Weekdays = append(x.Weekdays, sundialv1.Weekday(i+1))
			}
		}
	}
	return x, nil
}

// exclusionsOf parses every --exclude value.
func exclusionsOf(vs []string) ([]*sundialv1.Exclusion, error) {
	out := make([]*sundialv1.Exclusion, 0, len(vs))
	for _, v := range vs {
		x, err := parseExclusion(v)
		if err != nil {
			return nil, usagef("--exclude %v", err)
		}
		out = append(out, x)
	}
	return out, nil
}

// offlineSchedule is what the offline preview evaluates: the primary, the
// --also-cron schedules (same zone, policies and bounds) and the
// exclusions, built as the api and the prefetcher build a job's
// (jobspec.Exclusions, schedule.NewUnion, schedule.NewExcluded).
func offlineSchedule(primary schedule.Schedule, also []string, excl []*sundialv1.Exclusion, opts schedule.Options) (schedule.Schedule, error) {
	members := []schedule.Schedule{primary}
	for _, expr := range also {
		s, err := schedule.Parse(expr, opts)
		if err != nil {
			return nil, fmt.Errorf("--also-cron %q: %w", expr, err)
		}
		members = append(members, s)
	}
	u, err := schedule.NewUnion(members...)
	if err != nil {
		return nil, err
	}
	xs, err := jobspec.Exclusions(&sundialv1.Schedule{Exclusions: excl})
	if err != nil {
		return nil, err
	}
	return schedule.NewExcluded(u, xs, opts.Location)
}

// exclusionText is an exclusion as --exclude reads it.
func exclusionText(x *sundialv1.Exclusion) string {
	var parts []string
	if x.GetStart() != "" || x.GetEnd() != "" {
		parts = append(parts, x.GetStart()+"-"+x.GetEnd())
	}
	var days []string
	for _, d := range x.GetWeekdays() {
		if d >= sundialv1.Weekday_WEEKDAY_MONDAY && d <= sundialv1.Weekday_WEEKDAY_SUNDAY {
			days = append(days, weekdayWords[d-1])
		}
	}
	if len(days) > 0 {
		parts = append(parts, strings.Join(days, ","))
	}
	switch from, to := x.GetStartDate(), x.GetEndDate(); {
	case from != "" && from == to:
		parts = append(parts, from)
	case from != "" || to != "":
		parts = append(parts, from+".."+to)
	}
	if len(parts) == 0 {
		parts = append(parts, "every day")
	}
	if n := x.GetNote(); n != "" {
		parts = append(parts, "#"+n)
	}
	return strings.Join(parts, " ")
}
