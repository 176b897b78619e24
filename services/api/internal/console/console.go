// Package console is Sundial's web console: server-rendered HTML pages
// (html/template, a stylesheet, no JavaScript needed, nothing fetched from
// the internet) served by the api under its HTTP listener.
//
// The console holds no authority of its own. A user signs in with a bearer
// token; the session lives in Postgres and the browser holds only its
// random id in an HttpOnly, SameSite=Strict cookie (session.go), sign-in
// is throttled per address and per token (throttle.go), and every page
// makes its calls to the api's
// own gRPC server over the loopback connection with that token, so the
// gRPC interceptors decide the tenant exactly as for any other client: a
// job of another tenant is NotFound whatever URL is typed. Every action is
// a POST carrying the session's CSRF token, refused with 403 without it,
// and every change goes through a confirmation page first. Templates
// escape everything they print, and a strict Content-Security-Policy
// forbids inline script, so a job named <script>…</script> is text.
//
// Pages: / (overview, live by polling: static/live.js fetches the page
// again and swaps its figures in), /jobs (filters, keyset paging), /jobs/new (create
// form with the api's field errors beside their fields), /jobs/{id} (spec,
// next 20 instants, history, audit, actions), /dead-letters (filter,
// select, re-drive with a dry run first), /audit (who changed what, across
// the tenant's jobs), /sessions (the tenant's signed-in sessions; an admin
// or an operator ends them all).
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

//go:embed templates/*.html static/*
var assets embed.FS

const cookieName = "sundial_session"

// Config configures the console.
type Config struct {
	// Conn is the loopback connection to the api's gRPC server.
	Conn grpc.ClientConnInterface
	// Tokens lets sign-in refuse an unknown token at once (the gRPC
	// interceptor checks it again on every call).
	Tokens *auth.Tokens
	// Pool is the api's Postgres: sessions, the sign-in throttle and the
	// console's audit trail (migration 00021).
	Pool *pgxpool.Pool
	// SessionTTL is how long a sign-in lasts at most; 12 h by default.
	SessionTTL time.Duration
	// IdleTimeout ends a session this long after its last request; 30
	// min by default.
	IdleTimeout time.Duration
	// SessionCache is how long a replica trusts a session row it read
	// before reading it again: the most an ended session (sign-out, ended
	// by an admin) lives on another replica. 2 s by default.
	SessionCache time.Duration
	// ThrottleAfter failed sign-ins from one address, or with one token,
	// start refusing its sign-ins for ThrottleBase, doubling with each
	// further failure up to ThrottleMax. 5, 1 s and 5 min by default.
	ThrottleAfter int
	ThrottleBase  time.Duration
	ThrottleMax   time.Duration
	// SweepInterval is how often expired sessions, stale throttle rows
	// and old audit rows are deleted (a bounded batch each); 1 min.
	SweepInterval time.Duration
	// Registerer takes the console's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// SecureCookies marks the session cookie Secure even when the request
	// came in over plain HTTP (TLS terminated by a proxy in front).
	SecureCookies bool
	// BulkBatch is how many jobs one BulkJobAction call changes when the
	// console applies an action to everything a filter matches; 10,000 by
	// default (the api's most).
	BulkBatch int
	// BulkBudget is how long one such request keeps calling before it
	// shows how far it got and offers to continue; 20 s by default, under
	// the usual proxy timeouts.
	BulkBudget time.Duration
	// PrometheusURL is a Prometheus that scrapes the workers (its base
	// URL); the overview draws the tenant's firings and lateness of the
	// last hour from it. Empty: no charts.
	PrometheusURL string
	// OperatorTenants are the tenants whose sessions also see the whole
	// platform on the overview (every tenant's firings, consumer lag,
	// outbox, components, leaders): the platform team's own tenant, not
	// its users'. Needs PrometheusURL.
	OperatorTenants []string
	// Components are what the api connects to, by name, each with a
	// check (nil when reachable): the operator's overview shows each
	// one's answer and latency.
	Components map[string]func(context.Context) error
	// OverviewRefresh is how often the overview asks for itself again and
	// swaps in its numbers and charts (polling, by static/live.js; without
	// script the page reloads at that pace); 10 s by default.
	OverviewRefresh time.Duration
	Logger          *slog.Logger
	Clock           clock.Clock
}

// Console is the console's http.Handler, and a lifecycle.Service whose
// loop sweeps expired sessions.
type Console struct {
	cfg      Config
	jobs     sundialv1.JobServiceClient
	dlq      sundialv1.DeadLetterServiceClient
	cals     sundialv1.CalendarServiceClient
	sessions *sessions
	throttle *throttle
	metrics  *metrics
	pages    map[string]*template.Template
	mux      *http.ServeMux
	prom     *http.Client
	runner   lifecycle.Runner
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Conn == nil || cfg.Tokens == nil || cfg.Pool == nil {
		return nil, errors.New("console: Conn, Tokens and Pool are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.BulkBatch <= 0 {
		cfg.BulkBatch = 10000
	}
	if cfg.BulkBudget <= 0 {
		cfg.BulkBudget = 20 * time.Second
	}
	if cfg.OverviewRefresh <= 0 {
		cfg.OverviewRefresh = 10 * time.Second
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.SessionCache <= 0 {
		cfg.SessionCache = 2 * time.Second
	}
	if cfg.ThrottleAfter <= 0 {
		cfg.ThrottleAfter = 5
	}
	if cfg.ThrottleBase <= 0 {
		cfg.ThrottleBase = time.Second
	}
	if cfg.ThrottleMax <= 0 {
		cfg.ThrottleMax = 5 * time.Minute
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Minute
	}
	m := newMetrics(cfg.Registerer)
	c := &Console{
		cfg: cfg, metrics: m,
		sessions: newSessions(cfg.Pool, cfg.Clock, cfg.SessionTTL, cfg.IdleTimeout, cfg.SessionCache),
		throttle: newThrottle(cfg.Pool, cfg.Clock, cfg.ThrottleAfter, cfg.ThrottleBase, cfg.ThrottleMax, m),
		jobs:     sundialv1.NewJobServiceClient(cfg.Conn), dlq: sundialv1.NewDeadLetterServiceClient(cfg.Conn),
		cals:  sundialv1.NewCalendarServiceClient(cfg.Conn),
		pages: map[string]*template.Template{}, prom: &http.Client{Timeout: 5 * time.Second},
	}
	for _, p := range []string{"login", "overview", "jobs", "job", "new", "confirm", "deadletters", "deadletter", "execution", "executions", "backfill", "audit", "sessions", "error", "forecast"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		c.pages[p] = t
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(assets))
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.signedIn(c.logout))
	mux.HandleFunc("GET /{$}", c.signedIn(c.overview))
	mux.HandleFunc("GET /jobs", c.signedIn(c.jobList))
	mux.HandleFunc("GET /jobs/new", c.signedIn(c.newJobPage))
	mux.HandleFunc("POST /jobs/bulk", c.signedIn(c.bulk))
	mux.HandleFunc("POST /jobs/new", c.signedIn(c.createJob))
	mux.HandleFunc("GET /preview", c.signedIn(c.preview))
	mux.HandleFunc("GET /forecast", c.signedIn(c.forecastPage))
	mux.HandleFunc("GET /jobs/{id}", c.signedIn(c.jobPage))
	mux.HandleFunc("GET /jobs/{id}/confirm", c.signedIn(c.confirmJobAction))
	mux.HandleFunc("GET /jobs/{id}/edit", c.signedIn(c.editJobPage))
	mux.HandleFunc("POST /jobs/{id}/edit", c.signedIn(c.editJob))
	mux.HandleFunc("POST /jobs/{id}/{action}", c.signedIn(c.jobAction))
	mux.HandleFunc("GET /jobs/{id}/backfill", c.signedIn(c.backfillPage))
	mux.HandleFunc("POST /jobs/{id}/backfill", c.signedIn(c.backfill))
	mux.HandleFunc("GET /executions", c.signedIn(c.executions))
	mux.HandleFunc("GET /executions/{id}", c.signedIn(c.execution))
	mux.HandleFunc("GET /audit", c.signedIn(c.audit))
	mux.HandleFunc("GET /dead-letters", c.signedIn(c.deadLetters))
	mux.HandleFunc("GET /dead-letters/{id}", c.signedIn(c.deadLetter))
	mux.HandleFunc("POST /dead-letters/redrive", c.signedIn(c.redrive))
	mux.HandleFunc("GET /sessions", c.signedIn(c.sessionsPage))
	mux.HandleFunc("POST /sessions/end", c.signedIn(c.endSessions))
	c.mux = mux
	return c, nil
}

// Start sweeps expired sessions, stale throttle rows and old audit rows,
// and fills in dead letters' target hosts, every SweepInterval until Stop.
func (c *Console) Start(context.Context) error {
	return c.runner.Run(func(ctx context.Context) error {
		t := c.cfg.Clock.NewTimer(c.cfg.SweepInterval)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C():
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Sweep(sctx)
			cancel()
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				c.cfg.Logger.Warn("console: sweep failed; expired sessions stay refused, and the rows it clears or fills wait for a sweep that works", "err", err)
				failing = true
			case err == nil && failing:
				c.cfg.Logger.Info("console: sweep works again")
				failing = false
			}
			t.Reset(c.cfg.SweepInterval)
		}
	})
}

// Stop ends the sweep.
func (c *Console) Stop() { c.runner.Stop() }

// Sweep deletes one bounded batch each of sessions past their expiry or
// of tokens that were revoked, throttle rows past their window and audit
// rows past their retention, then fills in a bounded number of dead
// letters' target hosts not stored yet (fillHosts).
func (c *Console) Sweep(ctx context.Context) error {
	expired, revoked, err := c.sessions.sweep(ctx)
	c.metrics.sessionsEnded.WithLabelValues("expired").Add(float64(expired))
	c.metrics.sessionsEnded.WithLabelValues("token").Add(float64(revoked))
	if err != nil {
		return err
	}
	if err := c.throttle.sweep(ctx); err != nil {
		return err
	}
	filled, err := c.fillHosts(ctx)
	if filled > 0 {
		c.cfg.Logger.InfoContext(ctx, "console: filled in dead letters' target hosts", "rows", filled)
	}
	return err
}

// ServeHTTP sets the headers every answer carries, then routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing but our own stylesheet and script file (no inline script, so
	// injected markup cannot run), no framing, forms post only to us.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if r.TLS != nil {
		// Over TLS only: a browser that saw the console over HTTPS never
		// tries it in plain HTTP again for 400 days. (Over plain HTTP the
		// header is ignored by browsers and would only mislead.)
		h.Set("Strict-Transport-Security", "max-age=34560000")
	}
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		// Pages hold tenant data: never kept by a shared cache or the
		// back button after sign-out.
		h.Set("Cache-Control", "no-store")
	}
	c.mux.ServeHTTP(w, r)
}

// session is a signed-in request's view: its token (for calls) and CSRF
// token (for forms).
type session struct {
	token  string
	id     string
	role   auth.Role
	CSRF   string
	Tenant string
	Actor  string
}

// call is ctx carrying the session's bearer token to the gRPC server.
func (s *session) call(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.token)
}

type handler func(w http.ResponseWriter, r *http.Request, s *session)

// signedIn runs h for a request with a live session, and checks the CSRF
// token of every POST before h sees it; anything else goes to /login.
//
// The session's token is resolved again on every request (the verifier
// caches it, and drops a revoked one within tokens.RevocationBound), so
// a token revoked or removed ends its sessions: the row is deleted here.
func (c *Console) signedIn(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ended := func() {
			if r.Method == http.MethodPost {
				http.Error(w, "your session has ended: sign in again", http.StatusForbidden)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		}
		ck, err := r.Cookie(cookieName)
		if err != nil {
			ended()
			return
		}
		_, token, why, err := c.sessions.get(r.Context(), ck.Value)
		switch {
		case errors.Is(err, errNoSession):
			if why != "" {
				c.metrics.sessionsEnded.WithLabelValues(why).Inc()
				_ = c.sessions.end(r.Context(), ck.Value)
			}
			ended()
			return
		case err != nil:
			c.cfg.Logger.WarnContext(r.Context(), "console: session not read", "err", err)
			c.render(w, http.StatusServiceUnavailable, "error", nil, map[string]any{"Title": "Unavailable", "Message": "The console cannot read its sessions (Postgres is not answering). Try again shortly."})
			return
		}
		p, ok, err := c.cfg.Tokens.ResolveContext(r.Context(), token)
		if err != nil {
			c.cfg.Logger.WarnContext(r.Context(), "console: session's token not checked", "err", err)
			c.render(w, http.StatusServiceUnavailable, "error", nil, map[string]any{"Title": "Unavailable", "Message": "The api cannot check tokens right now. Try again shortly."})
			return
		}
		if !ok {
			// Revoked, expired or taken out of the configuration.
			if err := c.sessions.end(r.Context(), ck.Value); err == nil {
				c.metrics.sessionsEnded.WithLabelValues("token").Inc()
			}
			ended()
			return
		}
		// The principal as the calls will see it (a static token's
		// mapping may have changed since sign-in).
		s := &session{token: token, id: ck.Value, role: p.Role, CSRF: csrfOf(ck.Value), Tenant: p.Tenant, Actor: p.Actor}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			if !checkCSRF(ck.Value, r.PostFormValue("csrf")) {
				c.cfg.Logger.WarnContext(r.Context(), "console: refused a POST without a valid CSRF token", "path", r.URL.Path, "tenant", p.Tenant)
				c.render(w, http.StatusForbidden, "error", s, map[string]any{"Title": "Refused", "Message": "This action is missing its CSRF token. Reload the page and try again."})
				return
			}
		}
		h(w, r, s)
	}
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// login exchanges a token for a session cookie. A cross-site form cannot
// sign a victim in to the attacker's tenant: the Origin header, which
// browsers send on every POST, must be ours.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			http.Error(w, "cross-origin sign-in refused", http.StatusForbidden)
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	ctx := r.Context()
	a := newAttempt(r, token)
	wait := time.Second // another sign-in with the same address or token is being checked
	if c.throttle.enter(a) {
		defer c.throttle.leave(a)
		var err error
		if wait, err = c.throttle.blocked(ctx, a); err != nil {
			c.unavailable(w, next, "console: sign-in throttle not read", err)
			return
		}
	}
	if wait > 0 {
		c.metrics.signIns.WithLabelValues("throttled").Inc()
		if err := c.throttle.audit(ctx, "signin-throttled", a); err != nil {
			c.cfg.Logger.WarnContext(ctx, "console: sign-in audit not written", "err", err)
		}
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.render(w, http.StatusTooManyRequests, "login", nil, map[string]any{"Next": next,
			"Error": fmt.Sprintf("Too many failed sign-ins from this address or with this token. Try again in %d s.", secs)})
		return
	}
	p, ok, err := c.cfg.Tokens.ResolveContext(ctx, token)
	if err != nil {
		c.unavailable(w, next, "console: sign-in token not checked", err)
		return
	}
	if !ok {
		c.metrics.signIns.WithLabelValues("refused").Inc()
		if err := c.throttle.failed(ctx, a); err != nil {
			c.cfg.Logger.WarnContext(ctx, "console: sign-in failure not counted", "err", err)
		}
		if err := c.throttle.audit(ctx, "signin-refused", a); err != nil {
			c.cfg.Logger.WarnContext(ctx, "console: sign-in audit not written", "err", err)
		}
		c.render(w, http.StatusUnauthorized, "login", nil, map[string]any{"Next": next, "Error": "That token is not known to this api."})
		return
	}
	if err := c.throttle.succeeded(ctx, a); err != nil {
		c.cfg.Logger.WarnContext(ctx, "console: sign-in throttle not cleared", "err", err)
	}
	sid, err := c.sessions.create(ctx, token, p)
	if err != nil {
		c.unavailable(w, next, "console: session not stored", err)
		return
	}
	c.metrics.signIns.WithLabelValues("ok").Inc()
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: sid, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || c.cfg.SecureCookies, MaxAge: int(c.cfg.SessionTTL.Seconds()),
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// unavailable answers a sign-in that Postgres or the token store could
// not decide.
func (c *Console) unavailable(w http.ResponseWriter, next, msg string, err error) {
	c.cfg.Logger.Warn(msg, "err", err)
	c.render(w, http.StatusServiceUnavailable, "login", nil, map[string]any{"Next": next, "Error": "Sign-in is unavailable right now (the api cannot reach Postgres). Try again shortly."})
}

// logout ends the session on the server, so a copy of the cookie is
// worth nothing after it, then clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.sessions.end(r.Context(), s.id); err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: session not ended", "err", err)
		c.render(w, http.StatusServiceUnavailable, "error", s, map[string]any{"Title": "Unavailable", "Message": "Sign-out did not reach Postgres, so the session is still live. Try again."})
		return
	}
	c.metrics.sessionsEnded.WithLabelValues("logout").Inc()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

// render executes a page into a buffer first, so a template error is a
// 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, code int, page string, s *session, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Session"] = s
	data["Page"] = page
	var b strings.Builder
	if err := c.pages[page].Execute(&b, data); err != nil {
		c.cfg.Logger.Error("console: template failed", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail renders an api error: NotFound as 404 (another tenant's job looks
// exactly like a missing one), Unauthenticated by ending the session.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	st := status.Convert(err)
	code := http.StatusBadGateway
	switch st.Code() {
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		code = http.StatusBadRequest
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.Unauthenticated:
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	}
	c.render(w, code, "error", s, map[string]any{"Title": http.StatusText(code), "Message": st.Message()})
}
