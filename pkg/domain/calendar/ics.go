package calendar

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// MaxICSBytes bounds an imported file.
const MaxICSBytes = 4 << 20

// maxEventDays bounds one event's span, so a typo in DTEND cannot turn a
// holiday into ten thousand.
const maxEventDays = 366

// ParseICS reads the holidays of an iCalendar (RFC 5545) file. What it
// takes: each VEVENT whose DTSTART is a date (VALUE=DATE, or a bare
// YYYYMMDD) is a holiday on every date from DTSTART up to DTEND (exclusive;
// or DTSTART plus a DURATION of whole days or weeks; one day without
// either), named by its SUMMARY. What it leaves out, listing each in
// skipped with the reason: events with a time of day (not all-day),
// recurring events (RRULE or RDATE; most holiday feeds list each year's
// dates instead) and cancelled ones. Lines may be folded (RFC 5545 3.1);
// other components (VTIMEZONE, VTODO) and properties are ignored. Two
// events on one date make one holiday with both names.
func ParseICS(text string) (holidays []*sundialv1.CalendarHoliday, skipped []string, err error) {
	if len(text) > MaxICSBytes {
		return nil, nil, fmt.Errorf("the file is %d bytes, at most %d allowed", len(text), MaxICSBytes)
	}
	lines := unfold(text)
	if len(lines) == 0 || !strings.EqualFold(strings.TrimSpace(lines[0]), "BEGIN:VCALENDAR") {
		return nil, nil, errors.New("not an iCalendar file: it must begin with BEGIN:VCALENDAR")
	}
	byDate := map[string][]string{}
	var ev map[string]prop
	depth := 0 // nesting inside a VEVENT (VALARM)
	for n, raw := range lines {
		name, p, ok := parseLine(raw)
		if !ok {
			continue
		}
		switch {
		case name == "BEGIN" && strings.EqualFold(p.value, "VEVENT") && ev == nil:
			ev = map[string]prop{}
		case name == "BEGIN" && ev != nil:
			depth++
		case name == "END" && ev != nil && depth > 0:
			depth--
		case name == "END" && strings.EqualFold(p.value, "VEVENT") && ev != nil:
			dates, why := eventDates(ev)
			if why != "" {
				skipped = append(skipped, fmt.Sprintf("event %q (line %d): %s", ev["SUMMARY"].text(), n+1, why))
			}
			for _, d := range dates {
				byDate[d] = append(byDate[d], ev["SUMMARY"].text())
			}
			ev = nil
		case ev != nil && depth == 0:
			if _, dup := ev[name]; !dup {
				ev[name] = p
			}
		}
	}
	dates := make([]string, 0, len(byDate))
	for d := range byDate {
		dates = append(dates, d)
	}
	sort.Strings(dates)
	if len(dates) > MaxHolidays {
		return nil, nil, fmt.Errorf("the file has %d holiday dates, at most %d allowed", len(dates), MaxHolidays)
	}
	for _, d := range dates {
		names := dedupe(byDate[d])
		name := strings.Join(names, "; ")
		if r := []rune(name); len(r) > MaxHolidayNameLen {
			name = string(r[:MaxHolidayNameLen])
		}
		holidays = append(holidays, &sundialv1.CalendarHoliday{Date: d, Name: name})
	}
	return holidays, skipped, nil
}

type prop struct {
	params map[string]string
	value  string
}

// text is a TEXT value unescaped (RFC 5545 3.3.11).
func (p prop) text() string {
	r := strings.NewReplacer(`\n`, " ", `\N`, " ", `\,`, ",", `\;`, ";", `\\`, `\`)
	return strings.TrimSpace(r.Replace(p.value))
}

func unfold(text string) []string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")) && len(out) > 0 {
			out[len(out)-1] += l[1:]
			continue
		}
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimRight(l, "\r"))
		}
	}
	return out
}

// parseLine splits "NAME;P1=V1;P2=V2:VALUE". Parameter values may be
// quoted and contain ':' or ';'.
func parseLine(l string) (string, prop, bool) {
	inQuote := false
	colon := -1
	for i, r := range l {
		if r == '"' {
			inQuote = !inQuote
		}
		if r == ':' && !inQuote {
			colon = i
			break
		}
	}
	if colon < 0 {
		return "", prop{}, false
	}
	head, value := l[:colon], l[colon+1:]
	parts := strings.Split(head, ";")
	p := prop{params: map[string]string{}, value: value}
	for _, kv := range parts[1:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			p.params[strings.ToUpper(k)] = strings.Trim(v, `"`)
		}
	}
	return strings.ToUpper(strings.TrimSpace(parts[0])), p, true
}

// eventDates are an event's holiday dates, or why it has none.
func eventDates(ev map[string]prop) ([]string, string) {
	if s, ok := ev["STATUS"]; ok && strings.EqualFold(s.value, "CANCELLED") {
		return nil, "cancelled"
	}
	if _, ok := ev["RRULE"]; ok {
		return nil, "recurring events (RRULE) are not supported: list each date as its own event"
	}
	if _, ok := ev["RDATE"]; ok {
		return nil, "recurring events (RDATE) are not supported: list each date as its own event"
	}
	st, ok := ev["DTSTART"]
	if !ok {
		return nil, "no DTSTART"
	}
	start, err := icsDate(st)
	if err != "" {
		return nil, "DTSTART " + err
	}
	end := start.AddDate(0, 0, 1)
	if e, ok := ev["DTEND"]; ok {
		if end, err = icsDate(e); err != "" {
			return nil, "DTEND " + err
		}
	} else if d, ok := ev["DURATION"]; ok {
		days, derr := durationDays(d.value)
		if derr != "" {
			return nil, "DURATION " + derr
		}
		end = start.AddDate(0, 0, days)
	}
	if !end.After(start) {
		// RFC 5545 says DTEND is exclusive; a feed that repeats DTSTART
		// means one day.
		end = start.AddDate(0, 0, 1)
	}
	if end.Sub(start) > maxEventDays*24*time.Hour {
		return nil, fmt.Sprintf("spans more than %d days", maxEventDays)
	}
	var out []string
	for d := start; d.Before(end); d = d.AddDate(0, 0, 1) {
		out = append(out, d.Format(time.DateOnly))
	}
	return out, ""
}

// icsDate reads a DATE value; a DATE-TIME is refused as a timed event.
func icsDate(p prop) (time.Time, string) {
	v := strings.TrimSpace(p.value)
	if strings.EqualFold(p.params["VALUE"], "DATE-TIME") || strings.Contains(v, "T") {
		return time.Time{}, fmt.Sprintf("%s has a time of day: only all-day events are holidays", v)
	}
	t, err := time.Parse("20060102", v)
	if err != nil {
		return time.Time{}, fmt.Sprintf("%q is not a date YYYYMMDD", v)
	}
	return t, ""
}

// durationDays reads "P1D", "P2W" (whole days or weeks only).
func durationDays(v string) (int, string) {
	v = strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(v), "+"))
	if !strings.HasPrefix(v, "P") || len(v) < 3 || strings.Contains(v, "T") {
		return 0, fmt.Sprintf("%q is not a whole number of days or weeks", v)
	}
	n, err := strconv.Atoi(v[1 : len(v)-1])
	if err != nil || n < 0 {
		return 0, fmt.Sprintf("%q is not a whole number of days or weeks", v)
	}
	switch v[len(v)-1] {
	case 'D':
		return n, ""
	case 'W':
		return 7 * n, ""
	}
	return 0, fmt.Sprintf("%q is not a whole number of days or weeks", v)
}

func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		found := false
		for _, o := range out {
			found = found || o == s
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}
