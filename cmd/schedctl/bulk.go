package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// bulkOpts are the filter and safety flags of bulk pause/resume/delete.
type bulkOpts struct {
	status, name                  string
	labels                        kvFlag
	nextFireAfter, nextFireBefore string
	dryRun, yes                   bool
}

func (o *bulkOpts) register(fs *flag.FlagSet) {
	o.labels = kvFlag{}
	fs.StringVar(&o.status, "status", "", "only jobs with this status: active, paused, deleted, completed (default all but deleted)")
	fs.Var(o.labels, "label", "only jobs with this label key=value (repeatable; all must match)")
	fs.StringVar(&o.name, "name", "", "only jobs whose name contains this, ignoring case")
	fs.StringVar(&o.nextFireAfter, "next-fire-after", "", "only jobs whose next unstaged slot is at or after this: RFC 3339, or a duration from now (e.g. 1h)")
	fs.StringVar(&o.nextFireBefore, "next-fire-before", "", "only jobs whose next unstaged slot is before this: RFC 3339, or a duration from now")
	fs.BoolVar(&o.dryRun, "dry-run", false, "count the matching jobs and show the first 20; change nothing")
	fs.BoolVar(&o.yes, "yes", false, "make the change (without it the command counts, shows and stops)")
}

// parseFuture reads an RFC 3339 instant, or a duration meaning that long
// after now ("2h").
func parseFuture(flagName, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timestamppb.New(now.Add(d)), nil
	}
	return nil, usagef("--%s: want an RFC 3339 instant such as 2026-05-01T09:00:00Z, or a duration from now such as 2h; got %q", flagName, v)
}

// runBulk pauses, resumes or deletes every job the flags match through
// the api's BulkJobAction: it always counts first, and changes only with
// --yes, 1,000 jobs a call (each call under --timeout), until none are
// left, saying after each call how far it got.
func runBulk(action sundialv1.BulkAction, verb string) func(context.Context, *remote, *bulkOpts, []string) error {
	return func(ctx context.Context, r *remote, o *bulkOpts, args []string) error {
		if len(args) != 0 {
			return usagef("unexpected arguments %q (select jobs with --status, --label, --name, --next-fire-after, --next-fire-before)", args)
		}
		req := &sundialv1.BulkJobActionRequest{Action: action, Labels: o.labels, NameContains: o.name}
		if o.status != "" {
			v, ok := sundialv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(o.status)]
			if !ok {
				return usagef("--status: want active, paused, deleted or completed, got %q", o.status)
			}
			req.Status = sundialv1.JobStatus(v)
		}
		now := r.io.now()
		var err error
		if o.nextFireAfter != "" {
			if req.NextFireAfter, err = parseFuture("next-fire-after", o.nextFireAfter, now); err != nil {
				return err
			}
		}
		if o.nextFireBefore != "" {
			if req.NextFireBefore, err = parseFuture("next-fire-before", o.nextFireBefore, now); err != nil {
				return err
			}
		}

		req.DryRun = true
		cctx, cancel := r.call(ctx)
		count, err := r.client.BulkJobAction(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		if o.dryRun || !o.yes {
			if r.output == "json" {
				if err := r.printJSON(count); err != nil {
					return err
				}
			} else {
				n := fmt.Sprint(count.GetMatched())
				if count.GetCappedCount() {
					n = "more than " + n
				}
				fmt.Fprintf(r.io.Stdout, "%s job(s) match; the first %d:\n", n, len(count.GetSample()))
				for _, j := range count.GetSample() {
					fmt.Fprintf(r.io.Stdout, "  %s  %s  %s\n", j.GetId(), firing.JobStatusWord(j.GetStatus()), j.GetName())
				}
			}
			if o.dryRun || count.GetMatched() == 0 {
				return nil
			}
			return fmt.Errorf("nothing changed: add --yes to %s them", strings.ToLower(verb))
		}

		req.DryRun, req.Limit = false, 1000
		total := &sundialv1.BulkJobActionResponse{}
		for {
			cctx, cancel := r.call(ctx)
			resp, err := r.client.BulkJobAction(cctx, req)
			cancel()
			if err != nil {
				return fmt.Errorf("after %d job(s) gone through, %d changed (running the same command again carries on; jobs already %sd are left as they are): %w",
					total.GetMatched(), total.GetChanged(), strings.ToLower(verb), err)
			}
			total.Matched += resp.GetMatched()
			total.Changed += resp.GetChanged()
			total.Refused = append(total.Refused, resp.GetRefused()...)
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
			fmt.Fprintf(r.io.Stderr, "%sd %d of %d so far…\n", verb, total.GetChanged(), total.GetMatched())
		}
		if r.output == "json" {
			return r.printJSON(total)
		}
		fmt.Fprintf(r.io.Stdout, "%sd %d job(s); %d already so; %d refused\n", verb, total.GetChanged(),
			total.GetMatched()-total.GetChanged()-int64(len(total.GetRefused())), len(total.GetRefused()))
		for _, x := range total.GetRefused() {
			fmt.Fprintf(r.io.Stdout, "  refused %s  %s: %s\n", x.GetId(), x.GetName(), x.GetReason())
		}
		return nil
	}
}
