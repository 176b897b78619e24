package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// jsonOut is the -o json encoding: the protobuf JSON mapping with the
// proto field names, which `schedctl create -f` reads back.
var jsonOut = protojson.MarshalOptions{UseProtoNames: true}

func (r *remote) printJSON(m proto.Message) error {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return err
	}
	// protojson varies its whitespace on purpose; indent it ourselves so
	// the output is stable for scripts and diffs.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = r.io.Stdout.Write(out.Bytes())
	return err
}

func instant(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func dur(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().String()
}

func enumWord(s, prefix string) string { return strings.TrimPrefix(s, prefix) }

func scheduleText(s *sundialv1.Schedule) string {
	var b strings.Builder
	switch spec := s.GetSpec().(type) {
	case *sundialv1.Schedule_Cron:
		b.WriteString(spec.Cron)
	case *sundialv1.Schedule_Once:
		b.WriteString("once at " + instant(spec.Once))
	case *sundialv1.Schedule_Interval:
		b.WriteString("every " + dur(spec.Interval))
	case *sundialv1.Schedule_Rrule:
		// One line in a table: the rule's lines joined by spaces, which
		// the api reads back the same.
		b.WriteString(strings.Join(strings.Fields(spec.Rrule), " "))
	default:
		return "-"
	}
	if tz := s.GetTimezone(); tz != "" && tz != "UTC" {
		b.WriteString(" (" + tz + ")")
	}
	if c := s.GetCalendar(); c != "" {
		p := enumWord(s.GetCalendarPolicy().String(), "CALENDAR_POLICY_")
		if p == "UNSPECIFIED" {
			p = "SKIP"
		}
		b.WriteString(" [calendar " + c + ", " + p + "]")
	}
	return b.String()
}

func targetText(t *sundialv1.Target) string {
	switch k := t.GetKind().(type) {
	case *sundialv1.Target_Http:
		m := k.Http.GetMethod()
		if m == "" {
			m = "POST"
		}
		return m + " " + k.Http.GetUrl()
	case *sundialv1.Target_Kafka:
		s := "kafka " + k.Kafka.GetTopic()
		if k.Kafka.GetKey() != "" {
			s += " key " + k.Kafka.GetKey()
		}
		return s
	}
	return "-"
}

func kvText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// printJob shows one job as aligned "field  value" lines.
func (r *remote) printJob(j *sundialv1.Job) error {
	if r.output == "json" {
		return r.printJSON(j)
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", j.GetId())
	row("Name", orDash(j.GetName()))
	row("Status", fmt.Sprintf("%s (version %d)", firing.JobStatusWord(j.GetStatus()), j.GetVersion()))
	row("Schedule", scheduleText(j.GetSchedule()))
	if s := j.GetSchedule(); s.GetStartTime() != nil || s.GetEndTime() != nil {
		row("Bounds", instant(s.GetStartTime())+" .. "+instant(s.GetEndTime()))
	}
	if s := j.GetSchedule(); s.GetCron() != "" || s.GetRrule() != "" {
		row("DST", fmt.Sprintf("gap %s, repeat %s",
			enumWord(s.GetDstGap().String(), "DST_GAP_POLICY_"), enumWord(s.GetDstRepeat().String(), "DST_REPEAT_POLICY_")))
	}
	for _, a := range j.GetSchedule().GetAdditionalSchedules() {
		row("Also", scheduleText(a))
	}
	for _, x := range j.GetSchedule().GetExclusions() {
		row("Except", exclusionText(x))
	}
	row("Next fire", instant(j.GetNextFireTime()))
	if m := j.GetMaxRuns(); m > 0 {
		row("Runs left", fmt.Sprintf("%d of %d", j.GetRemainingRuns(), m))
	}
	row("Target", targetText(j.GetTarget()))
	if h := j.GetTarget().GetHttp().GetHeaders(); len(h) > 0 {
		row("Headers", kvText(h))
	}
	row("Payload", fmt.Sprintf("%d bytes", len(j.GetPayload())))
	row("Priority", enumWord(j.GetPriority().String(), "PRIORITY_"))
	rp := j.GetRetry()
	row("Retry", fmt.Sprintf("%d attempt(s), %s %s..%s", rp.GetMaxAttempts(), enumWord(rp.GetBackoff().String(), "BACKOFF_"), dur(rp.GetInitialDelay()), dur(rp.GetMaxDelay())))
	row("Timeout", dur(j.GetAttemptTimeout()))
	mp := j.GetMisfire()
	row("Misfire", fmt.Sprintf("%s, grace %s, cap %d", enumWord(mp.GetAction().String(), "MISFIRE_ACTION_"), dur(mp.GetGrace()), mp.GetMaxCatchUp()))
	overlap := enumWord(j.GetOverlap().String(), "OVERLAP_POLICY_")
	if n := j.GetMaxConcurrency(); n > 1 {
		overlap += fmt.Sprintf(", %d at once", n)
	}
	row("Overlap", overlap)
	if u := j.GetTarget().GetHttp().GetCancelUrl(); u != "" {
		row("Cancel URL", u)
	}
	row("Max jitter", dur(j.GetMaxJitter()))
	if j.GetCallbackUrl() != "" {
		row("Callback", j.GetCallbackUrl())
	}
	row("Labels", kvText(j.GetLabels()))
	row("Created", instant(j.GetCreateTime()))
	row("Updated", instant(j.GetUpdateTime()))
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *remote) printJobList(jobs []*sundialv1.Job, next string) error {
	if r.output == "json" {
		return r.printJSON(&sundialv1.ListJobsResponse{Jobs: jobs, NextPageToken: next})
	}
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSCHEDULE\tNEXT FIRE\tTARGET\tVERSION")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", j.GetId(), orDash(j.GetName()), firing.JobStatusWord(j.GetStatus()),
			scheduleText(j.GetSchedule()), instant(j.GetNextFireTime()), targetText(j.GetTarget()), j.GetVersion())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(r.io.Stderr, "more jobs: --page-token %s (or --all)\n", next)
	}
	return nil
}

func (r *remote) printAttempts(as []*sundialv1.ExecutionAttempt, next string) error {
	tw := tabwriter.NewWriter(r.io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED\tEXECUTION\tATTEMPT\tSTATUS\tLATENESS\tDURATION\tHTTP\tWORKER\tDETAIL")
	for _, a := range as {
		httpStatus := "-"
		if a.GetHttpStatus() != 0 {
			httpStatus = fmt.Sprint(a.GetHttpStatus())
		}
		detail := a.GetError()
		if detail == "" {
			detail = a.GetReason()
		}
		if a.GetCatchUp() {
			detail = strings.TrimSpace("catch-up " + detail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", instant(a.GetScheduledTime()), a.GetExecutionId(), a.GetAttempt(),
			enumWord(a.GetStatus().String(), "EXECUTION_STATUS_"), dur(a.GetLateness()), dur(a.GetDuration()), httpStatus,
			orDash(a.GetWorker()), orDash(truncate(detail, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(r.io.Stderr, "more: --page-token %s\n", next)
	}
	return nil
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
