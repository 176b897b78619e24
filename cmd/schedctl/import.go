package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// importChunk is how many jobs one CreateJobs call of an import carries:
// the api's most (server.MaxCreateJobs).
const importChunk = 1000

// importOpts are schedctl import's flags.
type importOpts struct {
	format, targetTmpl, topicTmpl, method string
	labels                                kvFlag
	dryRun, perItem                       bool
	chunk                                 int
}

func (o *importOpts) register(fs *flag.FlagSet) {
	o.labels = kvFlag{}
	fs.StringVar(&o.format, "format", "auto", "crontab, cronjob (Kubernetes CronJob YAML) or auto (by the file's content)")
	fs.StringVar(&o.targetTmpl, "target-template", "", "the HTTP URL each job fires, a Go template of the line: {{.Name}}, {{.Command}}, {{.Schedule}}, {{.TimeZone}}, {{.Env.VAR}}, {{.Namespace}}, {{.Image}}, {{.File}}, {{.Line}}; escape with {{urlquery .Command}}")
	fs.StringVar(&o.topicTmpl, "kafka-topic-template", "", "instead of --target-template: the Kafka topic each job's records go to, a template like it (the topic must exist)")
	fs.StringVar(&o.method, "method", "", "the HTTP method of --target-template's requests (default POST)")
	fs.Var(o.labels, "label", "a label key=value every imported job gets (repeatable)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list the jobs the files would create and send nothing (needs no api or token)")
	fs.BoolVar(&o.perItem, "per-item", false, "create the jobs the api accepts and list the refused ones (default: a call with a refused job creates none of its jobs)")
	fs.IntVar(&o.chunk, "chunk", importChunk, "jobs per CreateJobs call, at most 1000")
}

// importCmd is schedctl import's runner: a gRPC command whose --dry-run
// works offline, so it connects only when it sends.
type importCmd struct{}

func (importCmd) remote() bool { return true }

func (importCmd) bind(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
	cf := &connFlags{}
	cf.register(fs, e.io)
	o := &importOpts{}
	o.register(fs)
	return func(ctx context.Context, args []string) int {
		name := fs.Name()
		items, err := readImports(e.io, o, args)
		if errors.Is(err, errUsage) {
			fmt.Fprintf(e.io.Stderr, "%s: %v\n", name, err)
			fs.Usage()
			return 2
		}
		if err != nil {
			fmt.Fprintf(e.io.Stderr, "%s: %v\n", name, err)
			return 1
		}
		if o.dryRun {
			printImportPlan(e.io, items)
			return 0
		}
		return runRemote(ctx, e.io, fs, cf, func(ctx context.Context, r *remote) error { return sendImports(ctx, r, o, items) })
	}
}

// readImports parses every file; all the errors of all the files are
// reported (one per line, file:line first), and any error imports nothing.
func readImports(cio cmdIO, o *importOpts, files []string) ([]importItem, error) {
	if len(files) == 0 {
		return nil, usagef("name at least one crontab or CronJob manifest file")
	}
	if o.chunk < 1 || o.chunk > importChunk {
		return nil, usagef("--chunk must be 1 to %d, got %d", importChunk, o.chunk)
	}
	t, err := newImportTarget(o.targetTmpl, o.topicTmpl, o.method)
	if err != nil {
		return nil, err
	}
	var (
		items []importItem
		errs  []error
		names = map[string]string{}
	)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		format := o.format
		if format == "auto" {
			format = sniffFormat(b)
		}
		var got []importItem
		var bad []error
		switch format {
		case "crontab":
			got, bad = parseCrontab(f, strings.NewReader(string(b)), t, o.labels)
		case "cronjob":
			var skipped []string
			got, skipped, bad = parseCronJobs(f, strings.NewReader(string(b)), t, o.labels)
			for _, s := range skipped {
				fmt.Fprintf(cio.Stderr, "skipped %s\n", s)
			}
		default:
			return nil, usagef("--format must be crontab, cronjob or auto, got %q", o.format)
		}
		errs = append(errs, bad...)
		for _, it := range got {
			if first, dup := names[it.req.GetJob().GetName()]; dup {
				errs = append(errs, fmt.Errorf("%s: job name %q is %s's too", it.source, it.req.GetJob().GetName(), first))
				continue
			}
			names[it.req.GetJob().GetName()] = it.source
			items = append(items, it)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("nothing imported; %d problem(s):\n%w", len(errs), errors.Join(errs...))
	}
	return items, nil
}

func printImportPlan(cio cmdIO, items []importItem) {
	w := tabwriter.NewWriter(cio.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SOURCE\tNAME\tSCHEDULE\tTARGET\tSTATUS")
	for _, it := range items {
		j := it.req.GetJob()
		st := "active"
		if it.req.GetPaused() {
			st = "paused"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", it.source, j.GetName(), scheduleText(j.GetSchedule()), targetText(j.GetTarget()), st)
	}
	_ = w.Flush()
	fmt.Fprintf(cio.Stdout, "%d job(s) would be created (dry run: nothing sent)\n", len(items))
}

// sendImports registers the items in CreateJobs calls of o.chunk, one
// after the other, each under --timeout. Each item's idempotency key
// makes a repeated import (or a retry after a failed call) create nothing
// twice: the jobs already there are counted as such.
func sendImports(ctx context.Context, r *remote, o *importOpts, items []importItem) error {
	mode := sundialv1.CreateJobsMode_CREATE_JOBS_MODE_ALL_OR_NOTHING
	if o.perItem {
		mode = sundialv1.CreateJobsMode_CREATE_JOBS_MODE_PER_ITEM
	}
	start := r.io.now()
	var created, replayed, refused int
	for from := 0; from < len(items); from += o.chunk {
		chunk := items[from:min(from+o.chunk, len(items))]
		req := &sundialv1.CreateJobsRequest{Mode: mode, Items: make([]*sundialv1.CreateJobRequest, len(chunk))}
		for i, it := range chunk {
			req.Items[i] = it.req
		}
		cctx, cancel := r.call(ctx)
		resp, err := r.client.CreateJobs(cctx, req)
		cancel()
		if err != nil {
			if created+replayed > 0 {
				fmt.Fprintf(r.io.Stderr, "%d job(s) created and %d already there before this call failed; run the import again to go on\n", created, replayed)
			}
			return importCallError(err, chunk)
		}
		created += int(resp.GetCreated())
		replayed += int(resp.GetReplayed())
		refused += int(resp.GetRefused())
		for _, res := range resp.GetResults() {
			if e := res.GetError(); e != nil {
				fmt.Fprintf(r.io.Stderr, "%s: %s: %s\n", chunk[res.GetIndex()].source, e.GetCode(), e.GetMessage())
			}
		}
	}
	fmt.Fprintf(r.io.Stdout, "%d job(s) created, %d already there, %d refused, in %s\n", created, replayed, refused, r.io.now().Sub(start).Round(time.Millisecond))
	if refused > 0 {
		return fmt.Errorf("%d job(s) refused (listed above)", refused)
	}
	return nil
}

// importCallError rewrites the api's "items[<i>].<field>" to the item's
// file:line, so a refusal points at the line to fix.
func importCallError(err error, chunk []importItem) error {
	msg := err.Error()
	for i := len(chunk) - 1; i >= 0; i-- {
		msg = strings.ReplaceAll(msg, fmt.Sprintf("items[%d]", i), chunk[i].source+" ("+chunk[i].req.GetJob().GetName()+")")
	}
	return errors.New(msg)
}
