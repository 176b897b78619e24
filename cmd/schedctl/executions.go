package main

// schedctl executions: the tenant's executions across its jobs
// (ListTenantExecutions). Its row is in commands.go.

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

type executionsOpts struct {
	since, until string
	statuses     []string
	pageSize     int
	pageToken    string
}

func (o *executionsOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.since, "since", "", "only slots at or after: RFC 3339, or a duration ago (e.g. 6h); default 24 hours before --until")
	fs.StringVar(&o.until, "until", "", "only slots before: RFC 3339, or a duration ago; default an hour from now (at most 31 days after --since)")
	fs.Func("status", "only attempts of this status (repeat, or comma-separate, for several): "+strings.Join(executionStatusWords(), ", "), func(v string) error {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.statuses = append(o.statuses, s)
			}
		}
		return nil
	})
	fs.IntVar(&o.pageSize, "page-size", 50, "attempts per page (at most 1000; a page may hold fewer, with a token to go on)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page (its range and statuses)")
}

func executionStatusWords() []string {
	return enumWords(sundialv1.ExecutionStatus_value, "EXECUTION_STATUS_", strings.ToLower)
}

// request builds the call; a bad flag is a usage error naming it.
func (o *executionsOpts) request(now time.Time) (*sundialv1.ListTenantExecutionsRequest, error) {
	req := &sundialv1.ListTenantExecutionsRequest{PageSize: int32(o.pageSize), PageToken: o.pageToken}
	var err error
	if o.since != "" {
		if req.StartTime, err = parseInstant("since", o.since, now); err != nil {
			return nil, err
		}
	}
	if o.until != "" {
		if req.EndTime, err = parseInstant("until", o.until, now); err != nil {
			return nil, err
		}
	}
	for _, s := range o.statuses {
		v, ok := sundialv1.ExecutionStatus_value["EXECUTION_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return nil, usagef("--status: %q is not one of %s", s, strings.Join(executionStatusWords(), ", "))
		}
		req.Statuses = append(req.Statuses, sundialv1.ExecutionStatus(v))
	}
	return req, nil
}

func runExecutions(ctx context.Context, r *remote, o *executionsOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	req, err := o.request(time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.ListTenantExecutions(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED\tJOB\tEXECUTION\tATTEMPT\tSTATUS\tDURATION\tHTTP\tDETAIL")
	for _, a := range resp.GetAttempts() {
		httpStatus := "-"
		if a.GetHttpStatus() != 0 {
			httpStatus = fmt.Sprint(a.GetHttpStatus())
		}
		detail := a.GetError()
		if detail == "" {
			detail = a.GetReason()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", instant(a.GetScheduledTime()), a.GetJobId(), a.GetExecutionId(), a.GetAttempt(),
			enumWord(a.GetStatus().String(), "EXECUTION_STATUS_"), dur(a.GetDuration()), httpStatus, orDash(truncate(detail, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next := resp.GetNextPageToken(); next != "" {
		fmt.Fprintf(r.io.Stderr, "more (older, or filtered out of this page): --page-token %s\n", next)
	}
	return nil
}
