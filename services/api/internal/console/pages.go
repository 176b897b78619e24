package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// overlaps are the overlap policies the form offers, as the api's words.
var overlaps = []string{"allow", "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other"}

var funcs = template.FuncMap{
	"ts": func(t *timestamppb.Timestamp) string {
		if t == nil || (t.GetSeconds() == 0 && t.GetNanos() == 0) {
			return "–"
		}
		return t.AsTime().UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d *durationpb.Duration) string {
		if d == nil {
			return "–"
		}
		return d.AsDuration().Round(time.Millisecond).String()
	},
	"enum":     enumName,
	"schedule": describeSchedule,
	// dict pairs keys with values, for a template's fixed tables.
	"dict": func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	},
	"methods": func() []string { return []string{"POST", "GET", "PUT", "PATCH", "DELETE"} },
	// The misfire and overlap choices as the form names them; "" is the
	// api's default (run_once, allow).
	"misfires": func() []string { return []string{"run_once", "skip", "run_all"} },
	// The schedule's kinds and policies, likewise ("" the api's default).
	"scheduleKinds":    func() []string { return scheduleKinds },
	"dstGaps":          func() []string { return dstGaps },
	"dstRepeats":       func() []string { return dstRepeats },
	"calendarPolicies": func() []string { return calendarPolicies },
	"overlaps":         func() []string { return overlaps },
	"target":           describeTarget,
	"labels":           labelText,
	"excerpt":          excerpt,
	// jobOf pairs a job's id with its name from a page's names (none: a
	// purged job, shown by id).
	"jobOf":       func(names map[string]string, id string) jobRef { return jobRef{ID: id, Name: names[id]} },
	"minus":       func(a int64, b int) int64 { return a - int64(b) },
	"thousands":   func(n int) string { return thousands(int64(n)) },
	"pickerValue": pickerValue,
}

// excerptRunes is how much of an attempt's error the history shows: a
// line or two, enough to tell a 503 from a refused connection; the
// execution's page shows the whole error and the response.
const excerptRunes = 160

// excerpt is the start of an error on one line: whitespace runs (a
// stack trace's newlines, an HTML body's indentation) become one space,
// and a longer text is cut at excerptRunes with an ellipsis.
func excerpt(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > excerptRunes {
		return string(r[:excerptRunes]) + "…"
	}
	return s
}

// enumName prints JOB_STATUS_ACTIVE as "active".
func enumName(v fmt.Stringer) string {
	s := v.String()
	for _, p := range []string{"JOB_STATUS_", "PRIORITY_", "EXECUTION_STATUS_", "OVERLAP_POLICY_", "MISFIRE_ACTION_"} {
		s = strings.TrimPrefix(s, p)
	}
	return strings.ToLower(s)
}

// labelText prints labels as "k=v, k=v", sorted by key.
func labelText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

func describeSchedule(s *sundialv1.Schedule) string {
	var out string
	switch {
	case s.GetCron() != "":
		out = s.GetCron()
	case s.GetOnce() != nil:
		out = "once at " + s.GetOnce().AsTime().UTC().Format(time.RFC3339)
	case s.GetInterval() != nil:
		out = "every " + s.GetInterval().AsDuration().String()
	case s.GetRrule() != "":
		out = strings.Join(strings.Fields(s.GetRrule()), " ")
	}
	if tz := s.GetTimezone(); tz != "" {
		out += " (" + tz + ")"
	}
	if cal := s.GetCalendar(); cal != "" {
		out += ", calendar " + cal
		if p := s.GetCalendarPolicy(); p != sundialv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED {
			out += " " + strings.ToLower(strings.TrimPrefix(p.String(), "CALENDAR_POLICY_"))
		}
	}
	return out
}

func describeTarget(t *sundialv1.Target) string {
	if h := t.GetHttp(); h != nil {
		return h.GetMethod() + " " + h.GetUrl()
	}
	if k := t.GetKafka(); k != nil {
		return "kafka " + k.GetTopic()
	}
	return "–"
}

// overview: what the api can answer for one tenant without scanning its
// jobs: the dead letters of the last hour and day, and the newest ones;
// firings, success, lateness and what runs now from the workers' rollup
// (numbers.go), with the hour's charts from Prometheus when there is one
// (charts.go) and from the rollup when not. An operator tenant also sees
// the platform: every tenant's rollup, the outbox, range leaders and the
// api's components, and with Prometheus its charts (consumer lag too).
func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := s.call(r.Context())
	now := c.cfg.Clock.Now()
	// One read of the day's dead letters (newest first, at most 1,000)
	// gives the tiles and the per-hour chart.
	day, err := c.dlq.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{PageSize: deadLetterWindow,
		Filter: &sundialv1.DeadLetterFilter{Since: timestamppb.New(now.Add(-24 * time.Hour))}})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	dh := deadLettersPerHour(day.GetDeadLetters(), day.GetNextPageToken() != "", now)
	recent, err := c.dlq.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{PageSize: 10})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	paused, err := c.jobs.ListJobs(ctx, &sundialv1.ListJobsRequest{PageSize: 10, Status: sundialv1.JobStatus_JOB_STATUS_PAUSED})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	ids := make([]string, 0, len(recent.GetDeadLetters()))
	for _, d := range recent.GetDeadLetters() {
		ids = append(ids, d.GetFiring().GetJobId())
	}
	data := map[string]any{
		"DeadHour": dh.hour, "DeadDay": dh.day, "DeadChart": dh.chart, "Recent": recent.GetDeadLetters(), "Names": c.namesFor(r.Context(), s, ids),
		"Paused": paused.GetJobs(), "MorePaused": paused.GetNextPageToken() != "",
		"Now": now.UTC().Format("2006-01-02 15:04:05Z"), "Prometheus": c.cfg.PrometheusURL != "",
		"Refresh": c.cfg.OverviewRefresh.String(), "RefreshSeconds": max(1, int(c.cfg.OverviewRefresh.Seconds())),
	}
	operator := slices.Contains(c.cfg.OperatorTenants, s.Tenant)
	data["Operator"] = operator
	own, err := c.ownNumbers(r.Context(), s.Tenant, true)
	if err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: the rollup is unavailable", "err", err)
		data["OwnError"] = err.Error()
	}
	data["Own"] = own
	if operator {
		p, err := c.platformOwn(r.Context())
		if err != nil {
			c.cfg.Logger.WarnContext(r.Context(), "console: the platform's own numbers are unavailable", "err", err)
			data["PlatformOwnError"] = err.Error()
		}
		data["PlatformOwn"] = p
	}
	if c.cfg.PrometheusURL != "" {
		charts, err := c.firingCharts(r.Context(), s.Tenant)
		if err != nil {
			c.cfg.Logger.WarnContext(r.Context(), "console: the overview's charts are unavailable", "err", err)
			data["ChartsError"] = err.Error()
		}
		data["Charts"] = charts
		if operator {
			p, err := c.platform(r.Context())
			if err != nil {
				c.cfg.Logger.WarnContext(r.Context(), "console: the platform panel is unavailable", "err", err)
				data["PlatformError"] = err.Error()
			}
			data["Platform"] = p
		}
	}
	c.render(w, http.StatusOK, "overview", s, data)
}

var statuses = []string{"active", "paused", "completed", "deleted"}

// jobList: filters by status, labels, name and next fire, keyset paging by
// the api's page token (creation order), so page 10,000 costs what page 1
// does.
func (c *Console) jobList(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	f := readFilter(q.Get)
	data := map[string]any{"Filter": f, "Statuses": statuses, "Priorities": priorities, "FirstPage": q.Get("page") == "", "Done": bannerOf(q)}
	if len(f.Errors) > 0 {
		c.render(w, http.StatusBadRequest, "jobs", s, data)
		return
	}
	req := f.listRequest()
	req.PageSize, req.PageToken = 50, q.Get("page")
	resp, err := c.jobs.ListJobs(s.call(r.Context()), req)
	if err != nil {
		if f.refused(err) {
			c.render(w, http.StatusBadRequest, "jobs", s, data)
			return
		}
		c.fail(w, r, s, err)
		return
	}
	data["Jobs"] = resp.GetJobs()
	// A name with no three letters or digits in a row has no trigram for
	// the index, and no index holds the medium priority: the api reads a
	// bounded window of jobs a page.
	data["ShortSearch"] = f.Name != "" && !store.NameIndexable(f.Name)
	data["PrioritySearch"] = f.priority == sundialv1.Priority_PRIORITY_MEDIUM
	if t := resp.GetNextPageToken(); t != "" {
		nq := f.values()
		nq.Set("page", t)
		data["Next"] = "/jobs?" + nq.Encode()
	}
	if v := f.values().Encode(); v != "" {
		data["First"] = "/jobs?" + v
	} else {
		data["First"] = "/jobs"
	}
	c.render(w, http.StatusOK, "jobs", s, data)
}

// parseLabels reads "team=billing, env=prod" (commas or new lines).
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: write key=value", part)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// jobPage: the spec, the next 20 instants as the engine computes them,
// the ledger's history and the audit trail.
func (c *Console) jobPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := s.call(r.Context())
	id := r.PathValue("id")
	got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	job := got.GetJob()
	data := map[string]any{"Job": job, "Done": bannerOf(r.URL.Query())}
	spec, _ := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(job)
	data["Spec"] = string(spec)
	if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_ACTIVE || job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED {
		// From now, not from next_fire_time: that is the prefetcher's
		// cursor, up to its window (2 min) ahead, and the slots before it
		// are staged but have not fired yet.
		from := timestamppb.New(c.cfg.Clock.Now())
		sched := job.GetSchedule()
		if sched.GetInterval() != nil && sched.GetStartTime() == nil {
			// An interval is anchored at the job's creation.
			sched = anchoredSchedule(sched, job.GetCreateTime())
		}
		if prev, err := c.jobs.PreviewSchedule(ctx, &sundialv1.PreviewScheduleRequest{Schedule: sched, From: from, Count: 20}); err == nil {
			data["Next"] = localInstants(prev.GetTimes(), job.GetSchedule())
			if len(prev.GetTimes()) > 0 {
				data["NextAt"] = prev.GetTimes()[0]
			}
			data["Description"] = prev.GetDescription()
		} else {
			data["NextError"] = status.Convert(err).Message()
		}
	}
	if r.URL.Query().Get("history") == "" {
		// The newest page is live, as the overview is: the script asks
		// for the page again and swaps in the history (#live); an older
		// page stays as it was read.
		data["Refresh"], data["RefreshSeconds"] = c.cfg.OverviewRefresh.String(), max(1, int(c.cfg.OverviewRefresh.Seconds()))
		data["Now"] = c.cfg.Clock.Now().UTC().Format("2006-01-02 15:04:05Z")
	}
	hist, err := c.jobs.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: id, PageSize: 50, PageToken: r.URL.Query().Get("history")})
	switch {
	case err == nil:
		data["History"] = hist.GetAttempts()
		data["Lateness"] = latenessChart(hist.GetAttempts())
		if t := hist.GetNextPageToken(); t != "" {
			data["HistoryNext"] = "/jobs/" + url.PathEscape(id) + "?history=" + url.QueryEscape(t)
		}
	default:
		data["HistoryError"] = status.Convert(err).Message()
	}
	if audit, err := c.jobs.ListJobAudit(ctx, &sundialv1.ListJobAuditRequest{Id: id, PageSize: 20}); err == nil {
		data["Audit"] = audit.GetEntries()
	}
	c.render(w, http.StatusOK, "job", s, data)
}

func anchoredSchedule(s *sundialv1.Schedule, start *timestamppb.Timestamp) *sundialv1.Schedule {
	out := &sundialv1.Schedule{Spec: s.GetSpec(), Timezone: s.GetTimezone(), StartTime: start, EndTime: s.GetEndTime(), DstGap: s.GetDstGap(), DstRepeat: s.GetDstRepeat()}
	return out
}

// instant is one upcoming slot as UTC and as the job's wall clock, with a
// note where the zone's offset changes from the slot before (a DST
// transition, which the schedule's gap and repeat policies decide).
type instant struct {
	UTC, Local, Note string
}

func localInstants(times []*timestamppb.Timestamp, sched *sundialv1.Schedule) []instant {
	loc, err := time.LoadLocation(sched.GetTimezone())
	if err != nil || sched.GetTimezone() == "" {
		loc = time.UTC
	}
	out := make([]instant, 0, len(times))
	prevOffset, first := 0, true
	for _, ts := range times {
		t := ts.AsTime().In(loc)
		in := instant{UTC: ts.AsTime().UTC().Format("2006-01-02 15:04:05Z"), Local: t.Format("Mon 2006-01-02 15:04:05 MST")}
		_, off := t.Zone()
		if !first && off != prevOffset {
			in.Note = fmt.Sprintf("offset %s → %s (DST gap policy %s, repeat policy %s)", offsetText(prevOffset), offsetText(off),
				strings.TrimPrefix(sched.GetDstGap().String(), "DST_GAP_POLICY_"), strings.TrimPrefix(sched.GetDstRepeat().String(), "DST_REPEAT_POLICY_"))
		}
		prevOffset, first = off, false
		out = append(out, in)
	}
	return out
}

func offsetText(sec int) string {
	sign := "+"
	if sec < 0 {
		sign, sec = "-", -sec
	}
	return fmt.Sprintf("%s%02d:%02d", sign, sec/3600, sec%3600/60)
}

// chart is a lateness-over-time line drawn as SVG on the server: no
// script, nothing fetched.
type chart struct {
	Points     string // polyline points in a 600×120 box
	Max, Label string
	N          int
}

// latenessChart plots the lateness of the attempts that started (newest
// first in, oldest first on the chart); nil when fewer than two did.
func latenessChart(attempts []*sundialv1.ExecutionAttempt) *chart {
	var ds []time.Duration
	for i := len(attempts) - 1; i >= 0; i-- {
		if l := attempts[i].GetLateness(); l != nil && attempts[i].GetStartedTime() != nil {
			ds = append(ds, l.AsDuration())
		}
	}
	if len(ds) < 2 {
		return nil
	}
	maxD := slices.Max(ds)
	if maxD <= 0 {
		maxD = time.Millisecond
	}
	var pts []string
	for i, d := range ds {
		x := float64(i) * 600 / float64(len(ds)-1)
		y := 120 - float64(max(d, 0))*120/float64(maxD)
		pts = append(pts, strconv.FormatFloat(x, 'f', 1, 64)+","+strconv.FormatFloat(y, 'f', 1, 64))
	}
	m := maxD.Round(100 * time.Microsecond).String()
	return &chart{Points: strings.Join(pts, " "), Max: m, N: len(ds),
		Label: fmt.Sprintf("Lateness of the last %d attempts, oldest to newest; the highest is %s", len(ds), m)}
}

// actions a job page offers, each confirmed first.
var actions = map[string]string{
	"pause":   "Pause this job? It stops firing until resumed; firings not yet started are dropped.",
	"resume":  "Resume this job? It fires from now on; slots missed while paused are not caught up.",
	"trigger": "Fire this job once, now, outside its schedule?",
	"delete":  "Delete this job? It stops firing for good; its history stays readable.",
	"cancel": "Cancel this execution? Its running attempt is abandoned and its target told; no retry of it fires. " +
		"Its request may already have had its effect.",
}

func (c *Console) confirmJobAction(w http.ResponseWriter, r *http.Request, s *session) {
	action := r.URL.Query().Get("action")
	question, ok := actions[action]
	if !ok {
		c.render(w, http.StatusNotFound, "error", s, map[string]any{"Title": "Not found", "Message": "no such action"})
		return
	}
	if !c.permit(w, s, action) {
		return
	}
	exec := r.URL.Query().Get("execution")
	if action == "cancel" && !executionID.MatchString(exec) {
		// The page would print it: only an id, never a link's own words.
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad request", "Message": "execution: not an execution id"})
		return
	}
	got, err := c.jobs.GetJob(s.call(r.Context()), &sundialv1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var hidden [][2]string
	if action == "cancel" {
		question = "Execution " + exec + ": " + question
		hidden = append(hidden, [2]string{"execution", exec})
	}
	c.render(w, http.StatusOK, "confirm", s, map[string]any{
		"Job": got.GetJob(), "Action": action, "Question": question, "Hidden": hidden,
		"Post": "/jobs/" + url.PathEscape(got.GetJob().GetId()) + "/" + action,
		"Back": "/jobs/" + url.PathEscape(got.GetJob().GetId()),
	})
}

func (c *Console) jobAction(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, id := s.call(r.Context()), r.PathValue("id")
	if _, ok := actions[r.PathValue("action")]; ok && !c.permit(w, s, r.PathValue("action")) {
		return
	}
	var err error
	var n notice
	switch r.PathValue("action") {
	case "pause":
		_, err = c.jobs.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: id})
		n.code = "paused"
	case "resume":
		_, err = c.jobs.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: id})
		n.code = "resumed"
	case "delete":
		_, err = c.jobs.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: id})
		n.code = "deleted"
	case "trigger":
		var resp *sundialv1.TriggerJobResponse
		resp, err = c.jobs.TriggerJob(ctx, &sundialv1.TriggerJobRequest{Id: id})
		n.code, n.execution = "triggered", resp.GetExecutionId()
	case "cancel":
		var resp *sundialv1.CancelExecutionResponse
		resp, err = c.jobs.CancelExecution(ctx, &sundialv1.CancelExecutionRequest{JobId: id, ExecutionId: r.FormValue("execution")})
		n.code, n.execution = "cancel-requested", resp.GetExecutionId()
	default:
		c.render(w, http.StatusNotFound, "error", s, map[string]any{"Title": "Not found", "Message": "no such action"})
		return
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/jobs/"+url.PathEscape(id)+"?"+n.query(), http.StatusSeeOther)
}

// form is the create form's values, echoed back with the api's field
// errors beside their fields.
type form struct {
	Name, Cron, Timezone, Payload, Priority, Labels, IdempotencyKey string
	// Kind is the target's: "http" (a webhook) or "kafka" (a topic).
	Kind                   string
	URL, Method, Headers   string
	Topic, Key             string
	MaxAttempts, Backoff   string
	InitialDelay, MaxDelay string
	// Misfire is the action (run_once, skip, run_all; "" the default),
	// MisfireGrace and MaxCatchUp its bounds.
	Misfire, MisfireGrace, MaxCatchUp string
	// Overlap is the policy (allow, skip, buffer_one, buffer_all,
	// cancel_other, terminate_other; "" the default).
	Overlap string
	// Timeout is the per-attempt timeout, Jitter the most jitter, Callback
	// the completion callback's URL.
	Timeout, Jitter, Callback string
	// The schedule's kind and its other fields; Cron and Timezone above.
	scheduleFields
	Errors map[string]string
	Other  []string
}

// fieldOf maps the api's field path to the form field that shows it.
func (f *form) fieldOf(path string) string {
	switch {
	case path == "name":
		return "Name"
	case path == "schedule" || strings.HasPrefix(path, "schedule."):
		return f.scheduleField(path)
	case path == "target.http.method":
		return "Method"
	case strings.HasPrefix(path, "target.http.headers"):
		return "Headers"
	case path == "target.kafka.key":
		return "Key"
	case strings.HasPrefix(path, "target.kafka"):
		return "Topic"
	case path == "target" && f.Kind == "kafka":
		return "Topic"
	case path == "target" || strings.HasPrefix(path, "target."):
		return "URL"
	case path == "retry.backoff":
		return "Backoff"
	case path == "retry.initial_delay":
		return "InitialDelay"
	case path == "retry.max_delay":
		return "MaxDelay"
	case path == "retry" || strings.HasPrefix(path, "retry."):
		return "MaxAttempts"
	case path == "payload":
		return "Payload"
	case path == "priority":
		return "Priority"
	case strings.HasPrefix(path, "labels"):
		return "Labels"
	case path == "idempotency_key":
		return "IdempotencyKey"
	case path == "misfire.grace":
		return "MisfireGrace"
	case path == "misfire.max_catch_up":
		return "MaxCatchUp"
	case path == "misfire" || strings.HasPrefix(path, "misfire."):
		return "Misfire"
	case path == "overlap":
		return "Overlap"
	case path == "attempt_timeout":
		return "Timeout"
	case path == "max_jitter":
		return "Jitter"
	case path == "callback_url":
		return "Callback"
	}
	return ""
}

// backoffs are the retry policy's backoff choices as the form names them;
// "" is the api's default (exponential).
var backoffs = []string{"fixed", "exponential", "exponential_with_jitter"}

// parseHeaders reads "Name: value" lines. A value may be a target secret
// reference, {{secret:NAME}}, kept as written.
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: write Name: value", i+1)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: %s is given twice", i+1, k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// headerText prints headers as "Name: value" lines, sorted by name.
func headerText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + ": " + m[k] + "\n")
	}
	return b.String()
}

var priorities = []string{"critical", "high", "medium", "low"}

func (c *Console) newJobPage(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "create") {
		return
	}
	f := form{Timezone: "UTC", Method: "POST", Priority: "medium", Kind: "http"}
	f.SchedKind = "cron"
	c.render(w, http.StatusOK, "new", s, map[string]any{"Form": f,
		"Priorities": priorities, "Backoffs": backoffs, "Calendars": c.calendarNames(r.Context(), s)})
}

// readForm reads the create/edit form into its values and the job they
// describe; what the console itself cannot read (a header line, a
// duration) is an error beside its field, and the api is not asked.
func readForm(r *http.Request) (form, *sundialv1.Job) {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	f := form{
		Name: r.PostFormValue("name"), Cron: v("cron"), Timezone: v("timezone"), Payload: r.PostFormValue("payload"),
		Priority: r.PostFormValue("priority"), Labels: r.PostFormValue("labels"), IdempotencyKey: v("idempotency_key"),
		Kind: v("kind"), URL: v("url"), Method: r.PostFormValue("method"), Headers: r.PostFormValue("headers"),
		Topic: v("topic"), Key: v("key"),
		MaxAttempts: v("max_attempts"), Backoff: v("backoff"), InitialDelay: v("initial_delay"), MaxDelay: v("max_delay"),
		Misfire: v("misfire"), MisfireGrace: v("misfire_grace"), MaxCatchUp: v("max_catch_up"), Overlap: v("overlap"),
		Timeout: v("attempt_timeout"), Jitter: v("max_jitter"), Callback: v("callback_url"),
		Errors: map[string]string{},
	}
	if f.Kind != "kafka" {
		f.Kind = "http"
	}
	job := &sundialv1.Job{
		Name:     f.Name,
		Schedule: readSchedule(&f, r.PostFormValue),
		Payload:  []byte(f.Payload),
	}
	if f.Kind == "kafka" {
		job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: f.Topic, Key: f.Key}}}
	} else {
		h := &sundialv1.HttpTarget{Url: f.URL, Method: f.Method}
		if headers, err := parseHeaders(f.Headers); err != nil {
			f.Errors["Headers"] = err.Error()
		} else if len(headers) > 0 {
			h.Headers = headers
		}
		job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: h}}
	}
	if p := strings.ToLower(f.Priority); slices.Contains(priorities, p) {
		job.Priority = sundialv1.Priority(sundialv1.Priority_value["PRIORITY_"+strings.ToUpper(p)])
	}
	if labels, err := parseLabels(f.Labels); err != nil {
		f.Errors["Labels"] = err.Error()
	} else {
		job.Labels = labels
	}
	if f.MaxAttempts != "" || f.Backoff != "" || f.InitialDelay != "" || f.MaxDelay != "" {
		rp := &sundialv1.RetryPolicy{}
		if f.MaxAttempts != "" {
			if n, err := strconv.ParseInt(f.MaxAttempts, 10, 32); err != nil {
				f.Errors["MaxAttempts"] = "a whole number of attempts, the first included"
			} else {
				rp.MaxAttempts = int32(n)
			}
		}
		if f.Backoff != "" {
			if b, ok := sundialv1.Backoff_value["BACKOFF_"+strings.ToUpper(f.Backoff)]; ok {
				rp.Backoff = sundialv1.Backoff(b)
			} else {
				f.Errors["Backoff"] = "unknown backoff " + f.Backoff
			}
		}
		for _, d := range []struct {
			key, text string
			into      **durationpb.Duration
		}{{"InitialDelay", f.InitialDelay, &rp.InitialDelay}, {"MaxDelay", f.MaxDelay, &rp.MaxDelay}} {
			if d.text == "" {
				continue
			}
			if v, err := time.ParseDuration(d.text); err != nil {
				f.Errors[d.key] = "a duration such as 10s or 1m30s"
			} else {
				*d.into = durationpb.New(v)
			}
		}
		job.Retry = rp
	}
	readPolicies(&f, job)
	return f, job
}

// readPolicies reads what the job does when things go wrong or pile up:
// misfire, overlap, timeout, jitter and the completion callback. The
// console checks only that it can read them; their bounds are the api's,
// whose refusals land beside these fields (fieldOf).
func readPolicies(f *form, job *sundialv1.Job) {
	duration := func(key, text string) *durationpb.Duration {
		if text == "" {
			return nil
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			f.Errors[key] = "a duration such as 10s or 1m30s"
			return nil
		}
		return durationpb.New(d)
	}
	if f.Misfire != "" || f.MisfireGrace != "" || f.MaxCatchUp != "" {
		m := &sundialv1.MisfirePolicy{Grace: duration("MisfireGrace", f.MisfireGrace)}
		if f.Misfire != "" {
			if a, ok := sundialv1.MisfireAction_value["MISFIRE_ACTION_"+strings.ToUpper(f.Misfire)]; ok {
				m.Action = sundialv1.MisfireAction(a)
			} else {
				f.Errors["Misfire"] = "unknown misfire policy " + f.Misfire
			}
		}
		if f.MaxCatchUp != "" {
			if n, err := strconv.ParseInt(f.MaxCatchUp, 10, 32); err != nil {
				f.Errors["MaxCatchUp"] = "a whole number of missed slots"
			} else {
				m.MaxCatchUp = int32(n)
			}
		}
		job.Misfire = m
	}
	if f.Overlap != "" {
		if o, ok := sundialv1.OverlapPolicy_value["OVERLAP_POLICY_"+strings.ToUpper(f.Overlap)]; ok {
			job.Overlap = sundialv1.OverlapPolicy(o)
		} else {
			f.Errors["Overlap"] = "unknown overlap policy " + f.Overlap
		}
	}
	job.AttemptTimeout = duration("Timeout", f.Timeout)
	job.MaxJitter = duration("Jitter", f.Jitter)
	job.CallbackUrl = f.Callback
}

// refused puts the api's answer to a create or update beside the form's
// fields; false when the error is not about the input.
func (f *form) refused(err error) bool {
	vs := client.FieldViolations(err)
	if vs == nil {
		if status.Code(err) != codes.ResourceExhausted && status.Code(err) != codes.FailedPrecondition {
			return false
		}
		f.Other = append(f.Other, status.Convert(err).Message())
	}
	for _, v := range vs {
		if field := f.fieldOf(v.Field); field != "" {
			if f.Errors[field] != "" {
				f.Errors[field] += "; "
			}
			f.Errors[field] += v.Field + ": " + v.Description
		} else {
			f.Other = append(f.Other, v.Field+": "+v.Description)
		}
	}
	return true
}

func (c *Console) createJob(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "create") {
		return
	}
	f, job := readForm(r)
	if len(f.Errors) == 0 {
		resp, err := c.jobs.CreateJob(s.call(r.Context()), &sundialv1.CreateJobRequest{Job: job, IdempotencyKey: f.IdempotencyKey})
		if err == nil {
			http.Redirect(w, r, "/jobs/"+url.PathEscape(resp.GetJob().GetId())+"?"+notice{code: "created"}.query(), http.StatusSeeOther)
			return
		}
		if !f.refused(err) {
			c.fail(w, r, s, err)
			return
		}
	}
	c.render(w, http.StatusBadRequest, "new", s, map[string]any{"Form": f, "Priorities": priorities, "Backoffs": backoffs, "Calendars": c.calendarNames(r.Context(), s)})
}

// editable says why a job cannot be edited in the form, or "".
func editable(job *sundialv1.Job) string {
	if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
		return "a deleted job cannot be edited"
	}
	return ""
}

func formOf(job *sundialv1.Job) form {
	f := form{Name: job.GetName(), Cron: job.GetSchedule().GetCron(), Timezone: job.GetSchedule().GetTimezone(),
		Payload: string(job.GetPayload()), Priority: enumName(job.GetPriority()), Labels: labelText(job.GetLabels()), Kind: "http"}
	scheduleFormOf(&f, job.GetSchedule())
	if k := job.GetTarget().GetKafka(); k != nil {
		f.Kind, f.Topic, f.Key = "kafka", k.GetTopic(), k.GetKey()
	} else {
		h := job.GetTarget().GetHttp()
		f.URL, f.Method, f.Headers = h.GetUrl(), h.GetMethod(), headerText(h.GetHeaders())
	}
	if rp := job.GetRetry(); rp != nil {
		if rp.GetMaxAttempts() != 0 {
			f.MaxAttempts = strconv.Itoa(int(rp.GetMaxAttempts()))
		}
		if rp.GetBackoff() != sundialv1.Backoff_BACKOFF_UNSPECIFIED {
			f.Backoff = strings.ToLower(strings.TrimPrefix(rp.GetBackoff().String(), "BACKOFF_"))
		}
		if rp.GetInitialDelay() != nil {
			f.InitialDelay = rp.GetInitialDelay().AsDuration().String()
		}
		if rp.GetMaxDelay() != nil {
			f.MaxDelay = rp.GetMaxDelay().AsDuration().String()
		}
	}
	if m := job.GetMisfire(); m != nil {
		if m.GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_UNSPECIFIED {
			f.Misfire = strings.ToLower(strings.TrimPrefix(m.GetAction().String(), "MISFIRE_ACTION_"))
		}
		if m.GetGrace() != nil {
			f.MisfireGrace = m.GetGrace().AsDuration().String()
		}
		if m.GetMaxCatchUp() != 0 {
			f.MaxCatchUp = strconv.Itoa(int(m.GetMaxCatchUp()))
		}
	}
	if o := job.GetOverlap(); o != sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		f.Overlap = strings.ToLower(strings.TrimPrefix(o.String(), "OVERLAP_POLICY_"))
	}
	if d := job.GetAttemptTimeout(); d != nil {
		f.Timeout = d.AsDuration().String()
	}
	if d := job.GetMaxJitter(); d != nil {
		f.Jitter = d.AsDuration().String()
	}
	f.Callback = job.GetCallbackUrl()
	return f
}

// changedPaths are the update mask paths of what the form changed from
// was: the target's kind changing replaces the whole target.
func changedPaths(f, was form) []string {
	var paths []string
	diff := func(path, now, then string) {
		if now != then {
			paths = append(paths, path)
		}
	}
	diff("name", f.Name, was.Name)
	paths = append(paths, scheduleChanges(f, was)...)
	switch {
	case f.Kind != was.Kind:
		paths = append(paths, "target")
	case f.Kind == "kafka":
		diff("target.kafka.topic", f.Topic, was.Topic)
		diff("target.kafka.key", f.Key, was.Key)
	default:
		diff("target.http.url", f.URL, was.URL)
		diff("target.http.method", f.Method, was.Method)
		// Compared as parsed, so spacing and order are not a change.
		now, _ := parseHeaders(f.Headers)
		then, _ := parseHeaders(was.Headers)
		diff("target.http.headers", headerText(now), headerText(then))
	}
	diff("retry.max_attempts", f.MaxAttempts, was.MaxAttempts)
	diff("retry.backoff", f.Backoff, was.Backoff)
	diff("retry.initial_delay", normDuration(f.InitialDelay), normDuration(was.InitialDelay))
	diff("retry.max_delay", normDuration(f.MaxDelay), normDuration(was.MaxDelay))
	diff("misfire.action", f.Misfire, was.Misfire)
	diff("misfire.grace", normDuration(f.MisfireGrace), normDuration(was.MisfireGrace))
	diff("misfire.max_catch_up", f.MaxCatchUp, was.MaxCatchUp)
	diff("overlap", f.Overlap, was.Overlap)
	diff("attempt_timeout", normDuration(f.Timeout), normDuration(was.Timeout))
	diff("max_jitter", normDuration(f.Jitter), normDuration(was.Jitter))
	diff("callback_url", f.Callback, was.Callback)
	diff("payload", f.Payload, was.Payload)
	diff("priority", strings.ToLower(f.Priority), was.Priority)
	diff("labels", f.Labels, was.Labels)
	return paths
}

// keepPoliciesNotPosted keeps the misfire, overlap, timeout, jitter,
// callback and schedule settings (other than cron and zone) an edit did
// not post at all as they were: a form rendered before the console had
// those fields (a page left open across an upgrade) or a script posting
// the older fields must not reset them to the api's defaults. Posted
// empty, a field does return to its default.
func keepPoliciesNotPosted(r *http.Request, f *form, was form) {
	fields := map[string][2]*string{
		"misfire": {&f.Misfire, &was.Misfire}, "misfire_grace": {&f.MisfireGrace, &was.MisfireGrace},
		"max_catch_up": {&f.MaxCatchUp, &was.MaxCatchUp}, "overlap": {&f.Overlap, &was.Overlap},
		"attempt_timeout": {&f.Timeout, &was.Timeout}, "max_jitter": {&f.Jitter, &was.Jitter},
		"callback_url": {&f.Callback, &was.Callback},
	}
	for k, v := range schedulePosted(f, &was) {
		fields[k] = v
	}
	for key, field := range fields {
		if _, posted := r.PostForm[key]; !posted {
			*field[0] = *field[1]
		}
	}
}

// normDuration prints a duration the way formOf does, so "90s" and
// "1m30s" are the same value.
func normDuration(s string) string {
	if d, err := time.ParseDuration(s); err == nil {
		return d.String()
	}
	return s
}

func (c *Console) editJobPage(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "edit") {
		return
	}
	got, err := c.jobs.GetJob(s.call(r.Context()), &sundialv1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if why := editable(got.GetJob()); why != "" {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Not editable here", "Message": why})
		return
	}
	c.render(w, http.StatusOK, "new", s, map[string]any{"Form": formOf(got.GetJob()), "Priorities": priorities, "Backoffs": backoffs, "Calendars": c.calendarNames(r.Context(), s), "Edit": got.GetJob()})
}

// editJob sends only the fields the form changed, so an untouched
// schedule is not a schedule change (no min_interval check, no re-staging
// for it).
// confirmEdit asks before an edit is saved, as every other change does:
// it names the fields that would change (the update mask the api will
// get) and posts the same form again, every field as it was sent, with
// confirm=yes. The api checks the values then; a refusal brings the form
// back with its errors beside their fields.
func (c *Console) confirmEdit(w http.ResponseWriter, r *http.Request, s *session, cur *sundialv1.Job, paths []string) {
	var hidden [][2]string
	keys := make([]string, 0, len(r.PostForm))
	for k := range r.PostForm {
		if k != "csrf" && k != "confirm" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range r.PostForm[k] {
			hidden = append(hidden, [2]string{k, v})
		}
	}
	id := url.PathEscape(cur.GetId())
	c.render(w, http.StatusOK, "confirm", s, map[string]any{
		"Job": cur, "Action": "save the edit", "Changes": paths,
		"Question": fmt.Sprintf("Save this edit? It changes %d field(s) of the job, and nothing else:", len(paths)),
		"Post":     "/jobs/" + id + "/edit", "Back": "/jobs/" + id, "Hidden": hidden,
	})
}

func (c *Console) editJob(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "edit") {
		return
	}
	ctx := s.call(r.Context())
	got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	cur := got.GetJob()
	if why := editable(cur); why != "" {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Not editable here", "Message": why})
		return
	}
	f, job := readForm(r)
	job.Id = cur.GetId()
	was := formOf(cur)
	keepPoliciesNotPosted(r, &f, was)
	paths := changedPaths(f, was)
	if len(f.Errors) == 0 {
		if len(paths) == 0 {
			http.Redirect(w, r, "/jobs/"+url.PathEscape(cur.GetId())+"?"+notice{code: "unchanged"}.query(), http.StatusSeeOther)
			return
		}
		if r.PostFormValue("confirm") != "yes" {
			c.confirmEdit(w, r, s, cur, paths)
			return
		}
		_, err := c.jobs.UpdateJob(ctx, &sundialv1.UpdateJobRequest{Job: job, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
		if err == nil {
			http.Redirect(w, r, "/jobs/"+url.PathEscape(cur.GetId())+"?"+notice{code: "updated", fields: paths}.query(), http.StatusSeeOther)
			return
		}
		if !f.refused(err) {
			c.fail(w, r, s, err)
			return
		}
	}
	c.render(w, http.StatusBadRequest, "new", s, map[string]any{"Form": f, "Priorities": priorities, "Backoffs": backoffs, "Calendars": c.calendarNames(r.Context(), s), "Edit": cur})
}

// deadLetters: newest first, filtered by job (its id, or the start of its
// name) and error class, each selectable for a re-drive; above them the
// groups of everything the filter matches, counted in Postgres.
func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	ctx := s.call(r.Context())
	job, err := c.resolveJob(r.Context(), s, q.Get("job"))
	if err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: job filter not read", "err", err)
		c.render(w, http.StatusServiceUnavailable, "error", s, map[string]any{"Title": "Unavailable", "Message": "The console cannot search job names right now (Postgres is not answering). Filter by the job's id, or try again shortly."})
		return
	}
	job.withLinks("/dead-letters", q)
	filter := &sundialv1.DeadLetterFilter{JobId: job.ID, ErrorClass: strings.TrimSpace(q.Get("class")), IncludeRedriven: q.Get("redriven") == "on"}
	data := map[string]any{"Filter": filter, "Job": job, "Done": bannerOf(q)}
	if job.ID == "" && job.Text != "" {
		// The text names no one job: offer the jobs it could mean.
		c.render(w, http.StatusOK, "deadletters", s, data)
		return
	}
	resp, err := c.dlq.ListDeadLetters(ctx, &sundialv1.ListDeadLettersRequest{Filter: filter, PageSize: 100, PageToken: q.Get("page")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var next string
	if t := resp.GetNextPageToken(); t != "" {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("page", t)
		next = "/dead-letters?" + nq.Encode()
	}
	ids := make([]string, 0, len(resp.GetDeadLetters()))
	for _, d := range resp.GetDeadLetters() {
		ids = append(ids, d.GetFiring().GetJobId())
	}
	data["DeadLetters"], data["Next"], data["Names"] = resp.GetDeadLetters(), next, c.namesFor(r.Context(), s, ids)
	if q.Get("page") == "" && len(resp.GetDeadLetters()) > 0 {
		groups, err := c.deadLetterGroups(r.Context(), s, filter, q)
		if err != nil {
			c.cfg.Logger.WarnContext(r.Context(), "console: dead-letter groups not counted", "err", err)
			data["GroupsError"] = "The groups are unavailable (Postgres did not answer)."
		}
		data["Groups"] = groups
	}
	c.render(w, http.StatusOK, "deadletters", s, data)
}

// group is one value of a grouping and how many dead letters have it;
// Name is a job's name when the grouping is by job. Unrecorded: the
// grouping's column is NULL for these rows (a host not stored yet).
type group struct {
	Key, Name, Link string
	Count           int64
	Unrecorded      bool
}

// redrive is a dry run unless the form confirms one: the first press shows
// what would be re-driven, the second does it. It takes the selected
// execution ids, or (scope=filter) every dead letter the list's filter
// matches that was not re-driven yet, up to 1,000, at a chosen rate.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "redrive") {
		return
	}
	req := &sundialv1.RedriveDeadLettersRequest{DryRun: r.PostFormValue("confirm") != "yes", Limit: 1000}
	hidden := [][2]string{}
	if r.PostFormValue("scope") == "filter" {
		req.Filter = &sundialv1.DeadLetterFilter{JobId: strings.TrimSpace(r.PostFormValue("job")), ErrorClass: strings.TrimSpace(r.PostFormValue("class"))}
		hidden = append(hidden, [2]string{"scope", "filter"}, [2]string{"job", req.Filter.JobId}, [2]string{"class", req.Filter.ErrorClass})
	} else {
		req.ExecutionIds = r.PostForm["id"]
		if len(req.ExecutionIds) == 0 {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Nothing selected", "Message": "Select the dead letters to re-drive."})
			return
		}
	}
	if rate := strings.TrimSpace(r.PostFormValue("rate")); rate != "" {
		v, err := strconv.ParseFloat(rate, 64)
		if err != nil || v <= 0 {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad rate", "Message": "the rate is firings per second, a positive number"})
			return
		}
		req.RatePerSecond = v
		hidden = append(hidden, [2]string{"rate", rate})
	}
	resp, err := c.dlq.RedriveDeadLetters(s.call(r.Context()), req)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if req.DryRun {
		ids := resp.GetExecutionIds()
		if req.Filter != nil && len(ids) > 20 {
			ids = ids[:20] // the confirmation re-applies the filter, not this list
		}
		c.render(w, http.StatusOK, "confirm", s, map[string]any{
			"Action": "re-drive", "Question": fmt.Sprintf("Re-drive %d dead letter(s), the last released at %s? Each gets a fresh round of attempts under its job's current definition.",
				resp.GetCount(), resp.GetLastReleaseTime().AsTime().UTC().Format(time.RFC3339)),
			"Post": "/dead-letters/redrive", "Back": "/dead-letters", "IDs": ids, "Hidden": hidden, "ByFilter": req.Filter != nil,
		})
		return
	}
	http.Redirect(w, r, "/dead-letters?"+notice{code: "redriven", n: int64(resp.GetCount())}.query(), http.StatusSeeOther)
}
