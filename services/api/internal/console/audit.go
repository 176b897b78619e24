package console

import (
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// auditRow is one audit entry with its job's name, when the job still
// exists.
type auditRow struct {
	*sundialv1.AuditEntry
	JobName string
}

// audit: who changed what and when, across the tenant's jobs (or one
// job's, ?job=id), newest first, 50 a page.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := s.call(r.Context())
	q := r.URL.Query()
	job := strings.TrimSpace(q.Get("job"))
	resp, err := c.jobs.ListJobAudit(ctx, &sundialv1.ListJobAuditRequest{Id: job, PageSize: 50, PageToken: q.Get("page")})
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	// Names for the page's jobs: one read each of at most 50, and a purged
	// job (its trail outlives it) keeps only its id.
	names := map[string]string{}
	rows := make([]auditRow, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		id := e.GetJobId()
		if _, ok := names[id]; !ok {
			got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: id})
			switch {
			case err == nil:
				names[id] = got.GetJob().GetName()
			case status.Code(err) == codes.NotFound:
				names[id] = ""
			default:
				c.fail(w, r, s, err)
				return
			}
		}
		rows = append(rows, auditRow{AuditEntry: e, JobName: names[id]})
	}
	data := map[string]any{"Rows": rows, "Job": job, "FirstPage": q.Get("page") == ""}
	if t := resp.GetNextPageToken(); t != "" {
		nq := url.Values{"page": {t}}
		if job != "" {
			nq.Set("job", job)
		}
		data["Next"] = "/audit?" + nq.Encode()
	}
	c.render(w, http.StatusOK, "audit", s, data)
}
