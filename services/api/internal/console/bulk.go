package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// maxSelected bounds a bulk action on selected rows: the ids travel in the
// form, and a page shows 50. Everything a filter matches, however many,
// goes through the api's BulkJobAction instead.
const maxSelected = 1000

var bulkVerbs = map[string]string{"pause": "Pause", "resume": "Resume", "delete": "Delete"}

var bulkActions = map[string]sundialv1.BulkAction{
	"pause": sundialv1.BulkAction_BULK_ACTION_PAUSE, "resume": sundialv1.BulkAction_BULK_ACTION_RESUME, "delete": sundialv1.BulkAction_BULK_ACTION_DELETE,
}

// bulk pauses, resumes or deletes the selected jobs, or every job the
// list's filter matches. The first POST counts and asks; the confirmation
// applies.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, s *session) {
	if !c.permit(w, s, "bulk") {
		return
	}
	action := r.PostFormValue("action")
	verb, ok := bulkVerbs[action]
	if !ok {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad request", "Message": "no such bulk action"})
		return
	}
	f := readFilter(r.PostFormValue)
	if len(f.Errors) > 0 {
		c.render(w, http.StatusBadRequest, "jobs", s, map[string]any{"Filter": f, "Statuses": statuses, "FirstPage": true})
		return
	}
	if r.PostFormValue("scope") == "filter" {
		c.bulkByFilter(w, r, s, action, verb, f)
		return
	}
	c.bulkSelected(w, r, s, action, verb, f)
}

// bulkByFilter: the api counts what the filter matches (a dry run) and the
// confirmation says how many; confirmed, the api changes them in calls of
// BulkBatch jobs, each continuing after the last, for up to BulkBudget.
// Past that the page says how far it got and offers to continue from
// there, so no request outlives a proxy's timeout however many jobs match.
// Each call re-applies the filter: jobs that stopped or started matching
// since the count are judged as they are then.
func (c *Console) bulkByFilter(w http.ResponseWriter, r *http.Request, s *session, action, verb string, f listFilter) {
	ctx := s.call(r.Context())
	hidden := [][2]string{{"action", action}, {"scope", "filter"}}
	hidden = append(hidden, f.Pairs()...)
	if r.PostFormValue("confirm") != "yes" {
		req := f.bulkRequest(bulkActions[action])
		req.DryRun = true
		resp, err := c.jobs.BulkJobAction(ctx, req)
		if err != nil {
			if f.refused(err) {
				c.render(w, http.StatusBadRequest, "jobs", s, map[string]any{"Filter": f, "Statuses": statuses, "FirstPage": true})
				return
			}
			c.fail(w, r, s, err)
			return
		}
		if resp.GetMatched() == 0 {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Nothing matches", "Message": "No job matches the filter (" + f.text() + ")."})
			return
		}
		count := thousands(resp.GetMatched())
		if resp.GetCappedCount() {
			count = "more than " + count
		}
		c.render(w, http.StatusOK, "confirm", s, map[string]any{
			"Action": action, "Question": fmt.Sprintf("%s every job the filter (%s) matches: %s job(s)?", verb, f.text(), count),
			"Post": "/jobs/bulk", "Back": "/jobs?" + f.values().Encode(), "Jobs": resp.GetSample(),
			"More": resp.GetMatched() - int64(len(resp.GetSample())), "MorePlus": resp.GetCappedCount(), "Hidden": hidden,
		})
		return
	}
	// Running totals of earlier rounds, carried by the continue form (only
	// shown, never trusted for anything else).
	atoi := func(k string) int64 { n, _ := strconv.ParseInt(r.PostFormValue(k), 10, 64); return max(n, 0) }
	changed, seen, refusedN := atoi("changed"), atoi("seen"), atoi("refused")
	var refused []string
	tok := r.PostFormValue("page_token")
	deadline := c.cfg.Clock.Now().Add(c.cfg.BulkBudget)
	for {
		req := f.bulkRequest(bulkActions[action])
		req.Limit, req.PageToken = int32(c.cfg.BulkBatch), tok
		resp, err := c.jobs.BulkJobAction(ctx, req)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		changed += resp.GetChanged()
		seen += resp.GetMatched()
		refusedN += int64(len(resp.GetRefused()))
		for _, x := range resp.GetRefused() {
			if len(refused) < 5 {
				refused = append(refused, x.GetName()+": "+x.GetReason())
			}
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
		if !c.cfg.Clock.Now().Before(deadline) {
			h := append(hidden, [2]string{"page_token", tok}, [2]string{"changed", strconv.FormatInt(changed, 10)},
				[2]string{"seen", strconv.FormatInt(seen, 10)}, [2]string{"refused", strconv.FormatInt(refusedN, 10)})
			c.render(w, http.StatusOK, "confirm", s, map[string]any{
				"Action": "continue", "Progress": true,
				"Question": fmt.Sprintf("%s so far: %s of %s job(s) gone through changed; more jobs match the filter (%s). Continue from where it stopped?",
					pastTense(verb), thousands(changed), thousands(seen), f.text()),
				"Post": "/jobs/bulk", "Back": "/jobs?" + f.values().Encode(), "Hidden": h, "Refused": refused,
			})
			return
		}
	}
	// The refusals' reasons were on the progress pages; the banner is
	// counts only (banner.go).
	n := notice{code: "bulk-" + strings.ToLower(pastTense(verb)), n: changed, m: seen - changed - refusedN, k: refusedN}
	q := f.values()
	for k, v := range n.values() {
		q[k] = v
	}
	http.Redirect(w, r, "/jobs?"+q.Encode(), http.StatusSeeOther)
}

// bulkSelected changes the selected rows, each through its own call.
func (c *Console) bulkSelected(w http.ResponseWriter, r *http.Request, s *session, action, verb string, f listFilter) {
	ctx := s.call(r.Context())
	ids := r.PostForm["id"]
	if len(ids) > maxSelected {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Too many jobs",
			"Message": fmt.Sprintf("At most %d selected at once; to change more, use the buttons for everything the filter matches.", maxSelected)})
		return
	}
	var jobs []*sundialv1.Job
	for _, id := range ids {
		got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		jobs = append(jobs, got.GetJob())
	}
	if len(jobs) == 0 {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Nothing selected", "Message": "Select jobs, or filter the list, first."})
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		shown := jobs
		if len(shown) > 20 {
			shown = shown[:20]
		}
		h := [][2]string{{"action", action}}
		h = append(h, f.Pairs()...)
		for _, j := range jobs {
			h = append(h, [2]string{"id", j.GetId()})
		}
		c.render(w, http.StatusOK, "confirm", s, map[string]any{
			"Action": action, "Question": fmt.Sprintf("%s the selected %d job(s)?", verb, len(jobs)),
			"Post": "/jobs/bulk", "Back": "/jobs", "Jobs": shown, "More": int64(len(jobs) - len(shown)), "Hidden": h,
		})
		return
	}
	done, failed := 0, []string{}
	for _, j := range jobs {
		var err error
		switch action {
		case "pause":
			_, err = c.jobs.PauseJob(ctx, &sundialv1.PauseJobRequest{Id: j.GetId()})
		case "resume":
			_, err = c.jobs.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: j.GetId()})
		case "delete":
			_, err = c.jobs.DeleteJob(ctx, &sundialv1.DeleteJobRequest{Id: j.GetId()})
		}
		switch {
		case err == nil:
			done++
		case status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.NotFound:
			failed = append(failed, j.GetName()+": "+status.Convert(err).Message())
		default:
			// The api is failing: stop rather than fail a thousand times.
			c.fail(w, r, s, err)
			return
		}
	}
	if len(failed) > 0 {
		// A banner is counts only (banner.go): the reasons are logged.
		c.cfg.Logger.InfoContext(r.Context(), "console: bulk action refused for some jobs", "tenant", s.Tenant, "refused", failed)
	}
	n := notice{code: "bulk-" + strings.ToLower(pastTense(verb)), n: int64(done), k: int64(len(failed))}
	q := f.values()
	for k, v := range n.values() {
		q[k] = v
	}
	http.Redirect(w, r, "/jobs?"+q.Encode(), http.StatusSeeOther)
}

func pastTense(verb string) string { return verb + "d" } // Pause, Resume, Delete

// thousands prints 1234567 as "1,234,567".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
