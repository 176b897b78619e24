package main

// The command table. Every schedctl command is one row of commands(): its
// name, its synopsis and summary, and a runner holding its flags and its run
// function, typed by the command's own options struct. The top-level help,
// each command's -h, the shell completion scripts (completion.go) and
// docs/cli.md (reference.go) are all generated from these rows, so none of
// them can name a command or a flag the binary does not have.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// command is one row of the table.
type command struct {
	name    string // one word, or a group and a word ("dlq list")
	usage   string // the synopsis after the name
	summary string // the first line is the listing's; -h and docs/cli.md show it whole
	// args are the words a positional argument is chosen from, offered by
	// the shell completion; nil when the argument is free (a job id).
	args []string
	// values are, by flag name, the words a flag's value is chosen from,
	// offered by the shell completion (the gRPC commands' -o is added to
	// every one of them). A flag not here completes file names.
	values map[string][]string
	run    runner
}

// runner is a command's flags and run function. localCmd and remoteCmd
// implement it for every options type, which is what keeps a run function
// typed: it receives the struct its own flags were parsed into.
type runner interface {
	// bind registers the command's flags on fs and returns the function
	// that runs the command on its positional arguments once fs has parsed.
	bind(fs *flag.FlagSet, e *env) func(ctx context.Context, args []string) int
	// remote reports whether the command calls the api: it then takes the
	// connection flags, and its flags may also follow its arguments.
	remote() bool
}

// noOpts is the options of a command without flags of its own.
type noOpts struct{}

// localCmd is a command that needs no server. It returns its exit status
// itself, since each has its own failure modes (a listener, a bad
// expression).
type localCmd[O any] struct {
	flags func(o *O, fs *flag.FlagSet, e *env)
	run   func(ctx context.Context, e *env, o *O, args []string) int
}

func (c localCmd[O]) bind(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
	o := new(O)
	if c.flags != nil {
		c.flags(o, fs, e)
	}
	return func(ctx context.Context, args []string) int { return c.run(ctx, e, o, args) }
}

func (localCmd[O]) remote() bool { return false }

// remoteCmd is a command that calls the api. Its run function gets a
// connected client and returns an error; runRemote turns that into the exit
// status and the message, the same way for every command.
type remoteCmd[O any] struct {
	flags func(o *O, fs *flag.FlagSet)
	run   func(ctx context.Context, r *remote, o *O, args []string) error
}

func (c remoteCmd[O]) bind(fs *flag.FlagSet, e *env) func(context.Context, []string) int {
	cf := &connFlags{}
	cf.register(fs, e.io)
	o := new(O)
	if c.flags != nil {
		c.flags(o, fs)
	}
	return func(ctx context.Context, args []string) int {
		return runRemote(ctx, e.io, fs, cf, func(ctx context.Context, r *remote) error { return c.run(ctx, r, o, args) })
	}
}

func (remoteCmd[O]) remote() bool { return true }

// commands returns the table in help order: the offline commands first,
// then the gRPC ones. It is a function rather than a variable because
// `completion` reads the table it is a row of.
func commands() []command {
	return []command{
		{name: "preview", usage: "--cron EXPR|--rrule RULE [--tz ZONE] [--from RFC3339] [--count N] [--dst-gap SHIFT|SKIP] [--dst-repeat FIRST|LAST|BOTH] [--also-cron EXPR]... [--exclude SPEC]... [--max-runs N]",
			summary: "Print a schedule's next instants, computed offline (no server).\n" +
				"One RFC 3339 UTC instant per line, from the engine the prefetcher runs;\n" +
				"the instants an --exclude removed, and a --max-runs that ended the list, on stderr.",
			values: map[string][]string{
				"dst-gap":    {schedule.GapShift.String(), schedule.GapSkip.String()},
				"dst-repeat": {schedule.RepeatFirst.String(), schedule.RepeatLast.String(), schedule.RepeatBoth.String()},
			},
			run: localCmd[previewOpts]{flags: (*previewOpts).register, run: runPreview}},
		{name: "sink", usage: "[--addr HOST:PORT] [--signing-secret S]",
			summary: "Run a local HTTP target that prints every firing it receives (for trying Sundial out).",
			run:     localCmd[sinkOpts]{flags: (*sinkOpts).register, run: runSink}},
		{name: "completion", usage: "bash|zsh", args: []string{"bash", "zsh"},
			summary: "Print the shell completion script for bash or zsh.\n" +
				"Load it with: source <(schedctl completion bash)",
			run: localCmd[noOpts]{run: runCompletion}},

		{name: "create", usage: "[flags]",
			summary: "Register a job from flags and/or a job file (-f job.yaml|job.json).",
			values:  jobFlagValues(),
			run:     remoteCmd[createOpts]{flags: (*createOpts).register, run: runCreate}},
		{name: "import", usage: "[flags] (--target-template URL | --kafka-topic-template TOPIC) FILE...",
			summary: "Register the jobs of crontab files or Kubernetes CronJob manifests, 1,000 per CreateJobs call.\n" +
				"Each line's command (or container command) becomes the target through the template; CRON_TZ= applies\n" +
				"to the lines after it; @reboot is refused. Errors name file:line and import nothing; --dry-run lists the\n" +
				"jobs offline. Importing a file again creates nothing twice (each job is keyed by its name and content).",
			run: importCmd{}},
		{name: "export", usage: "[flags] [--format crontab|cronjob] [--label K=V]... [--status active|paused] [--out FILE]",
			summary: "Write your jobs out as a crontab or as Kubernetes CronJob manifests, the formats import reads.\n" +
				"Jobs a format cannot express (intervals, one-offs, rrules, seconds, calendars, exclusions) are skipped\n" +
				"and listed on stderr with why.",
			values: map[string][]string{"format": {"crontab", "cronjob"}, "status": {"active", "paused"}},
			run:    remoteCmd[exportOpts]{flags: (*exportOpts).register, run: runExport}},
		{name: "get", usage: "[flags] JOB_ID", summary: "Show one job.",
			run: remoteCmd[noOpts]{run: runGet}},
		{name: "list", usage: "[flags]", summary: "List your jobs, oldest first.",
			values: map[string][]string{"status": enumWords(sundialv1.JobStatus_value, "JOB_STATUS_", strings.ToLower)},
			run:    remoteCmd[listOpts]{flags: (*listOpts).register, run: runList}},
		{name: "update", usage: "[flags] JOB_ID",
			summary: "Change a job: only the fields given as flags (or set in -f) change.\n" +
				"Bumps the version; firings not yet started follow the new definition.\n" +
				"With --expected-version, refused if someone changed the job since you read it.",
			values: jobFlagValues(),
			run:    remoteCmd[updateOpts]{flags: (*updateOpts).register, run: runUpdate}},
		{name: "pause", usage: "[flags] JOB_ID", summary: "Stop a job firing until resumed.",
			run: remoteCmd[versionOpts]{flags: versionFlag("pause"), run: simple("paused", pauseCall)}},
		{name: "resume", usage: "[flags] JOB_ID", summary: "Fire a paused job again, from now on (no catch-up).",
			run: remoteCmd[versionOpts]{flags: versionFlag("resume"), run: simple("resumed", resumeCall)}},
		{name: "delete", usage: "[flags] JOB_ID", summary: "Delete a job (it stops firing; its history stays).",
			run: remoteCmd[versionOpts]{flags: versionFlag("delete"), run: simple("deleted", deleteCall)}},
		{name: "bulk pause", usage: "[flags] (--status S | --label K=V | --name TEXT | --next-fire-after T | --next-fire-before T)...",
			summary: "Pause every job the filter matches, however many: counts and lists the first 20, and pauses only with --yes.",
			values:  map[string][]string{"status": enumWords(sundialv1.JobStatus_value, "JOB_STATUS_", strings.ToLower)},
			run:     remoteCmd[bulkOpts]{flags: (*bulkOpts).register, run: runBulk(sundialv1.BulkAction_BULK_ACTION_PAUSE, "Pause")}},
		{name: "bulk resume", usage: "[flags] (--status S | --label K=V | --name TEXT | --next-fire-after T | --next-fire-before T)...",
			summary: "Resume every job the filter matches (from now on, no catch-up): counts first, resumes only with --yes.",
			values:  map[string][]string{"status": enumWords(sundialv1.JobStatus_value, "JOB_STATUS_", strings.ToLower)},
			run:     remoteCmd[bulkOpts]{flags: (*bulkOpts).register, run: runBulk(sundialv1.BulkAction_BULK_ACTION_RESUME, "Resume")}},
		{name: "bulk delete", usage: "[flags] (--status S | --label K=V | --name TEXT | --next-fire-after T | --next-fire-before T)...",
			summary: "Delete every job the filter matches: counts first, deletes only with --yes.",
			values:  map[string][]string{"status": enumWords(sundialv1.JobStatus_value, "JOB_STATUS_", strings.ToLower)},
			run:     remoteCmd[bulkOpts]{flags: (*bulkOpts).register, run: runBulk(sundialv1.BulkAction_BULK_ACTION_DELETE, "Delete")}},
		{name: "trigger", usage: "[flags] JOB_ID", summary: "Fire a job once, now, outside its schedule.",
			run: remoteCmd[noOpts]{run: runTrigger}},
		{name: "cancel", usage: "[flags] JOB_ID EXECUTION_ID",
			summary: "Cancel a started execution: its running attempt is abandoned (its target is told), no retry of it fires,\n" +
				"and the ledger records it CANCELLED naming you. Best effort: the attempt's request may already have had its effect.",
			run: remoteCmd[noOpts]{run: runCancel}},
		{name: "history", usage: "[flags] JOB_ID | --execution EXECUTION_ID",
			summary: "Show a job's executions, newest first (one row per attempt), or every attempt of one execution.",
			run:     remoteCmd[historyOpts]{flags: (*historyOpts).register, run: runHistory}},
		{name: "executions", usage: "[flags] [--since T] [--until T] [--status S]...",
			summary: "Show the tenant's executions across all its jobs in a time range (default the last 24 hours),\n" +
				"newest first (one row per attempt), optionally of some statuses only.",
			values: map[string][]string{"status": executionStatusWords()},
			run:    remoteCmd[executionsOpts]{flags: (*executionsOpts).register, run: runExecutions}},
		{name: "server-preview", usage: "[flags]",
			summary: "Ask the api for a schedule's next instants (what the server will compute).",
			values:  jobFlagValues(),
			run:     remoteCmd[serverPreviewOpts]{flags: (*serverPreviewOpts).register, run: runServerPreview}},
		{name: "backfill", usage: "[flags] JOB_ID --from T --to T",
			summary: "Fire a job once for every slot of its schedule in a past range, paced (--dry-run lists the slots).",
			run:     remoteCmd[backfillOpts]{flags: (*backfillOpts).register, run: runBackfill}},
		{name: "audit", usage: "[flags] [JOB_ID] [--kind job|token|signing-key|calendar]... [--action W] [--actor A] [--subject S] [--since T] [--until T]",
			summary: "Show who changed what and when across every trail your role may read, newest first.\n" +
				"The trails: jobs (bulk actions, triggers, backfills, dead-letter re-drives, cancels, completions and purges\n" +
				"among them), tokens, signing keys and calendars. Filter by kind, action (redrive, cancel, pause, ...), actor,\n" +
				"subject and time; a JOB_ID is one job's trail (--kind job --subject JOB_ID). A platform operator names the\n" +
				"tenant with --tenant.",
			values: map[string][]string{"kind": auditKindWords()},
			run:    remoteCmd[auditOpts]{flags: (*auditOpts).register, run: auditAs("", "JOB_ID")}},
		{name: "calendar create", usage: "[flags] NAME [--holiday YYYY-MM-DD[=NAME]]... [--weekend SAT,SUN|none]",
			summary: "Create a business calendar: holidays plus weekend days (default Saturday and Sunday).\n" +
				"Jobs name it with --calendar; --calendar-policy says whether their instants on those days\n" +
				"are skipped or moved to the next or previous business day.",
			run: remoteCmd[calendarOpts]{flags: (*calendarOpts).register, run: runCalendarCreate}},
		{name: "calendar update", usage: "[flags] NAME [--holiday YYYY-MM-DD[=NAME]]... [--weekend SAT,SUN|none]",
			summary: "Replace a calendar's holidays, weekend and description (flags not given are cleared; the weekend returns to SAT,SUN).\n" +
				"Takes effect for instants not yet staged (about the next two minutes are).",
			run: remoteCmd[calendarUpdateOpts]{flags: (*calendarUpdateOpts).register, run: runCalendarUpdate}},
		{name: "calendar import", usage: "[flags] NAME FILE.ics",
			summary: "Create a calendar (or with --replace, replace one's holidays) from an iCalendar file.\n" +
				"Each all-day VEVENT (DTSTART;VALUE=DATE, up to DTEND) is a holiday named by its SUMMARY;\n" +
				"timed, recurring (RRULE/RDATE) and cancelled events are skipped and listed on stderr.",
			run: remoteCmd[calendarImportOpts]{flags: (*calendarImportOpts).register, run: runCalendarImport}},
		{name: "calendar list", usage: "[flags]", summary: "List your business calendars by name.",
			run: remoteCmd[noOpts]{run: runCalendarList}},
		{name: "calendar show", usage: "[flags] NAME", summary: "Show one calendar and its holidays.",
			run: remoteCmd[noOpts]{run: runCalendarShow}},
		{name: "calendar delete", usage: "[flags] NAME",
			summary: "Delete a calendar; refused while a job that is not deleted uses it.",
			run:     remoteCmd[noOpts]{run: runCalendarDelete}},
		{name: "calendar audit", usage: "[flags] [NAME]",
			summary: "Show who created, updated, imported and deleted your calendars (or one's), newest first.\n" +
				"The same as schedctl audit --kind calendar [--subject NAME], with its flags.",
			run: remoteCmd[auditOpts]{flags: (*auditOpts).register, run: auditAs("calendar", "NAME")}},
		{name: "signing-key create", usage: "[flags]",
			summary: "Show your tenant's webhook signing key, which its first job made (or make it now, before any job);\n" +
				"the workers sign your requests with it. Prints the secret once: store it where your targets verify;\n" +
				"after that, rotate for a new one.",
			run: remoteCmd[noOpts]{run: runSigningKeyCreate}},
		{name: "signing-key rotate", usage: "[flags] [--overlap 24h]",
			summary: "Make a new signing key current; the previous one stays valid for --overlap, and requests carry\n" +
				"both signatures meanwhile, so targets can switch keys at any moment within it. Prints the new secret once.",
			run: remoteCmd[rotateKeyOpts]{flags: (*rotateKeyOpts).register, run: runSigningKeyRotate}},
		{name: "signing-key list", usage: "[flags]", summary: "List your valid signing keys (ids and validity, never secrets), the current first.",
			run: remoteCmd[noOpts]{run: runSigningKeyList}},
		{name: "signing-key audit", usage: "[flags]",
			summary: "Show who created and rotated your tenant's signing keys, newest first (key ids, never secrets).\n" +
				"The same as schedctl audit --kind signing-key, with its flags. A platform operator names the tenant with --tenant.",
			run: remoteCmd[auditOpts]{flags: (*auditOpts).register, run: auditAs("signing-key", "")}},
		{name: "token create", usage: "[flags] NAME [--role admin|read-only|operator] [--ttl 720h]",
			summary: "Make a bearer token for your tenant (an operator: an operator token), with a role and an optional expiry.\n" +
				"Prints the token once: the api keeps only its argon2id hash.",
			values: map[string][]string{"role": {"admin", "read-only", "operator"}},
			run:    remoteCmd[createTokenOpts]{flags: (*createTokenOpts).register, run: runTokenCreate}},
		{name: "token list", usage: "[flags] [--all]",
			summary: "List your tenant's tokens (ids, names, roles, expiry, last use; never the tokens), newest first.",
			run:     remoteCmd[listTokenOpts]{flags: (*listTokenOpts).register, run: runTokenList}},
		{name: "token revoke", usage: "[flags] ID",
			summary: "Revoke a token: every api replica refuses it within seconds, without a restart.",
			run:     remoteCmd[noOpts]{run: runTokenRevoke}},
		{name: "token audit", usage: "[flags]",
			summary: "Show who created and revoked your tenant's tokens, newest first.\n" +
				"The same as schedctl audit --kind token, with its flags.",
			run: remoteCmd[auditOpts]{flags: (*auditOpts).register, run: auditAs("token", "")}},
		{name: "token denied", usage: "[flags] [--page-size 100] [--page-token T]",
			summary: "Show calls the api refused (unknown, revoked or expired token; a role that may not), newest first,\n" +
				"sampled per caller (MORE: how many more of that caller's the trail left out). An admin sees its tenant's\n" +
				"tokens' refusals; an operator every tenant's (or --tenant's), those of unknown tokens included.",
			run: remoteCmd[tokenAuditOpts]{flags: (*tokenAuditOpts).register, run: runTokenDenied}},
		{name: "token hash", usage: "[--principal TENANT[:NAME[:ROLE]]] [--generate] < TOKEN",
			summary: "Hash a bootstrap token for the api's --tokens-file: reads the token from stdin (never an argument, which\n" +
				"other users see in ps), or with --generate makes a random one and prints it too. Prints the argon2id hash,\n" +
				"with --principal as the whole line to put in the file. Needs no server.",
			run: localCmd[tokenHashOpts]{flags: (*tokenHashOpts).register, run: runTokenHash}},
		{name: "forecast", usage: "[flags] [--window 24h] [--priority P]", summary: "Show the firings your schedules make due per minute ahead, the busiest seconds, and the herds.\nA herd is an instant with many firings due at once; it comes with the jobs that make it and a suggested max_jitter or H slot.", run: remoteCmd[forecastOpts]{flags: (*forecastOpts).register, run: runForecast}},
		{name: "dlq list", usage: "[flags]",
			summary: "List dead letters (executions that exhausted their attempts), newest first.",
			run:     remoteCmd[dlqListOpts]{flags: (*dlqListOpts).register, run: runDLQList}},
		{name: "dlq show", usage: "[flags] EXECUTION_ID",
			summary: "Show one dead letter: its last error and the firing that died.",
			run:     remoteCmd[noOpts]{run: runDLQShow}},
		{name: "dlq redrive", usage: "[flags] [EXECUTION_ID...]",
			summary: "Re-drive dead letters: each keeps its execution id and gets a fresh round of attempts.\n" +
				"Give execution ids, or filter flags, or --all for every dead letter not yet re-driven.",
			run: remoteCmd[dlqRedriveOpts]{flags: (*dlqRedriveOpts).register, run: runDLQRedrive}},
	}
}

// flagSet returns c's flags, registered on a fresh set whose -h prints c's
// usage, and c's run function bound to them.
func (c command) flagSet(e *env) (*flag.FlagSet, func(context.Context, []string) int) {
	fs := flag.NewFlagSet("schedctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.io.Stderr)
	run := c.run.bind(fs, e)
	fs.Usage = func() { c.printUsage(fs) }
	return fs, run
}

// invoke runs c with its arguments (those after its name) and returns the
// exit status.
func (c command) invoke(ctx context.Context, e *env, args []string) int {
	fs, run := c.flagSet(e)
	var (
		positional []string
		err        error
	)
	if c.run.remote() {
		positional, err = parseInterspersed(fs, args)
	} else {
		// The offline commands stop at the first argument, so a stray
		// word (an unquoted cron expression) is reported with all that
		// follows it.
		err = fs.Parse(args)
		positional = fs.Args()
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the problem and the usage
	}
	return run(ctx, positional)
}

func (c command) printUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "usage: schedctl %s %s\n\n%s\n", c.name, c.usage, c.summary)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		fs.PrintDefaults()
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isGroup reports whether name is the first word of two-word commands
// ("dlq" of "dlq list").
func isGroup(name string) bool {
	for _, c := range commands() {
		if strings.HasPrefix(c.name, name+" ") {
			return true
		}
	}
	return false
}

// resolve finds the command args start with, one word or a group and its
// subcommand, and returns it with the remaining arguments.
func resolve(args []string) (command, []string, bool) {
	if len(args) == 0 {
		return command{}, nil, false
	}
	name, rest := args[0], args[1:]
	if isGroup(name) && len(rest) > 0 {
		name, rest = name+" "+rest[0], rest[1:]
	}
	c, ok := lookup(name)
	return c, rest, ok
}

// groupUsage lists a group's subcommands.
func groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "usage: schedctl %s SUBCOMMAND [flags] [args]\n\nsubcommands:\n", group)
	for _, c := range commands() {
		if strings.HasPrefix(c.name, group+" ") {
			fmt.Fprintf(w, "  %-15s %s\n", c.name, firstLine(c.summary))
		}
	}
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help"
}

func (e *env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(e.io.Stderr)
		return 2
	}
	if isHelp(args[0]) {
		// "schedctl help preview" is "schedctl preview -h".
		if len(args) > 1 {
			if c, _, ok := resolve(args[1:]); ok {
				return c.invoke(ctx, e, []string{"-h"})
			}
			if isGroup(args[1]) {
				groupUsage(e.io.Stdout, args[1])
				return 0
			}
			fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", strings.Join(args[1:], " "))
			usage(e.io.Stderr)
			return 2
		}
		usage(e.io.Stdout)
		return 0
	}
	c, rest, ok := resolve(args)
	if !ok {
		if isGroup(args[0]) {
			switch {
			case len(args) > 1 && isHelp(args[1]):
				groupUsage(e.io.Stdout, args[0])
				return 0
			case len(args) > 1:
				fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", args[0]+" "+args[1])
			}
			groupUsage(e.io.Stderr, args[0])
			return 2
		}
		fmt.Fprintf(e.io.Stderr, "schedctl: unknown command %q\n\n", args[0])
		usage(e.io.Stderr)
		return 2
	}
	return c.invoke(ctx, e, rest)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: schedctl COMMAND [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-15s %s\n", c.name, firstLine(c.summary))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'schedctl COMMAND -h' for a command's flags.")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
