package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/server"
)

// auditPage is how many entries one page of the audit view shows.
const auditPage = 50

// auditRow is one entry of the merged view, with where it links: a job
// to its page (by name while it exists); a token, signing key or
// calendar, which have no console page, to its own trail.
type auditRow struct {
	Kind    string
	Time    *timestamppb.Timestamp
	Subject string
	Link    string
	Label   string
	Action  string
	Version int64
	Actor   string
	Detail  string
}

// auditActions are the action filter's suggestions: the actions an
// operator looks for across jobs (one-job changes are on the job's page).
// The filter takes any action word.
var auditActions = []string{"redrive", "cancel", "backfill", "trigger", "pause", "resume", "delete", "update", "create", "complete", "purge", "revoke", "rotate"}

// auditFilter is the view's query string: kind, action, actor, since and
// until (UTC, as the datetime-local inputs send them), job (one job's
// trail) and subject (with kind: one token's, key's or calendar's trail).
type auditFilter struct {
	Kind, Action, Actor, Since, Until, Job, Subject string
}

func (f auditFilter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"kind": f.Kind, "action": f.Action, "actor": f.Actor, "since": f.Since, "until": f.Until, "job": f.Job, "subject": f.Subject} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// parseAuditTime reads a datetime-local value (or RFC 3339) as UTC.
func parseAuditTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New(field + ": " + s + " is not a time (want 2006-01-02T15:04, UTC)")
}

// query turns the filter into the one store query, or an error naming
// the field that is wrong.
func (f auditFilter) query(s *session) (audittrail.Query, error) {
	q := audittrail.Query{Tenant: s.Tenant, Actor: f.Actor, Action: f.Action, Limit: auditPage + 1}
	if f.Action != "" {
		if err := audittrail.CheckAction(f.Action); err != nil {
			return q, errors.New("action: " + err.Error())
		}
	}
	var err error
	if q.Since, err = parseAuditTime("since", f.Since); err != nil {
		return q, err
	}
	if q.Until, err = parseAuditTime("until", f.Until); err != nil {
		return q, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, errors.New("until: must be after since")
	}
	if f.Job != "" {
		if _, err := uuid.Parse(f.Job); err != nil {
			return q, errors.New("job: " + f.Job + " is not a job id")
		}
		if f.Kind != "" && f.Kind != string(audittrail.KindJob) {
			return q, errors.New("kind: a job's trail is of kind job")
		}
		q.Kinds, q.Subject = []audittrail.Kind{audittrail.KindJob}, f.Job
	} else if f.Kind != "" {
		k, err := audittrail.ParseKind(f.Kind)
		if err != nil {
			return q, errors.New("kind: " + f.Kind + " is not a trail (job, token, signing-key, calendar)")
		}
		q.Kinds = []audittrail.Kind{k}
		if f.Subject != "" {
			if k == audittrail.KindJob {
				return q, errors.New("subject: a job's trail is asked for with job")
			}
			q.Subject = f.Subject
		}
	} else if f.Subject != "" {
		return q, errors.New("subject: needs a kind")
	}
	// Keep to the trails the session's role may read: the rule
	// AuditService.ListAudit enforces (a read-only token no token trail).
	if q.Kinds = server.ReadableTrails(s.role, q.Kinds); len(q.Kinds) == 0 {
		return q, status.Errorf(codes.PermissionDenied, "kind: role %s may not read the %s trail", s.role, f.Kind)
	}
	return q, nil
}

// audit: every change trail of the tenant merged (jobs, including bulk
// actions, re-drives and the platform's completions and purges; tokens;
// signing keys; calendars), newest first, filtered by kind, action,
// actor, time range or one job, 50 a page, paged by the trails' one
// cursor.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	in := r.URL.Query()
	f := auditFilter{Kind: strings.TrimSpace(in.Get("kind")), Action: strings.TrimSpace(in.Get("action")), Actor: strings.TrimSpace(in.Get("actor")),
		Since: strings.TrimSpace(in.Get("since")), Until: strings.TrimSpace(in.Get("until")), Job: strings.TrimSpace(in.Get("job")),
		Subject: strings.TrimSpace(in.Get("subject"))}
	data := map[string]any{"Filter": f, "Job": f.Job, "FirstPage": in.Get("page") == "", "Kinds": audittrail.Kinds, "Actions": auditActions}
	q, err := f.query(s)
	if err != nil {
		if status.Code(err) == codes.PermissionDenied {
			c.fail(w, r, s, err)
			return
		}
		data["Error"] = err.Error()
		c.render(w, http.StatusBadRequest, "audit", s, data)
		return
	}
	// The page token is valid for this tenant and these filters only.
	scope := f.values()
	scopeMap := map[string]string{"tenant": s.Tenant}
	for k := range scope {
		scopeMap[k] = scope.Get(k)
	}
	if tok := in.Get("page"); tok != "" {
		if q.After, err = audittrail.Decode(tok, scopeMap); err != nil || q.After.At.IsZero() {
			data["Error"] = "page: is not a page of this view with these filters; start over from the newest"
			c.render(w, http.StatusBadRequest, "audit", s, data)
			return
		}
	}
	entries, err := audittrail.List(r.Context(), c.cfg.Pool, q)
	if err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: audit view not read", "tenant", s.Tenant, "err", err)
		c.fail(w, r, s, status.Error(codes.Unavailable, "the audit trails could not be read"))
		return
	}
	ctx := s.call(r.Context())
	if len(entries) == 0 && f.Job != "" && in.Get("page") == "" {
		// No trail: tell a job without changes from one that is not the
		// tenant's (NotFound either way for another tenant's job).
		if _, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: f.Job}); err != nil {
			c.fail(w, r, s, err)
			return
		}
	}
	if len(entries) > auditPage {
		entries = entries[:auditPage]
		next := scope
		next.Set("page", entries[auditPage-1].Cursor(scopeMap).Encode())
		data["Next"] = "/audit?" + next.Encode()
	}
	// Names for the page's jobs: one read each of at most 50, and a purged
	// job (its trail outlives it) keeps only its id.
	names := map[string]string{}
	rows := make([]auditRow, 0, len(entries))
	for _, e := range entries {
		row := auditRow{Kind: string(e.Kind), Time: timestamppb.New(e.At), Subject: e.Subject, Label: e.Subject,
			Action: e.Action, Version: e.Version, Actor: e.Actor, Detail: e.Detail}
		switch e.Kind {
		case audittrail.KindJob:
			if _, ok := names[e.Subject]; !ok {
				got, err := c.jobs.GetJob(ctx, &sundialv1.GetJobRequest{Id: e.Subject})
				switch {
				case err == nil:
					names[e.Subject] = got.GetJob().GetName()
				case status.Code(err) == codes.NotFound:
					names[e.Subject] = ""
				default:
					c.fail(w, r, s, err)
					return
				}
			}
			row.Link = "/jobs/" + e.Subject
			if n := names[e.Subject]; n != "" {
				row.Label = n
			}
		default:
			row.Link = "/audit?" + url.Values{"kind": {string(e.Kind)}, "subject": {e.Subject}}.Encode()
		}
		rows = append(rows, row)
	}
	data["Rows"] = rows
	data["Newest"] = "/audit"
	if v := scope.Encode(); v != "" {
		data["Newest"] = "/audit?" + v
	}
	c.render(w, http.StatusOK, "audit", s, data)
}
