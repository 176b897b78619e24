package main

// schedctl audit: every change trail of the tenant (jobs, tokens, signing
// keys, calendars) through AuditService.ListAudit, filtered by kind,
// action, actor, subject and time, paged by its one cursor. `calendar audit`,
// `signing-key audit` and `token audit` are this command with the kind
// set (docs/cli.md says why they stay).

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// auditKindWords are --kind's values: the trails as the console and the
// api's docs spell them (job, token, signing-key, calendar).
func auditKindWords() []string {
	return enumWords(sundialv1.AuditKind_value, "AUDIT_KIND_", func(s string) string {
		return strings.ReplaceAll(strings.ToLower(s), "_", "-")
	})
}

// auditKindOf reads one --kind word.
func auditKindOf(word string) (sundialv1.AuditKind, error) {
	k, ok := sundialv1.AuditKind_value["AUDIT_KIND_"+strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(word)), "-", "_")]
	if !ok || k == 0 {
		return 0, usagef("--kind: %q is not a trail (want one of %s)", word, strings.Join(auditKindWords(), ", "))
	}
	return sundialv1.AuditKind(k), nil
}

// kindWord is how the table names a kind: its --kind word.
func kindWord(k sundialv1.AuditKind) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k.String(), "AUDIT_KIND_")), "_", "-")
}

// subjectColumn names the subject column of a table of one kind.
var subjectColumn = map[sundialv1.AuditKind]string{
	sundialv1.AuditKind_AUDIT_KIND_JOB:         "JOB",
	sundialv1.AuditKind_AUDIT_KIND_TOKEN:       "TOKEN",
	sundialv1.AuditKind_AUDIT_KIND_SIGNING_KEY: "KEY_ID",
	sundialv1.AuditKind_AUDIT_KIND_CALENDAR:    "CALENDAR",
}

// kindsFlag is --kind: repeatable, and each value may list kinds with
// commas.
type kindsFlag []string

func (k *kindsFlag) String() string { return strings.Join(*k, ",") }

func (k *kindsFlag) Set(v string) error {
	for _, w := range strings.Split(v, ",") {
		if w = strings.TrimSpace(w); w != "" {
			*k = append(*k, w)
		}
	}
	return nil
}

type auditOpts struct {
	kinds          kindsFlag
	actor, subject string
	action         string
	since, until   string
	pageSize       int
	pageToken      string
	all            bool
}

func (o *auditOpts) register(fs *flag.FlagSet) {
	fs.Var(&o.kinds, "kind", "only these trails: "+strings.Join(auditKindWords(), ", ")+" (repeat the flag or separate with commas; default every trail your role may read)")
	fs.StringVar(&o.action, "action", "", "only the changes recorded with this action (e.g. redrive, cancel, pause)")
	fs.StringVar(&o.actor, "actor", "", "only the changes of this actor, exactly as the trail names it (e.g. acme/ci)")
	fs.StringVar(&o.subject, "subject", "", "with one --kind: only the changes to this job id, token id, signing-key id or calendar name")
	fs.StringVar(&o.since, "since", "", "only changes at or after: RFC 3339, or a duration ago (e.g. 24h)")
	fs.StringVar(&o.until, "until", "", "only changes before: RFC 3339, or a duration ago")
	fs.IntVar(&o.pageSize, "page-size", 100, "entries per page (at most 1000)")
	fs.StringVar(&o.pageToken, "page-token", "", "continue from a previous page (with the same filters)")
	fs.BoolVar(&o.all, "all", false, "follow every page")
}

// auditAs is the run function of `audit` (kind "") and of its aliases,
// which read one trail (kind) and take what a positional argument names
// (arg: JOB_ID for audit, NAME for calendar audit, "" for none).
func auditAs(kind, arg string) func(context.Context, *remote, *auditOpts, []string) error {
	return func(ctx context.Context, r *remote, o *auditOpts, args []string) error {
		req, err := o.request(kind, arg, args, r.io)
		if err != nil {
			return err
		}
		return runAudit(ctx, r, o, req)
	}
}

// request builds the ListAudit request of the flags and the positional
// arguments, refusing contradictions as usage errors naming the flag.
func (o *auditOpts) request(kind, arg string, args []string, cio cmdIO) (*sundialv1.ListAuditRequest, error) {
	words := slices.Clone([]string(o.kinds))
	if kind != "" {
		for _, w := range words {
			if k, err := auditKindOf(w); err != nil || kindWord(k) != kind {
				return nil, usagef("--kind: this command reads the %s trail; for others use schedctl audit --kind", kind)
			}
		}
		words = []string{kind}
	}
	subject := o.subject
	switch {
	case len(args) > 1 || len(args) == 1 && arg == "":
		return nil, usagef("unexpected arguments %q", args)
	case len(args) == 1 && subject != "":
		return nil, usagef("give %s or --subject, not both", arg)
	case len(args) == 1 && kind == "":
		// schedctl audit JOB_ID: one job's trail.
		for _, w := range words {
			if k, err := auditKindOf(w); err != nil || k != sundialv1.AuditKind_AUDIT_KIND_JOB {
				return nil, usagef("--kind: a JOB_ID reads the job trail; drop --kind or the JOB_ID")
			}
		}
		words, subject = []string{"job"}, args[0]
	case len(args) == 1:
		subject = args[0]
	}
	req := &sundialv1.ListAuditRequest{Actor: o.actor, Action: o.action, Subject: subject, PageToken: o.pageToken}
	for _, w := range words {
		k, err := auditKindOf(w)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(req.Kinds, k) {
			req.Kinds = append(req.Kinds, k)
		}
	}
	if subject != "" && len(req.Kinds) != 1 {
		return nil, usagef("--subject: needs exactly one --kind (what %q names depends on the trail)", subject)
	}
	if o.pageSize < 0 {
		return nil, usagef("--page-size: must not be negative, got %d", o.pageSize)
	}
	req.PageSize = int32(min(o.pageSize, 1000))
	now := cio.now()
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
	if req.StartTime != nil && req.EndTime != nil && !req.StartTime.AsTime().Before(req.EndTime.AsTime()) {
		return nil, usagef("--until: must be after --since")
	}
	return req, nil
}

// runAudit reads a page (with --all, every page) and prints it.
func runAudit(ctx context.Context, r *remote, o *auditOpts, req *sundialv1.ListAuditRequest) error {
	var entries []*sundialv1.AuditTrailEntry
	next := ""
	for {
		cctx, cancel := r.call(ctx)
		resp, err := r.audit.ListAudit(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		entries = append(entries, resp.GetEntries()...)
		next = resp.GetNextPageToken()
		if !o.all || next == "" {
			break
		}
		req.PageToken = next
	}
	if r.output == "json" {
		return r.printJSON(&sundialv1.ListAuditResponse{Entries: entries, NextPageToken: next})
	}
	if err := printAuditTable(r, req, entries); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(r.io.Stderr, "more: --page-token %s\n", next)
	}
	return nil
}

// printAuditTable prints entries with only the columns that tell them
// apart: no KIND when one trail was asked for (and the subject column then
// named after it: JOB, TOKEN, KEY_ID, CALENDAR), no subject column when
// one subject was, no VERSION when no trail asked for has versions.
func printAuditTable(r *remote, req *sundialv1.ListAuditRequest, entries []*sundialv1.AuditTrailEntry) error {
	kinds := req.GetKinds()
	showKind := len(kinds) != 1
	subjectHead := "SUBJECT"
	if len(kinds) == 1 {
		subjectHead = subjectColumn[kinds[0]]
	}
	showSubject := req.GetSubject() == ""
	showVersion := len(kinds) == 0 || slices.ContainsFunc(kinds, func(k sundialv1.AuditKind) bool {
		return k == sundialv1.AuditKind_AUDIT_KIND_JOB || k == sundialv1.AuditKind_AUDIT_KIND_CALENDAR
	})
	head := []string{"TIME"}
	if showKind {
		head = append(head, "KIND")
	}
	if showSubject {
		head = append(head, subjectHead)
	}
	head = append(head, "ACTION")
	if showVersion {
		head = append(head, "VERSION")
	}
	head = append(head, "ACTOR", "DETAIL")
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, e := range entries {
		row := []string{instant(e.GetTime())}
		if showKind {
			row = append(row, kindWord(e.GetKind()))
		}
		if showSubject {
			row = append(row, e.GetSubject())
		}
		row = append(row, e.GetAction())
		if showVersion {
			v := "-"
			if e.GetVersion() != 0 {
				v = fmt.Sprint(e.GetVersion())
			}
			row = append(row, v)
		}
		detail := e.GetDetail()
		if detail == "{}" {
			detail = ""
		}
		row = append(row, orDash(e.GetActor()), orDash(truncate(detail, 100)))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
