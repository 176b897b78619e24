package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func oneID(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want exactly one %s, got %d arguments", what, len(args))
	}
	return args[0], nil
}

type createOpts struct {
	job jobFlags
	key string
}

func (o *createOpts) register(fs *flag.FlagSet) {
	o.job.register(fs)
	fs.StringVar(&o.key, "idempotency-key", "", "retrying with the same key and the same job returns the job the first call created; the same key with a different job is refused (keys last the api's --idempotency-key-ttl, 24h by default)")
}

func runCreate(ctx context.Context, r *remote, o *createOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	job, _, err := o.job.build(os.Stdin)
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: job, IdempotencyKey: o.key})
	if err != nil {
		return err
	}
	return r.printJob(resp.GetJob())
}

func runGet(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	id, err := oneID(args, "JOB_ID")
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
	if err != nil {
		return err
	}
	return r.printJob(resp.GetJob())
}

type listOpts struct {
	status    string
	labels    kvFlag
	pageSize  int
	pageToken string
	all       bool
}

func (o *listOpts) register(fs *flag.FlagSet) {
	o.labels = kvFlag{}
	fs.StringVar(&o.status, "status", "", "only jobs with this status: active, paused, deleted, completed (default all but deleted)")
	fs.Var(o.labels, "label", "only jobs with this label key=value (repeatable; all must match)")
	fs.IntVar(&o.pageSize, "page-size", 100, "jobs per page (at most 1000)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page")
	fs.BoolVar(&o.all, "all", false, "follow every page")
}

func runList(ctx context.Context, r *remote, o *listOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	req := &sundialv1.ListJobsRequest{PageSize: int32(o.pageSize), PageToken: o.pageToken, Labels: o.labels}
	if o.status != "" {
		v, ok := sundialv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(o.status)]
		if !ok {
			return usagef("--status: want active, paused, deleted or completed, got %q", o.status)
		}
		req.Status = sundialv1.JobStatus(v)
	}
	var jobs []*sundialv1.Job
	next := ""
	for {
		cctx, cancel := r.call(ctx)
		resp, err := r.client.ListJobs(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		jobs = append(jobs, resp.GetJobs()...)
		next = resp.GetNextPageToken()
		if !o.all || next == "" {
			break
		}
		req.PageToken = next
	}
	return r.printJobList(jobs, next)
}

type updateOpts struct {
	job             jobFlags
	expectedVersion int64
}

func (o *updateOpts) register(fs *flag.FlagSet) {
	o.job.register(fs)
	registerExpectedVersion(fs, &o.expectedVersion, "update")
}

// registerExpectedVersion is the --expected-version flag of a change: the
// version the user last saw, so that a change someone made since is not
// silently overwritten (the api refuses with FailedPrecondition, naming
// the current version).
func registerExpectedVersion(fs *flag.FlagSet, v *int64, verb string) {
	fs.Int64Var(v, "expected-version", 0, "refuse to "+verb+" unless the job is at this version (as get or list showed it); 0: any version")
}

// versionOpts are the flags of pause, resume and delete.
type versionOpts struct{ expectedVersion int64 }

func runUpdate(ctx context.Context, r *remote, o *updateOpts, args []string) error {
	id, err := oneID(args, "JOB_ID")
	if err != nil {
		return err
	}
	job, paths, err := o.job.build(os.Stdin)
	if err != nil {
		return err
	}
	job.Id = id
	if o.job.file != "" {
		// The fields the file sets join the flags' paths; the server
		// reads an empty mask the same way, but flags must not hide them.
		paths = append(paths, populatedTopLevel(job)...)
	}
	if len(paths) == 0 {
		return usagef("nothing to change: give flags such as --cron or --url, or -f")
	}
	if o.expectedVersion < 0 {
		return usagef("--expected-version: must not be negative, got %d", o.expectedVersion)
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.UpdateJob(ctx, &sundialv1.UpdateJobRequest{Job: job, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
		ExpectedVersion: o.expectedVersion})
	if err != nil {
		return err
	}
	return r.printJob(resp.GetJob())
}

// populatedTopLevel lists the updatable top-level fields job sets.
func populatedTopLevel(job *sundialv1.Job) []string {
	var out []string
	m := job.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch fd.Name() {
		case "id", "tenant", "status", "version", "next_fire_time", "create_time", "update_time":
			continue
		}
		if m.Has(fd) {
			out = append(out, string(fd.Name()))
		}
	}
	return out
}

type jobCall func(ctx context.Context, r *remote, id string, expectedVersion int64) (*sundialv1.Job, error)

func pauseCall(ctx context.Context, r *remote, id string, expectedVersion int64) (*sundialv1.Job, error) {
	resp, err := r.client.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: id, ExpectedVersion: expectedVersion})
	return resp.GetJob(), err
}

func resumeCall(ctx context.Context, r *remote, id string, expectedVersion int64) (*sundialv1.Job, error) {
	resp, err := r.client.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: id, ExpectedVersion: expectedVersion})
	return resp.GetJob(), err
}

func deleteCall(ctx context.Context, r *remote, id string, expectedVersion int64) (*sundialv1.Job, error) {
	resp, err := r.client.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: id, ExpectedVersion: expectedVersion})
	return resp.GetJob(), err
}

// versionFlag registers --expected-version for the verb ("pause").
func versionFlag(verb string) func(*versionOpts, *flag.FlagSet) {
	return func(o *versionOpts, fs *flag.FlagSet) { registerExpectedVersion(fs, &o.expectedVersion, verb) }
}

// simple is a subcommand that takes a job id, calls once and reports the
// job's new state in one line.
func simple(verb string, call jobCall) func(context.Context, *remote, *versionOpts, []string) error {
	return func(ctx context.Context, r *remote, o *versionOpts, args []string) error {
		id, err := oneID(args, "JOB_ID")
		if err != nil {
			return err
		}
		if o.expectedVersion < 0 {
			return usagef("--expected-version: must not be negative, got %d", o.expectedVersion)
		}
		ctx, cancel := r.call(ctx)
		defer cancel()
		job, err := call(ctx, r, id, o.expectedVersion)
		if err != nil {
			return err
		}
		if r.output == "json" {
			return r.printJSON(job)
		}
		fmt.Fprintf(r.io.Stdout, "job %s %s: status %s, version %d, next fire %s\n",
			job.GetId(), verb, firing.JobStatusWord(job.GetStatus()), job.GetVersion(), instant(job.GetNextFireTime()))
		return nil
	}
}

func runTrigger(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	id, err := oneID(args, "JOB_ID")
	if err != nil {
		return err
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.TriggerJob(ctx, &sundialv1.TriggerJobRequest{Id: id})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	fmt.Fprintf(r.io.Stdout, "triggered job %s: execution %s at %s\n", id, resp.GetExecutionId(), instant(resp.GetScheduledTime()))
	return nil
}

func runCancel(ctx context.Context, r *remote, _ *noOpts, args []string) error {
	if len(args) != 2 {
		return usagef("want JOB_ID EXECUTION_ID, got %d arguments", len(args))
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: args[0], ExecutionId: args[1]})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	fmt.Fprintf(r.io.Stdout, "cancel of execution %s requested (it was %s); the ledger will record it CANCELLED by %s\n",
		resp.GetExecutionId(), firing.ExecutionStatusWord(resp.GetStatus()), resp.GetCancelledBy())
	return nil
}

type historyOpts struct {
	execution string
	pageSize  int
	pageToken string
}

func (o *historyOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.execution, "execution", "", "show every attempt of this execution instead")
	fs.IntVar(&o.pageSize, "page-size", 50, "attempts per page (at most 1000)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page")
}

func runHistory(ctx context.Context, r *remote, o *historyOpts, args []string) error {
	ctx, cancel := r.call(ctx)
	defer cancel()
	if o.execution != "" {
		if len(args) != 0 {
			return usagef("give either JOB_ID or --execution, not both")
		}
		resp, err := r.client.GetExecution(ctx, &sundialv1.GetExecutionRequest{ExecutionId: o.execution})
		if err != nil {
			return err
		}
		if r.output == "json" {
			return r.printJSON(resp)
		}
		return r.printAttempts(resp.GetAttempts(), "")
	}
	id, err := oneID(args, "JOB_ID")
	if err != nil {
		return err
	}
	resp, err := r.client.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: id, PageSize: int32(o.pageSize), PageToken: o.pageToken})
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	return r.printAttempts(resp.GetAttempts(), resp.GetNextPageToken())
}

type serverPreviewOpts struct {
	job   jobFlags
	count int
	from  string
}

func (o *serverPreviewOpts) register(fs *flag.FlagSet) {
	o.job.register(fs)
	fs.IntVar(&o.count, "n", 10, "how many instants")
	fs.StringVar(&o.from, "from", "", "RFC 3339 instant to start after (default now)")
}

func runServerPreview(ctx context.Context, r *remote, o *serverPreviewOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	job, _, err := o.job.build(os.Stdin)
	if err != nil {
		return err
	}
	if job.GetSchedule() == nil {
		return usagef("give a schedule: --cron, --once or --every (or -f)")
	}
	req := &sundialv1.PreviewScheduleRequest{Schedule: job.GetSchedule(), Count: int32(o.count), MaxRuns: job.GetMaxRuns()}
	if o.from != "" {
		t, err := time.Parse(time.RFC3339Nano, o.from)
		if err != nil {
			return usagef("--from: want an RFC 3339 instant, got %q", o.from)
		}
		req.From = timestamppb.New(t)
	}
	ctx, cancel := r.call(ctx)
	defer cancel()
	resp, err := r.client.PreviewSchedule(ctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(resp)
	}
	fmt.Fprintln(r.io.Stdout, resp.GetDescription())
	loc := time.UTC
	if tz := job.GetSchedule().GetTimezone(); tz != "" {
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	for _, t := range resp.GetTimes() {
		fmt.Fprintf(r.io.Stdout, "%s  %s\n", t.AsTime().UTC().Format(time.RFC3339), t.AsTime().In(loc).Format("Mon 2006-01-02 15:04:05 MST"))
	}
	if adj := resp.GetAdjustments(); len(adj) > 0 {
		heading := "calendar:"
		if len(job.GetSchedule().GetExclusions()) > 0 {
			heading = "skipped or moved:"
		}
		fmt.Fprintln(r.io.Stdout, heading)
		for _, a := range adj {
			to := "removed"
			if a.GetMovedTo() != nil {
				to = "-> " + a.GetMovedTo().AsTime().UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(r.io.Stdout, "  %s %s  %s\n", a.GetTime().AsTime().UTC().Format(time.RFC3339), to, a.GetReason())
		}
	}
	if l := resp.GetRunLimit(); l != "" {
		fmt.Fprintln(r.io.Stdout, l)
	}
	return nil
}
