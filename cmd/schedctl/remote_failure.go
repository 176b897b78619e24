package main

// The failure and lifecycle subcommands: dead letters (dlq list, show,
// redrive), backfill and the audit trail. Their rows are in commands.go.

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// parseInstant reads an RFC 3339 instant, or a duration meaning that long
// before now ("24h", "90m").
func parseInstant(flagName, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timestamppb.New(now.Add(-d)), nil
	}
	return nil, usagef("--%s: want an RFC 3339 instant such as 2026-05-01T09:00:00Z, or a duration ago such as 24h; got %q", flagName, v)
}

// dlqFilterFlags are the filter flags of dlq list and dlq redrive.
type dlqFilterFlags struct {
	fs                       *flag.FlagSet
	job, since, until, class string
	includeRedriven          bool
}

func (f *dlqFilterFlags) register(fs *flag.FlagSet, listing bool) {
	f.fs = fs
	fs.StringVar(&f.job, "job", "", "only this job's dead letters")
	fs.StringVar(&f.since, "since", "", "only those that died at or after: RFC 3339, or a duration ago (e.g. 24h)")
	fs.StringVar(&f.until, "until", "", "only those that died before: RFC 3339, or a duration ago")
	fs.StringVar(&f.class, "class", "", "only this error class (http_5xx, http_4xx, http_429, timeout, connection, circuit_open, address_refused, poison, kafka, secret)")
	if listing {
		fs.BoolVar(&f.includeRedriven, "include-redriven", false, "also list dead letters already re-driven")
	}
}

// build returns the filter, or nil when no filter flag was given.
func (f *dlqFilterFlags) build(now time.Time) (*sundialv1.DeadLetterFilter, error) {
	given := false
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "job", "since", "until", "class", "include-redriven":
			given = true
		}
	})
	if !given {
		return nil, nil
	}
	out := &sundialv1.DeadLetterFilter{JobId: f.job, ErrorClass: f.class, IncludeRedriven: f.includeRedriven}
	var err error
	if f.since != "" {
		if out.Since, err = parseInstant("since", f.since, now); err != nil {
			return nil, err
		}
	}
	if f.until != "" {
		if out.Until, err = parseInstant("until", f.until, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type backfillOpts struct {
	from, to string
	dryRun   bool
	rate     float64
	maxSlots int
}

func (o *backfillOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.from, "from", "", "first instant of the range: RFC 3339, or a duration meaning that long ago (e.g. 6h)")
	fs.StringVar(&o.to, "to", "", "last instant of the range (inclusive), not in the future: RFC 3339 or a duration ago")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list the slots; stage nothing")
	fs.Float64Var(&o.rate, "rate", 0, "firings per second (default 10)")
	fs.IntVar(&o.maxSlots, "max-slots", 0, "refuse a range with more slots than this (default 10000, at most 100000)")
}

func runBackfill(ctx context.Context, r *remote, o *backfillOpts, args []string) error {
	id, err := oneID(args, "JOB_ID")
	if err != nil {
		return err
	}
	if o.from == "" || o.to == "" {
		return usagef("give the range: --from and --to")
	}
	now := r.io.now()
	req := &sundialv1.BackfillJobRequest{Id: id, DryRun: o.dryRun, RatePerSecond: o.rate, MaxSlots: int32(o.maxSlots)}
	if req.StartTime, err = parseInstant("from", o.from, now); err != nil {
		return err
	}
	if req.EndTime, err = parseInstant("to", o.to, now); err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.BackfillJob(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	if resp.GetDryRun() {
		tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLOT\tEXECUTION")
		for i, s := range resp.GetSlots() {
			fmt.Fprintf(tw, "%s\t%s\n", instant(s), resp.GetExecutionIds()[i])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(r.io.Stderr, "dry run: %d slot(s) would be fired, the last at %s; nothing staged\n", resp.GetCount(), instant(resp.GetLastReleaseTime()))
		return nil
	}
	if resp.GetCount() == 0 {
		fmt.Fprintf(r.io.Stdout, "backfill of job %s: nothing staged (no slot in range, or every slot already staged)\n", id)
		return nil
	}
	slots := resp.GetSlots()
	fmt.Fprintf(r.io.Stdout, "backfill of job %s: %d firing(s) staged for slots %s .. %s, the last released at %s\n",
		id, resp.GetCount(), instant(slots[0]), instant(slots[len(slots)-1]), instant(resp.GetLastReleaseTime()))
	return nil
}

type dlqListOpts struct {
	filter    dlqFilterFlags
	pageSize  int
	pageToken string
	all       bool
}

func (o *dlqListOpts) register(fs *flag.FlagSet) {
	o.filter.register(fs, true)
	fs.IntVar(&o.pageSize, "page-size", 100, "dead letters per page (at most 1000)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page")
	fs.BoolVar(&o.all, "all", false, "follow every page")
}

func runDLQList(ctx context.Context, r *remote, o *dlqListOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	filter, err := o.filter.build(r.io.now())
	if err != nil {
		return err
	}
	req := &sundialv1.ListDeadLettersRequest{Filter: filter, PageSize: int32(o.pageSize), PageToken: o.pageToken}
	var dls []*sundialv1.DeadLetter
	next := ""
	for {
		cctx, cancel := r.call(ctx)
		resp, err := r.dlq.ListDeadLetters(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		dls = append(dls, resp.GetDeadLetters()...)
		next = resp.GetNextPageToken()
		if !o.all || next == "" {
			break
		}
		req.PageToken = next
	}
	if r.output == "json" {
		return r.printJSON(&sundialv1.ListDeadLettersResponse{DeadLetters: dls, NextPageToken: next})
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEAD AT\tEXECUTION\tJOB\tSCHEDULED\tATTEMPTS\tCLASS\tHTTP\tREDRIVEN\tERROR")
	for _, d := range dls {
		f := d.GetFiring()
		httpStatus := "-"
		if d.GetHttpStatus() != 0 {
			httpStatus = fmt.Sprint(d.GetHttpStatus())
		}
		redriven := "-"
		if d.GetRedriveCount() > 0 {
			redriven = fmt.Sprintf("%dx, %s", d.GetRedriveCount(), instant(d.GetRedriveTime()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", instant(d.GetDeadTime()), f.GetExecutionId(), f.GetJobId(),
			instant(f.GetScheduledTime()), d.GetAttempts(), orDash(d.GetErrorClass()), httpStatus, redriven, orDash(truncate(d.GetLastError(), 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(r.io.Stderr, "more dead letters: --page-token %s (or --all)\n", next)
	}
	return nil
}

func runDLQShow(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	id, err := oneID(args, "EXECUTION_ID")
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.dlq.GetDeadLetter(ctx, &sundialv1.GetDeadLetterRequest{ExecutionId: id})
	if err != nil {
		return err
	}
	d := resp.GetDeadLetter()
	if r.output == "json" {
		return r.printJSON(d)
	}
	f := d.GetFiring()
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Execution", f.GetExecutionId())
	row("Job", fmt.Sprintf("%s (version %d)", f.GetJobId(), f.GetJobVersion()))
	row("Scheduled", instant(f.GetScheduledTime()))
	row("Origin", enumWord(f.GetOrigin().String(), "FIRING_ORIGIN_"))
	row("Died", instant(d.GetDeadTime()))
	row("Attempts", fmt.Sprintf("%d (last attempt %d of the round from %d)", d.GetAttempts(), f.GetAttempt(), max(f.GetFirstAttempt(), 1)))
	row("Error class", orDash(d.GetErrorClass()))
	if d.GetHttpStatus() != 0 {
		row("HTTP status", fmt.Sprint(d.GetHttpStatus()))
	}
	row("Last error", orDash(strings.ReplaceAll(d.GetLastError(), "\n", " ")))
	row("Target", targetText(f.GetTarget()))
	if h := f.GetTarget().GetHttp().GetHeaders(); len(h) > 0 {
		row("Headers", kvText(h))
	}
	if f.GetCatchUp() {
		row("Catch-up", "yes")
	}
	redriven := "never"
	if d.GetRedriveCount() > 0 {
		redriven = fmt.Sprintf("%d time(s), last at %s", d.GetRedriveCount(), instant(d.GetRedriveTime()))
	}
	row("Re-driven", redriven)
	return tw.Flush()
}

type dlqRedriveOpts struct {
	filter dlqFilterFlags
	all    bool
	dryRun bool
	rate   float64
	limit  int
}

func (o *dlqRedriveOpts) register(fs *flag.FlagSet) {
	o.filter.register(fs, false)
	fs.BoolVar(&o.all, "all", false, "select every dead letter not yet re-driven (with no filter flags or ids)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list what would be re-driven; change nothing")
	fs.Float64Var(&o.rate, "rate", 0, "re-driven firings per second (default 10)")
	fs.IntVar(&o.limit, "limit", 0, "re-drive at most this many, oldest first (default 1000, at most 100000)")
}

func runDLQRedrive(ctx context.Context, r *remote, o *dlqRedriveOpts, args []string) error {
	filter, err := o.filter.build(r.io.now())
	if err != nil {
		return err
	}
	req := &sundialv1.RedriveDeadLettersRequest{ExecutionIds: args, DryRun: o.dryRun, RatePerSecond: o.rate, Limit: int32(o.limit)}
	switch {
	case len(args) > 0 && (filter != nil || o.all):
		return usagef("give execution ids or a filter (--job, --since, --until, --class, --all), not both")
	case len(args) > 0:
	case filter != nil && o.all:
		return usagef("--all selects every dead letter; drop it, or the filter flags")
	case filter != nil:
		req.Filter = filter
	case o.all:
		req.Filter = &sundialv1.DeadLetterFilter{}
	default:
		return usagef("say what to re-drive: execution ids, filter flags (--job, --since, --until, --class), or --all")
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.dlq.RedriveDeadLetters(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	for _, id := range resp.GetExecutionIds() {
		fmt.Fprintln(r.io.Stdout, id)
	}
	switch {
	case resp.GetDryRun():
		fmt.Fprintf(r.io.Stderr, "dry run: %d dead letter(s) would be re-driven, the last released at %s; nothing changed\n",
			resp.GetCount(), instant(resp.GetLastReleaseTime()))
	case resp.GetCount() == 0:
		fmt.Fprintln(r.io.Stderr, "nothing re-driven (no dead letter matched, or each is already re-driven and staged)")
	default:
		fmt.Fprintf(r.io.Stderr, "re-drove %d dead letter(s), the last released at %s\n", resp.GetCount(), instant(resp.GetLastReleaseTime()))
	}
	return nil
}
