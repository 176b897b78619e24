package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// executionsForm is the Executions page's filter as the form holds it:
// the range in UTC (as typed, so a refused value is shown back) and the
// statuses ticked.
type executionsForm struct {
	From, To string
	Statuses map[string]bool
	// Problem names the field the console could not read.
	Problem string
}

// executionStatuses are the statuses the filter offers, in the ledger's
// order of an attempt's life.
var executionStatuses = func() []string {
	var out []string
	for n := int32(1); ; n++ {
		name, ok := sundialv1.ExecutionStatus_name[n]
		if !ok {
			return out
		}
		out = append(out, strings.ToLower(strings.TrimPrefix(name, "EXECUTION_STATUS_")))
	}
}()

// consoleTimeLayouts are what the range fields accept: RFC 3339, or a UTC
// wall-clock time to the minute or second.
var consoleTimeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"}

func parseConsoleTime(s string) (time.Time, bool) {
	for _, l := range consoleTimeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// executionsRequest reads the page's query into the api's request; a value
// it cannot read is named in the form's Problem, and nothing is asked.
func executionsRequest(q url.Values) (*sundialv1.ListTenantExecutionsRequest, executionsForm) {
	f := executionsForm{From: strings.TrimSpace(q.Get("from")), To: strings.TrimSpace(q.Get("to")), Statuses: map[string]bool{}}
	req := &sundialv1.ListTenantExecutionsRequest{PageSize: 100, PageToken: q.Get("page")}
	for _, field := range []struct {
		name, value string
		dst         **timestamppb.Timestamp
	}{{"from", f.From, &req.StartTime}, {"to", f.To, &req.EndTime}} {
		if field.value == "" {
			continue
		}
		t, ok := parseConsoleTime(field.value)
		if !ok {
			f.Problem = field.name + ": want a UTC time such as 2026-11-26 09:00, or RFC 3339"
			return nil, f
		}
		*field.dst = timestamppb.New(t)
	}
	for _, s := range q["status"] {
		v, ok := sundialv1.ExecutionStatus_value["EXECUTION_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			f.Problem = "status: " + s + " is not an execution status"
			return nil, f
		}
		f.Statuses[s] = true
		req.Statuses = append(req.Statuses, sundialv1.ExecutionStatus(v))
	}
	return req, f
}

// executions is the Executions page: the tenant's attempts of every job in
// a time range (the last 24 hours by default), filtered by status, newest
// first, a page at a time. With a job (its id, or the start of its name)
// it reads that job's history instead (ListExecutions, newest first) and
// keeps the rows in the range and of the statuses ticked.
func (c *Console) executions(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	req, form := executionsRequest(q)
	data := map[string]any{"Form": form, "Statuses": executionStatuses}
	if req == nil {
		data["Error"] = form.Problem
		data["Job"] = jobChoice{Text: strings.TrimSpace(q.Get("job"))}
		c.render(w, http.StatusBadRequest, "executions", s, data)
		return
	}
	job, err := c.resolveJob(r.Context(), s, q.Get("job"))
	if err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: job filter not read", "err", err)
		c.render(w, http.StatusServiceUnavailable, "error", s, map[string]any{"Title": "Unavailable", "Message": "The console cannot search job names right now (Postgres is not answering). Filter by the job's id, or try again shortly."})
		return
	}
	job.withLinks("/executions", q)
	data["Job"] = job
	if job.Text != "" && job.ID == "" {
		c.render(w, http.StatusOK, "executions", s, data)
		return
	}
	var attempts []*sundialv1.ExecutionAttempt
	var token string
	if job.ID != "" {
		resp, err := c.jobs.ListExecutions(s.call(r.Context()), &sundialv1.ListExecutionsRequest{JobId: job.ID, PageSize: 100, PageToken: q.Get("page")})
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		attempts, token = keepExecutions(resp.GetAttempts(), req), resp.GetNextPageToken()
	} else {
		resp, err := c.jobs.ListTenantExecutions(s.call(r.Context()), req)
		if err != nil {
			if st := status.Convert(err); st.Code() == codes.InvalidArgument { // the api names the field
				data["Error"] = st.Message()
				c.render(w, http.StatusBadRequest, "executions", s, data)
				return
			}
			c.fail(w, r, s, err)
			return
		}
		attempts, token = resp.GetAttempts(), resp.GetNextPageToken()
	}
	if token != "" {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("page", token)
		data["Next"] = "/executions?" + nq.Encode()
	}
	ids := make([]string, 0, len(attempts))
	for _, a := range attempts {
		ids = append(ids, a.GetJobId())
	}
	data["Attempts"], data["Names"] = attempts, c.namesFor(r.Context(), s, ids)
	data["Paged"] = q.Get("page") != ""
	c.render(w, http.StatusOK, "executions", s, data)
}

// keepExecutions keeps the attempts of one job's page whose slot is in
// the request's range (when it names one) and whose status is ticked
// (none ticked: all).
func keepExecutions(in []*sundialv1.ExecutionAttempt, req *sundialv1.ListTenantExecutionsRequest) []*sundialv1.ExecutionAttempt {
	var out []*sundialv1.ExecutionAttempt
	for _, a := range in {
		t := a.GetScheduledTime().AsTime()
		if req.GetStartTime() != nil && t.Before(req.GetStartTime().AsTime()) ||
			req.GetEndTime() != nil && !t.Before(req.GetEndTime().AsTime()) {
			continue
		}
		if len(req.GetStatuses()) > 0 && !slices.Contains(req.GetStatuses(), a.GetStatus()) {
			continue
		}
		out = append(out, a)
	}
	return out
}
