package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// maxBulk bounds one bulk action: each job is one change (a version, an
// audit row, its unpublished firings dropped), made one after the other
// inside one request. More than this is refused with a count, so the user
// narrows the filter rather than waiting on a request that times out.
const maxBulk = 1000

var bulkVerbs = map[string]string{"pause": "Pause", "resume": "Resume", "delete": "Delete"}

// bulk pauses, resumes or deletes the selected jobs, or every job the
// list's filter matches. The first POST counts and asks; the confirmation
// applies. For a filter the confirmation lists the filter again, so jobs
// that stopped or started matching in between are judged as they are then.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := s.call(r.Context())
	action := r.PostFormValue("action")
	verb, ok := bulkVerbs[action]
	if !ok {
		c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad request", "Message": "no such bulk action"})
		return
	}
	statusText, labelText, nameText := r.PostFormValue("status"), strings.TrimSpace(r.PostFormValue("labels")), strings.TrimSpace(r.PostFormValue("name"))
	byFilter := r.PostFormValue("scope") == "filter"
	var jobs []*sundialv1.Job
	if byFilter {
		req := &sundialv1.ListJobsRequest{PageSize: maxBulk, NameContains: nameText}
		if statusText != "" {
			v, ok := sundialv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(statusText)]
			if !ok {
				c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad filter", "Message": "unknown status " + statusText})
				return
			}
			req.Status = sundialv1.JobStatus(v)
		}
		if labelText != "" {
			labels, err := parseLabels(labelText)
			if err != nil {
				c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Bad filter", "Message": err.Error()})
				return
			}
			req.Labels = labels
		}
		resp, err := c.jobs.ListJobs(ctx, req)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		if resp.GetNextPageToken() != "" {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Too many jobs",
				"Message": fmt.Sprintf("The filter matches more than %d jobs; narrow it (status, labels) and apply it in parts.", maxBulk)})
			return
		}
		jobs = resp.GetJobs()
	} else {
		ids := r.PostForm["id"]
		if len(ids) > maxBulk {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": "Too many jobs", "Message": fmt.Sprintf("At most %d at once.", maxBulk)})
			return
		}
		for _, id := range ids {
			got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
			if err != nil {
				c.fail(w, r, s, err)
				return
			}
			jobs = append(jobs, got.GetJob())
		}
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
		what := "the selected"
		if byFilter {
			what = "every job the filter (" + filterText(statusText, labelText, nameText) + ") matches:"
		}
		c.render(w, http.StatusOK, "confirm", s, map[string]any{
			"Action": strings.ToLower(verb), "Question": fmt.Sprintf("%s %s %d job(s)?", verb, what, len(jobs)),
			"Post": "/jobs/bulk", "Back": "/jobs", "Jobs": shown, "More": len(jobs) - len(shown),
			"Hidden": bulkHidden(action, byFilter, statusText, labelText, nameText, jobs),
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
	notice := fmt.Sprintf("%sd: %d job(s)", strings.ToLower(verb), done)
	if len(failed) > 0 {
		notice += fmt.Sprintf("; %d refused (%s)", len(failed), strings.Join(failed, "; "))
	}
	q := url.Values{"done": {notice}}
	if statusText != "" {
		q.Set("status", statusText)
	}
	if labelText != "" {
		q.Set("labels", labelText)
	}
	if nameText != "" {
		q.Set("name", nameText)
	}
	http.Redirect(w, r, "/jobs?"+q.Encode(), http.StatusSeeOther)
}

func filterText(statusText, labelText, nameText string) string {
	parts := []string{}
	if statusText != "" {
		parts = append(parts, "status "+statusText)
	} else {
		parts = append(parts, "all but deleted")
	}
	if labelText != "" {
		parts = append(parts, "labels "+labelText)
	}
	if nameText != "" {
		parts = append(parts, "name containing "+nameText)
	}
	return strings.Join(parts, ", ")
}

// bulkHidden is what the confirmation form posts back.
func bulkHidden(action string, byFilter bool, statusText, labelText, nameText string, jobs []*sundialv1.Job) [][2]string {
	h := [][2]string{{"action", action}}
	if byFilter {
		return append(h, [2]string{"scope", "filter"}, [2]string{"status", statusText}, [2]string{"labels", labelText}, [2]string{"name", nameText})
	}
	for _, j := range jobs {
		h = append(h, [2]string{"id", j.GetId()})
	}
	return h
}
