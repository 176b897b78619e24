package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sundialhq/sundial/pkg/domain/auth"
)

// Ending a tenant's sessions: every console session signed in to the
// tenant, whatever token it was made from, ends at once on every replica
// (within the session cache time). A tenant's admin ends its own
// tenant's; an operator any tenant's, named on the form. Both go through
// a confirmation first and write a console_audit row.

// sessionsTarget is the tenant a request may end the sessions of, or why
// not.
func sessionsTarget(s *session, named string) (tenant, refusal string) {
	named = strings.TrimSpace(named)
	switch s.role {
	case auth.RoleAdmin:
		if named != "" && named != s.Tenant {
			return "", "A tenant's admin ends its own tenant's sessions only."
		}
		return s.Tenant, ""
	case auth.RoleOperator:
		if named == "" {
			return s.Tenant, ""
		}
		if !auth.ValidName(named, false) {
			return "", "tenant: not a tenant name (letters, digits, '.', '_', '-')."
		}
		return named, ""
	}
	return "", "Only a tenant's admin, or an operator, may end sessions."
}

// sessionsPage shows how many sessions the tenant has, and the way to end
// them all; ?confirm=yes (the button) asks first.
func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	if q.Get("confirm") == "yes" {
		tenant, why := sessionsTarget(s, q.Get("tenant"))
		if why != "" {
			c.render(w, http.StatusForbidden, "error", s, map[string]any{"Title": "Refused", "Message": why})
			return
		}
		question := "End every console session of tenant " + tenant + "? Everyone signed in to it, on every replica, must sign in again."
		if tenant == s.Tenant {
			question += " That includes this session."
		}
		c.render(w, http.StatusOK, "confirm", s, map[string]any{
			"Action": "end all sessions", "Question": question,
			"Hidden": [][2]string{{"tenant", tenant}}, "Post": "/sessions/end", "Back": "/sessions",
		})
		return
	}
	n, err := c.sessions.count(r.Context(), s.Tenant)
	if err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: sessions not counted", "err", err)
		c.render(w, http.StatusServiceUnavailable, "error", s, map[string]any{"Title": "Unavailable", "Message": "The console cannot read its sessions right now."})
		return
	}
	c.render(w, http.StatusOK, "sessions", s, map[string]any{"Count": n, "Done": bannerOf(q),
		"Idle": c.cfg.IdleTimeout.String(), "TTL": c.cfg.SessionTTL.String(),
		"CanEnd": s.role == auth.RoleAdmin || s.role == auth.RoleOperator, "Operator": s.role == auth.RoleOperator})
}

// endSessions ends every session of the tenant and audits it.
func (c *Console) endSessions(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, why := sessionsTarget(s, r.PostFormValue("tenant"))
	if why != "" {
		c.render(w, http.StatusForbidden, "error", s, map[string]any{"Title": "Refused", "Message": why})
		return
	}
	ctx := r.Context()
	n, err := c.sessions.endTenant(ctx, tenant)
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "console: tenant's sessions not ended", "err", err)
		c.render(w, http.StatusServiceUnavailable, "error", s, map[string]any{"Title": "Unavailable", "Message": "The sessions were not ended: Postgres did not answer. Try again."})
		return
	}
	c.metrics.sessionsEnded.WithLabelValues("tenant").Add(float64(n))
	if _, err := c.cfg.Pool.Exec(ctx, `INSERT INTO console_audit (at, event, source, tenant, actor, detail) VALUES ($1, 'sessions-ended', $2, $3, $4, $5)`,
		c.cfg.Clock.Now(), sourceOf(r.RemoteAddr), tenant, s.Actor, map[string]any{"count": n, "by_tenant": s.Tenant}); err != nil {
		c.cfg.Logger.WarnContext(ctx, "console: sessions-ended audit not written", "err", err)
	}
	c.cfg.Logger.InfoContext(ctx, "console: tenant's sessions ended", "tenant", tenant, "actor", s.Actor, "count", n)
	if tenant == s.Tenant {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/sessions?"+url.Values{"done": {"sessions-ended"}, "n": {strconv.FormatInt(n, 10)}}.Encode(), http.StatusSeeOther)
}
