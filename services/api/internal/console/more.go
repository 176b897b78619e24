package console

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// payloadText shows a payload as text when it is UTF-8, else as base64
// (and says which).
func payloadText(b []byte) (string, string) {
	if len(b) == 0 {
		return "", "empty"
	}
	if utf8.Valid(b) {
		return string(b), fmt.Sprintf("%d bytes, text", len(b))
	}
	return base64.StdEncoding.EncodeToString(b), fmt.Sprintf("%d bytes, base64", len(b))
}

// deadLetter: one dead letter with the record it would re-drive: target,
// headers (secret references as written, never values), payload.
func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.dlq.GetDeadLetter(s.call(r.Context()), &sundialv1.GetDeadLetterRequest{ExecutionId: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := resp.GetDeadLetter()
	payload, kind := payloadText(d.GetFiring().GetPayload())
	c.render(w, http.StatusOK, "deadletter", s, map[string]any{"D": d, "Payload": payload, "PayloadKind": kind,
		"Names": c.namesFor(r.Context(), s, []string{d.GetFiring().GetJobId()})})
}

// execution: every attempt of one execution, with its full error and
// response excerpt.
func (c *Console) execution(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.jobs.GetExecution(s.call(r.Context()), &sundialv1.GetExecutionRequest{ExecutionId: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var ids []string
	for _, a := range resp.GetAttempts() {
		ids = append(ids, a.GetJobId())
	}
	c.render(w, http.StatusOK, "execution", s, map[string]any{"ID": r.PathValue("id"), "Attempts": resp.GetAttempts(),
		"Names": c.namesFor(r.Context(), s, ids)})
}

// backfillForm is the backfill form's values.
type backfillForm struct {
	From, To, Rate string
	Errors         map[string]string
	Other          []string
}

// slotsShown is how many of a dry run's slots one page lists: a 20 s
// cron over the default 24 hours has 4,321, once a 44,000-pixel page.
const slotsShown = 100

// slotPage is one page of a dry run's slots: which (1-based, as shown),
// how many there are in all, and the offsets of the pages around it.
type slotPage struct {
	Slots              []*timestamppb.Timestamp
	First, Last, Total int
	More               int
	Prev, Next         int
	HasPrev, HasNext   bool
}

// pageSlots cuts a dry run's slots to the page at offset (clamped to the
// slots there are, in steps of slotsShown).
func pageSlots(all []*timestamppb.Timestamp, offset int) slotPage {
	n := len(all)
	offset = max(0, min(offset, n-1)) / slotsShown * slotsShown
	end := min(n, offset+slotsShown)
	p := slotPage{Slots: all[offset:end], First: offset + 1, Last: end, Total: n, More: n - end,
		Prev: max(0, offset-slotsShown), Next: end, HasPrev: offset > 0, HasNext: end < n}
	if n == 0 {
		p.First = 0
	}
	return p
}

func (c *Console) backfillPage(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "backfill") {
		return
	}
	got, err := c.jobs.GetJob(s.call(r.Context()), &sundialv1.GetJobRequest{Id: r.PathValue("id")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	now := c.cfg.Clock.Now().UTC().Truncate(time.Minute)
	c.render(w, http.StatusOK, "backfill", s, map[string]any{"Job": got.GetJob(),
		"Form": backfillForm{From: now.Add(-24 * time.Hour).Format(localInput), To: now.Format(localInput), Rate: "10"}})
}

// localInput is the value of an <input type="datetime-local" step="1">:
// the browser's date and time picker, which the keyboard drives part by
// part. The backfill form reads it as UTC.
const localInput = "2006-01-02T15:04:05"

// parseRangeEnd reads a backfill bound: what the picker posts (seconds
// included or not), as UTC, or an RFC 3339 instant with its offset, which
// a browser without the picker lets one type.
func parseRangeEnd(s string) (time.Time, bool) {
	for _, layout := range []string{localInput, "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, true
		}
	}
	t, err := time.Parse(time.RFC3339, s)
	// To the second, as the picker shows it.
	return t.UTC().Truncate(time.Second), err == nil
}

// backfill is a dry run first: the answer lists the slots and asks for a
// confirmation, which repeats the request for real.
func (c *Console) backfill(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, id := s.call(r.Context()), r.PathValue("id")
	// The dry run too: BackfillJob is a write whether or not it stages
	// (it used to come back as a form error, 400).
	if !c.permit(w, s, "backfill") {
		return
	}
	got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	f := backfillForm{From: strings.TrimSpace(r.PostFormValue("from")), To: strings.TrimSpace(r.PostFormValue("to")),
		Rate: strings.TrimSpace(r.PostFormValue("rate")), Errors: map[string]string{}}
	req := &sundialv1.BackfillJobRequest{Id: id, DryRun: r.PostFormValue("confirm") != "yes"}
	// A bound that reads is shown back as the picker's UTC value, so the
	// dry run's (read-only) fields post exactly the range it counted.
	if t, ok := parseRangeEnd(f.From); !ok {
		f.Errors["From"] = "a date and time in UTC, such as 2026-11-20T00:00:00"
	} else {
		req.StartTime, f.From = timestamppb.New(t), t.Format(localInput)
	}
	if t, ok := parseRangeEnd(f.To); !ok {
		f.Errors["To"] = "a date and time in UTC, such as 2026-11-21T00:00:00"
	} else {
		req.EndTime, f.To = timestamppb.New(t), t.Format(localInput)
	}
	if f.Rate != "" {
		if v, err := strconv.ParseFloat(f.Rate, 64); err != nil {
			f.Errors["Rate"] = "firings per second, a number"
		} else {
			req.RatePerSecond = v
		}
	}
	if len(f.Errors) == 0 {
		resp, err := c.jobs.BackfillJob(ctx, req)
		switch {
		case err == nil && req.DryRun:
			offset, _ := strconv.Atoi(r.PostFormValue("offset"))
			c.render(w, http.StatusOK, "backfill", s, map[string]any{"Job": got.GetJob(), "Form": f, "Preview": resp,
				"SlotPage": pageSlots(resp.GetSlots(), offset)})
			return
		case err == nil:
			http.Redirect(w, r, "/jobs/"+url.PathEscape(id)+"?"+notice{code: "backfilled", n: int64(resp.GetCount())}.query(), http.StatusSeeOther)
			return
		}
		vs := client.FieldViolations(err)
		if vs == nil {
			if code := status.Code(err); code != codes.InvalidArgument && code != codes.FailedPrecondition && code != codes.OutOfRange {
				// Refused for who asks, not for what: 403 naming the
				// role, 404, 503 — never a form error.
				c.fail(w, r, s, err)
				return
			}
			f.Other = append(f.Other, status.Convert(err).Message())
		}
		for _, v := range vs {
			switch v.Field {
			case "start_time":
				f.Errors["From"] = v.Description
			case "end_time":
				f.Errors["To"] = v.Description
			case "rate_per_second":
				f.Errors["Rate"] = v.Description
			default:
				f.Other = append(f.Other, v.Field+": "+v.Description)
			}
		}
	}
	c.render(w, http.StatusBadRequest, "backfill", s, map[string]any{"Job": got.GetJob(), "Form": f})
}

// preview answers the create form's live preview as JSON: the next five
// instants of the schedule the form's fields describe (any kind, with its
// bounds, DST policies and calendar, in its time zone), the instants the
// calendar moved or removed, or what is wrong with the fields, each error
// under the form field it belongs to (the same names as the form's own
// errors), so the script can show it beside that field.
func (c *Console) preview(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	type fieldError struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	out := struct {
		Times       []string     `json:"times"`
		Description string       `json:"description,omitempty"`
		Adjustments []string     `json:"adjustments,omitempty"`
		Error       string       `json:"error,omitempty"`
		Errors      []fieldError `json:"errors,omitempty"`
	}{Times: []string{}}
	f := form{Cron: strings.TrimSpace(q.Get("cron")), Timezone: strings.TrimSpace(q.Get("timezone")), Errors: map[string]string{}}
	sched := readSchedule(&f, q.Get)
	if len(f.Errors) == 0 {
		resp, err := c.jobs.PreviewSchedule(s.call(r.Context()), &sundialv1.PreviewScheduleRequest{Count: 5, Schedule: sched})
		if err != nil {
			if !f.refused(err) {
				f.Other = append(f.Other, status.Convert(err).Message())
			}
		} else {
			out.Description = resp.GetDescription()
			for _, t := range resp.GetTimes() {
				out.Times = append(out.Times, t.AsTime().UTC().Format("2006-01-02 15:04:05Z"))
			}
			for _, a := range resp.GetAdjustments() {
				out.Adjustments = append(out.Adjustments, a.GetReason())
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Errors)) {
		out.Errors = append(out.Errors, fieldError{Field: k, Message: f.Errors[k]})
	}
	var msgs []string
	for _, e := range out.Errors {
		msgs = append(msgs, e.Message)
	}
	out.Error = strings.Join(append(msgs, f.Other...), "; ")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
