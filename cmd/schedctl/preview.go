package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
)

// previewOpts are preview's flags.
type previewOpts struct {
	expr, rule, tz, from, start, end string
	count                            int
	maxRuns                          int64
	alsoCron, exclude                listFlag
	gap                              schedule.GapPolicy
	repeat                           schedule.RepeatPolicy
}

func (o *previewOpts) register(fs *flag.FlagSet, _ *env) {
	fs.StringVar(&o.expr, "cron", "", "schedule expression: 5 or 6 cron fields, or a macro such as @daily or \"@every 90m\" (quote it)")
	fs.StringVar(&o.rule, "rrule", "", `RFC 5545 recurrence rule instead of --cron, e.g. "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH" (quote it); DTSTART is --start, else --from`)
	fs.StringVar(&o.tz, "tz", "UTC", "IANA time zone the expression's wall clock is in")
	fs.StringVar(&o.from, "from", "", "print firings strictly after this RFC 3339 instant (default now)")
	fs.IntVar(&o.count, "count", 10, "how many firings to print")
	fs.TextVar(&o.gap, "dst-gap", schedule.GapShift, "wall times skipped by a spring-forward: SHIFT (fire at the end of the gap) or SKIP")
	fs.TextVar(&o.repeat, "dst-repeat", schedule.RepeatFirst, "wall times repeated by a fall-back: FIRST, LAST or BOTH")
	fs.StringVar(&o.start, "start", "", "optional RFC 3339 bound: no firing before it (also anchors @every and is the DTSTART of --rrule)")
	fs.StringVar(&o.end, "end", "", "optional RFC 3339 bound: no firing after it (inclusive)")
	fs.Var(&o.alsoCron, "also-cron", "also fire at cron `EXPR` (repeatable; same zone, policies and bounds; one firing per instant)")
	fs.Var(&o.exclude, "exclude", excludeUsage)
	fs.Int64Var(&o.maxRuns, "max-runs", 0, "stop after this many firings, as a job with max_runs does (0: no limit)")
}

// runPreview implements
//
//	schedctl preview --cron EXPR --tz ZONE --from RFC3339 --count N
//	    [--dst-gap SHIFT|SKIP] [--dst-repeat FIRST|LAST|BOTH] [--start RFC3339] [--end RFC3339]
//	    [--also-cron EXPR]... [--exclude SPEC]... [--max-runs N]
//
// printing the next N firings strictly after --from, one RFC 3339 UTC
// instant per line; on stderr, the instants an exclusion removed among
// them, and whether --max-runs ended the list. It needs no server: it runs the engine the prefetcher
// runs, so what it prints is what Sundial will fire.
func runPreview(_ context.Context, e *env, o *previewOpts, args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.io.Stderr, "schedctl preview: "+format+"\n", a...)
		return 2
	}
	if len(args) > 0 {
		// The usual cause is an unquoted expression: --cron 0 9 * * *.
		return fail("unexpected arguments %q; quote the expression, as in --cron '0 9 * * *'", strings.Join(args, " "))
	}
	switch {
	case o.expr == "" && o.rule == "":
		return fail("--cron or --rrule is required")
	case o.expr != "" && o.rule != "":
		return fail("give only one of --cron and --rrule")
	}
	if o.count < 1 {
		return fail("--count must be at least 1, got %d", o.count)
	}
	if o.maxRuns < 0 {
		return fail("--max-runs must not be negative, got %d", o.maxRuns)
	}
	excl, err := exclusionsOf(o.exclude)
	if err != nil {
		return fail("%v", err)
	}
	loc, err := time.LoadLocation(o.tz)
	if err != nil {
		return fail("--tz: unknown time zone %q (want an IANA name such as Europe/London)", o.tz)
	}
	opts := schedule.Options{Location: loc, Gap: o.gap, Repeat: o.repeat}
	instants := []struct {
		flag string
		val  string
		dst  *time.Time
	}{{"--from", o.from, nil}, {"--start", o.start, &opts.Start}, {"--end", o.end, &opts.End}}
	after := e.now()
	for _, in := range instants {
		if in.val == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, in.val)
		if err != nil {
			return fail("%s: %q is not an RFC 3339 instant such as 2026-03-08T00:00:00Z", in.flag, in.val)
		}
		if in.dst == nil {
			after = t
		} else {
			*in.dst = t
		}
	}
	var s schedule.Schedule
	if o.rule != "" {
		// As the api does: DTSTART is the start bound, or else the
		// instant the job would be created at, here --from.
		dtstart := opts.Start
		if dtstart.IsZero() {
			dtstart = after
		}
		s, err = schedule.ParseRRule(o.rule, dtstart, opts)
	} else {
		s, err = schedule.Parse(o.expr, opts)
	}
	if err != nil {
		return fail("%v", err)
	}
	if s, err = offlineSchedule(s, o.alsoCron, excl, opts); err != nil {
		return fail("%v", err)
	}
	count := o.count
	if o.maxRuns > 0 && int64(count) >= o.maxRuns {
		count = int(o.maxRuns)
	}

	w := bufio.NewWriter(e.io.Stdout)
	n := 0
	var last time.Time
	for t := range schedule.Preview(s, after, count) {
		w.WriteString(t.UTC().Format(time.RFC3339Nano))
		w.WriteByte('\n')
		n, last = n+1, t
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(e.io.Stderr, "schedctl preview: %v\n", err)
		return 1
	}
	if n > 0 {
		// What the exclusions removed among them, with the reason.
		for _, a := range schedule.Notes(s, after, last, 1000) {
			fmt.Fprintf(e.io.Stderr, "skipped %s  %s\n", a.From.UTC().Format(time.RFC3339Nano), a.Reason)
		}
	}
	if o.maxRuns > 0 && int64(n) == o.maxRuns {
		fmt.Fprintf(e.io.Stderr, "schedctl preview: %s\n", jobspec.RunLimitNote(o.maxRuns))
		return 0
	}
	if n < o.count {
		// Not an error (an End bound is meant to end things), but say so,
		// on stderr where it does not disturb the list.
		fmt.Fprintf(e.io.Stderr, "schedctl preview: the schedule has no more firings after the %d shown\n", n)
	}
	return 0
}
