package main

// The calendar commands: a tenant's business calendars (CalendarService).

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// holidayFlag is a repeatable DATE or DATE=NAME flag, in order.
type holidayFlag []*sundialv1.CalendarHoliday

func (h *holidayFlag) String() string {
	if h == nil {
		return ""
	}
	parts := make([]string, 0, len(*h))
	for _, x := range *h {
		parts = append(parts, x.GetDate())
	}
	return strings.Join(parts, ",")
}

func (h *holidayFlag) Set(s string) error {
	date, name, _ := strings.Cut(s, "=")
	if strings.TrimSpace(date) == "" {
		return fmt.Errorf("want YYYY-MM-DD or YYYY-MM-DD=NAME, got %q", s)
	}
	*h = append(*h, &sundialv1.CalendarHoliday{Date: strings.TrimSpace(date), Name: name})
	return nil
}

// weekdayWords are --weekend's words, Monday first.
var weekdayWords = []string{"MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"}

// parseWeekend reads --weekend: "SAT,SUN", "FRI,SAT" or "none".
func parseWeekend(s string) (*sundialv1.Weekend, error) {
	w := &sundialv1.Weekend{}
	if strings.EqualFold(strings.TrimSpace(s), "none") {
		return w, nil
	}
	for _, part := range strings.Split(s, ",") {
		p := strings.ToUpper(strings.TrimSpace(part))
		found := false
		for i, word := range weekdayWords {
			if len(p) >= 3 && strings.HasPrefix(sundialv1.Weekday_name[int32(i+1)], "WEEKDAY_"+p) || p == word {
				w.Days = append(w.Days, sundialv1.Weekday(i+1))
				found = true
				break
			}
		}
		if !found {
			return nil, usagef("--weekend: %q is not a day (want e.g. SAT,SUN, FRI,SAT or none)", part)
		}
	}
	return w, nil
}

func weekendText(w *sundialv1.Weekend) string {
	if w == nil {
		return "SAT,SUN (default)"
	}
	if len(w.GetDays()) == 0 {
		return "none"
	}
	var out []string
	for _, d := range w.GetDays() {
		if d >= 1 && int(d) <= len(weekdayWords) {
			out = append(out, weekdayWords[d-1])
		}
	}
	return strings.Join(out, ",")
}

type calendarOpts struct {
	holidays    holidayFlag
	weekend     string
	description string
	fs          *flag.FlagSet
}

func (o *calendarOpts) register(fs *flag.FlagSet) {
	o.fs = fs
	fs.Var(&o.holidays, "holiday", "a holiday, YYYY-MM-DD or YYYY-MM-DD=NAME (repeatable)")
	fs.StringVar(&o.weekend, "weekend", "", "the weekend days, e.g. SAT,SUN (the default), FRI,SAT, or none")
	fs.StringVar(&o.description, "description", "", "what the calendar is for")
}

func (o *calendarOpts) given(name string) bool {
	seen := false
	o.fs.Visit(func(f *flag.Flag) { seen = seen || f.Name == name })
	return seen
}

func (o *calendarOpts) build(name string) (*sundialv1.Calendar, error) {
	c := &sundialv1.Calendar{Name: name, Description: o.description, Holidays: o.holidays}
	if o.given("weekend") {
		w, err := parseWeekend(o.weekend)
		if err != nil {
			return nil, err
		}
		c.Weekend = w
	}
	return c, nil
}

func runCalendarCreate(ctx context.Context, r *remote, o *calendarOpts, args []string) error {
	name, err := oneID(args, "NAME")
	if err != nil {
		return err
	}
	c, err := o.build(name)
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.cals.CreateCalendar(ctx, &sundialv1.CreateCalendarRequest{Calendar: c})
	if err != nil {
		return err
	}
	return r.printCalendar(resp.GetCalendar())
}

type calendarUpdateOpts struct {
	calendarOpts
	version int64
}

func (o *calendarUpdateOpts) register(fs *flag.FlagSet) {
	o.calendarOpts.register(fs)
	fs.Int64Var(&o.version, "expected-version", 0, "refuse the update unless the calendar is at this version")
}

func runCalendarUpdate(ctx context.Context, r *remote, o *calendarUpdateOpts, args []string) error {
	name, err := oneID(args, "NAME")
	if err != nil {
		return err
	}
	c, err := o.build(name)
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.cals.UpdateCalendar(ctx, &sundialv1.UpdateCalendarRequest{Calendar: c, ExpectedVersion: o.version})
	if err != nil {
		return err
	}
	return r.printCalendar(resp.GetCalendar())
}

func runCalendarShow(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	name, err := oneID(args, "NAME")
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.cals.GetCalendar(ctx, &sundialv1.GetCalendarRequest{Name: name})
	if err != nil {
		return err
	}
	return r.printCalendar(resp.GetCalendar())
}

func runCalendarDelete(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	name, err := oneID(args, "NAME")
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cals.DeleteCalendar(ctx, &sundialv1.DeleteCalendarRequest{Name: name}); err != nil {
		return err
	}
	fmt.Fprintf(r.io.Stdout, "calendar %s deleted\n", name)
	return nil
}

func runCalendarList(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	var all []*sundialv1.Calendar
	tok := ""
	for {
		cctx, cancel := r.call(ctx)
		resp, err := r.cals.ListCalendars(cctx, &sundialv1.ListCalendarsRequest{PageSize: 1000, PageToken: tok})
		cancel()
		if err != nil {
			return err
		}
		all = append(all, resp.GetCalendars()...)
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	if r.output == "json" {
		return r.printJSON(&sundialv1.ListCalendarsResponse{Calendars: all})
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLIDAYS\tFIRST\tLAST\tWEEKEND\tVERSION\tDESCRIPTION")
	for _, c := range all {
		first, last := "-", "-"
		if hs := c.GetHolidays(); len(hs) > 0 {
			first, last = hs[0].GetDate(), hs[len(hs)-1].GetDate()
			for _, h := range hs {
				first, last = min(first, h.GetDate()), max(last, h.GetDate())
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", c.GetName(), len(c.GetHolidays()), first, last,
			weekendText(c.GetWeekend()), c.GetVersion(), orDash(truncate(c.GetDescription(), 40)))
	}
	return tw.Flush()
}

type calendarImportOpts struct {
	replace     bool
	weekend     string
	description string
}

func (o *calendarImportOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.replace, "replace", false, "replace the holidays of an existing calendar (otherwise it must not exist)")
	fs.StringVar(&o.weekend, "weekend", "", "the weekend days, e.g. SAT,SUN (the default), FRI,SAT, or none")
	fs.StringVar(&o.description, "description", "", "what the calendar is for")
}

func runCalendarImport(ctx context.Context, r *remote, o *calendarImportOpts, args []string) error {
	if len(args) != 2 {
		return usagef("want NAME and FILE.ics, got %d arguments", len(args))
	}
	b, err := os.ReadFile(args[1])
	if err != nil {
		return usagef("%v", err)
	}
	req := &sundialv1.ImportCalendarRequest{Name: args[0], Ics: string(b), Replace: o.replace, Description: o.description}
	if o.weekend != "" {
		if req.Weekend, err = parseWeekend(o.weekend); err != nil {
			return err
		}
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.cals.ImportCalendar(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	for _, s := range resp.GetSkipped() {
		fmt.Fprintf(r.io.Stderr, "skipped %s\n", s)
	}
	return r.printCalendar(resp.GetCalendar())
}

func (r *remote) printCalendar(c *sundialv1.Calendar) error {
	if r.output == "json" {
		return r.printJSON(c)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", c.GetName())
	fmt.Fprintf(tw, "description:\t%s\n", orDash(c.GetDescription()))
	fmt.Fprintf(tw, "weekend:\t%s\n", weekendText(c.GetWeekend()))
	fmt.Fprintf(tw, "version:\t%d\n", c.GetVersion())
	fmt.Fprintf(tw, "updated:\t%s\n", instant(c.GetUpdateTime()))
	fmt.Fprintf(tw, "holidays:\t%d\n", len(c.GetHolidays()))
	for _, h := range c.GetHolidays() {
		fmt.Fprintf(tw, "  %s\t%s\n", h.GetDate(), h.GetName())
	}
	return tw.Flush()
}

// calendarPolicyWords are --calendar-policy's values.
func calendarPolicyWords() []string {
	return enumWords(sundialv1.CalendarPolicy_value, "CALENDAR_POLICY_", func(s string) string { return s })
}
