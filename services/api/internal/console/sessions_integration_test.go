//go:build integration

package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
)

// jobsClient is a gRPC client of the api calling as token.
func jobsClient(t *testing.T, api *apitest.API, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func hourlyJob(t *testing.T, conn *grpc.ClientConn, name string) *sundialv1.Job {
	t.Helper()
	resp, err := sundialv1.NewJobServiceClient(conn).CreateJob(context.Background(), &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: name,
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@hourly"}},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetJob()
}

// withCookie is a browser holding a copy of another's session cookie.
func withCookie(t *testing.T, api *apitest.API, value string) *browser {
	b := newBrowser(t, api)
	u, _ := url.Parse(b.base)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "sundial_session", Value: value, Path: "/"}})
	return b
}

func sessionCookie(t *testing.T, b *browser) string {
	t.Helper()
	u, _ := url.Parse(b.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "sundial_session" {
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

func sessionRows(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func signedOut(code int, h http.Header) bool {
	return code == http.StatusSeeOther && strings.HasPrefix(h.Get("Location"), "/login")
}

// Sign-out ends the session on the server: a copy of the cookie taken
// before it loads no page and pauses no job afterwards, and the cookie
// holds nothing but a random id (the table holds its hash, and the token
// only sealed).
func TestIntegrationConsoleLogoutEndsCopiedCookie(t *testing.T) {
	api := startConsole(t, false)
	job := hourlyJob(t, jobsClient(t, api, apitest.TokenAcme), "nightly")
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	stolen := sessionCookie(t, acme)
	if strings.Contains(stolen, apitest.TokenAcme) || len(stolen) != 43 {
		t.Fatalf("the cookie is not a bare 256-bit id: %q", stolen)
	}
	var box []byte
	if err := api.Pool.QueryRow(context.Background(), `SELECT token_box FROM console_sessions`).Scan(&box); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(box), apitest.TokenAcme) || sessionRows(t, api.Pool, `id_hash = convert_to($1, 'UTF8')`, stolen) != 0 {
		t.Fatal("the table holds the token or the session id in clear")
	}

	thief := withCookie(t, api, stolen)
	code, page, _ := thief.do("GET", "/jobs/"+job.GetId(), nil)
	if code != http.StatusOK {
		t.Fatalf("the copy before sign-out: %d", code)
	}
	token := csrf(t, page)

	_, page, _ = acme.do("GET", "/jobs", nil)
	if code, _, h := acme.do("POST", "/logout", url.Values{"csrf": {csrf(t, page)}}); !signedOut(code, h) {
		t.Fatalf("logout: %d %v", code, h)
	}
	if n := sessionRows(t, api.Pool, `true`); n != 0 {
		t.Fatalf("%d session rows after sign-out", n)
	}
	if code, _, h := thief.do("GET", "/jobs/"+job.GetId(), nil); !signedOut(code, h) {
		t.Fatalf("the copied cookie after sign-out loads a page: %d", code)
	}
	if code, _, _ := thief.do("POST", "/jobs/"+job.GetId()+"/pause", url.Values{"csrf": {token}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Fatalf("the copied cookie after sign-out pauses: %d", code)
	}
	got, err := api.Store.Get(context.Background(), "acme", job.GetId())
	if err != nil || got.GetVersion() != job.GetVersion() || got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("the job changed: version %d → %d, %v %v", job.GetVersion(), got.GetVersion(), got.GetStatus(), err)
	}
	// A made-up id, or garbage, is no session either.
	for _, v := range []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "x", stolen + "x"} {
		if code, _, h := withCookie(t, api, v).do("GET", "/jobs", nil); !signedOut(code, h) {
			t.Fatalf("cookie %q: %d", v, code)
		}
	}
}

// Another replica (a second console over the same Postgres) refuses a
// session ended on the first within its session cache time.
func TestIntegrationConsoleEndedSessionOnEveryReplica(t *testing.T) {
	var other *console.Console
	api := apitest.Start(t, apitest.Options{Console: func(conn *grpc.ClientConn, tokens *auth.Tokens, pool *pgxpool.Pool) (http.Handler, error) {
		var err error
		if other, err = console.New(console.Config{Conn: conn, Tokens: tokens, Pool: pool}); err != nil {
			return nil, err
		}
		return console.New(console.Config{Conn: conn, Tokens: tokens, Pool: pool})
	}})
	srv := httptest.NewServer(other)
	t.Cleanup(srv.Close)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	replica := withCookie(t, api, sessionCookie(t, acme))
	replica.base = srv.URL
	u, _ := url.Parse(srv.URL)
	replica.c.Jar.SetCookies(u, []*http.Cookie{{Name: "sundial_session", Value: sessionCookie(t, acme), Path: "/"}})
	if code, _, _ := replica.do("GET", "/jobs", nil); code != http.StatusOK {
		t.Fatalf("the session on the other replica: %d", code)
	}
	_, page, _ := acme.do("GET", "/jobs", nil)
	acme.do("POST", "/logout", url.Values{"csrf": {csrf(t, page)}})
	ended := time.Now()
	for {
		code, _, h := replica.do("GET", "/jobs", nil)
		if signedOut(code, h) {
			break
		}
		if time.Since(ended) > 2*time.Second+500*time.Millisecond {
			t.Fatalf("the other replica still serves the ended session after %s", time.Since(ended))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A session ends after IdleTimeout without a request, however young, and
// at SessionTTL however busy; the sweep deletes the rows.
func TestIntegrationConsoleIdleAndAbsoluteExpiry(t *testing.T) {
	clk := clock.NewFake(time.Now())
	api, con := startConsoleHandler(t, false, func(c *console.Config) {
		c.Clock, c.IdleTimeout, c.SessionTTL = clk, 30*time.Minute, 2*time.Hour
	})
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	// Busy: a request every 25 minutes keeps it, until two hours.
	for i := 0; i < 4; i++ {
		clk.Advance(25 * time.Minute)
		if code, _, _ := acme.do("GET", "/jobs", nil); code != http.StatusOK {
			t.Fatalf("a request %s after the last: %d", 25*time.Minute, code)
		}
	}
	clk.Advance(21 * time.Minute) // 2 h 1 min after sign-in
	if code, _, h := acme.do("GET", "/jobs", nil); !signedOut(code, h) {
		t.Fatalf("past SessionTTL: %d", code)
	}

	acme.signIn(apitest.TokenAcme)
	clk.Advance(29 * time.Minute)
	if code, _, _ := acme.do("GET", "/jobs", nil); code != http.StatusOK {
		t.Fatalf("29 min idle: %d", code)
	}
	clk.Advance(30 * time.Minute)
	if code, _, h := acme.do("GET", "/jobs", nil); !signedOut(code, h) {
		t.Fatalf("30 min idle: %d", code)
	}

	// Rows of sessions nobody came back to are swept.
	other := newBrowser(t, api)
	other.signIn(apitest.TokenGlobex)
	if n := sessionRows(t, api.Pool, `true`); n != 1 {
		t.Fatalf("%d rows before the sweep", n)
	}
	clk.Advance(31 * time.Minute)
	if err := con.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := sessionRows(t, api.Pool, `true`); n != 0 {
		t.Fatalf("%d rows after the sweep", n)
	}
}

// A tenant's admin ends every session of the tenant (its own included);
// other tenants' stay. A read-only token may not; an operator may, for a
// tenant it names. Each is audited.
func TestIntegrationConsoleEndAllSessionsOfTenant(t *testing.T) {
	api := startConsole(t, false)
	acme, acme2, globex := newBrowser(t, api), newBrowser(t, api), newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	acme2.signIn(apitest.TokenAcme)
	globex.signIn(apitest.TokenGlobex)
	code, page, _ := acme.do("GET", "/sessions", nil)
	if code != http.StatusOK || !strings.Contains(page, "has 2 signed-in console session(s)") || !strings.Contains(page, `id="end-all"`) {
		t.Fatalf("sessions page: %d\n%s", code, page)
	}
	code, page, _ = acme.do("GET", "/sessions?confirm=yes", nil)
	if code != http.StatusOK || !strings.Contains(page, "End every console session of tenant acme?") {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	// Another tenant named by a tenant's admin is refused.
	if code, _, _ := acme.do("POST", "/sessions/end", url.Values{"csrf": {csrf(t, page)}, "tenant": {"globex"}}); code != http.StatusForbidden {
		t.Fatalf("acme's admin ending globex's sessions: %d", code)
	}
	if code, _, h := acme.do("POST", "/sessions/end", formValues(page)); !signedOut(code, h) {
		t.Fatalf("end all: %d %v", code, h)
	}
	for _, b := range []*browser{acme, acme2} {
		if code, _, h := b.do("GET", "/jobs", nil); !signedOut(code, h) {
			t.Fatalf("an acme session after end-all: %d", code)
		}
	}
	if code, _, _ := globex.do("GET", "/jobs", nil); code != http.StatusOK {
		t.Fatalf("globex's session after acme's end-all: %d", code)
	}
	var actor, detail string
	if err := api.Pool.QueryRow(context.Background(), `SELECT actor, detail::text FROM console_audit WHERE event = 'sessions-ended' AND tenant = 'acme'`).Scan(&actor, &detail); err != nil ||
		actor != "acme/ops" || !strings.Contains(detail, `"count": 2`) {
		t.Fatalf("audit: %q %q %v", actor, detail, err)
	}

	// A read-only token may not end them.
	made, err := sundialv1.NewTokenServiceClient(jobsClient(t, api, apitest.TokenGlobex)).CreateToken(context.Background(),
		&sundialv1.CreateTokenRequest{Name: "viewer", Role: sundialv1.Role_ROLE_TENANT_READ_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	viewer := newBrowser(t, api)
	viewer.signIn(made.GetSecret())
	_, page, _ = viewer.do("GET", "/sessions", nil)
	if strings.Contains(page, `id="end-all"`) {
		t.Fatal("a read-only session is offered end-all")
	}
	if code, _, _ := viewer.do("POST", "/sessions/end", url.Values{"csrf": {csrf(t, page)}}); code != http.StatusForbidden {
		t.Fatalf("read-only end-all: %d", code)
	}
	// An operator ends globex's, its own stays.
	op := newBrowser(t, api)
	op.signIn(apitest.TokenOperator)
	_, page, _ = op.do("GET", "/sessions?confirm=yes&tenant=globex", nil)
	code, _, h := op.do("POST", "/sessions/end", formValues(page))
	if code != http.StatusSeeOther || op.notice(h.Get("Location")) != "Ended 2 session(s) of the tenant." {
		t.Fatalf("operator end-all: %d %v", code, h)
	}
	for _, b := range []*browser{globex, viewer} {
		if code, _, h := b.do("GET", "/jobs", nil); !signedOut(code, h) {
			t.Fatalf("a globex session after the operator's end-all: %d", code)
		}
	}
}

// Thirty wrong tokens from one address, then the right one: the first
// five are refused, the rest and the right one throttled (429 with
// Retry-After), and once the delay has passed the right one signs in.
// Refusals and throttles are audited, at most 10 rows a minute from one
// source however many attempts.
func TestIntegrationConsoleSignInThrottle(t *testing.T) {
	// At a minute's start, so the audit's minute holds the whole test.
	clk := clock.NewFake(time.Now().Truncate(time.Minute))
	reg := prometheus.NewRegistry()
	api := startConsole(t, false, func(c *console.Config) { c.Clock, c.Registerer = clk, reg })
	b := newBrowser(t, api)
	for i := range 30 {
		code, body, h := b.do("POST", "/login", url.Values{"token": {"wrong-" + strconv.Itoa(i)}})
		switch {
		case i < 5 && code != http.StatusUnauthorized:
			t.Fatalf("wrong token %d: %d", i, code)
		case i >= 5 && (code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || !strings.Contains(body, "Too many failed sign-ins")):
			t.Fatalf("wrong token %d: %d %q", i, code, h.Get("Retry-After"))
		}
	}
	code, _, h := b.do("POST", "/login", url.Values{"token": {apitest.TokenAcme}})
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("the right token while throttled: %d", code)
	}
	clk.Advance(time.Second)
	b.signIn(apitest.TokenAcme)

	// The sixth failure doubles the delay.
	for range 2 {
		clk.Advance(2 * time.Second)
		b.do("POST", "/login", url.Values{"token": {"wrong"}})
	}
	if code, _, h := b.do("POST", "/login", url.Values{"token": {apitest.TokenAcme}}); code != http.StatusTooManyRequests || h.Get("Retry-After") != "4" {
		t.Fatalf("after the seventh failure: %d %q", code, h.Get("Retry-After"))
	}

	audit := func(event string) int {
		var n int
		if err := api.Pool.QueryRow(context.Background(), `SELECT count(*) FROM console_audit WHERE event = $1 AND source = '127.0.0.1'`, event).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The first minute's 10 rows: 5 refusals, 5 throttles; the rest
	// counted only.
	refused, throttled := audit("signin-refused"), audit("signin-throttled")
	if refused != 5 || throttled != 5 {
		t.Fatalf("audit rows: %d refused, %d throttled", refused, throttled)
	}
	if got := counter(t, reg, "sundial_console_signins_total", "throttled"); got != 27 {
		t.Fatalf("throttled sign-ins counted: %v", got)
	}
	// A flood adds no rows this minute.
	for range 200 {
		b.do("POST", "/login", url.Values{"token": {"wrong"}})
	}
	if refused, throttled := audit("signin-refused"), audit("signin-throttled"); refused+throttled != 10 {
		t.Fatalf("after a flood: %d refused, %d throttled rows", refused, throttled)
	}
	if dropped := counter(t, reg, "sundial_console_signin_audit_dropped_total", ""); dropped < 200 {
		t.Fatalf("dropped audit rows counted: %v", dropped)
	}
	var stored string
	if err := api.Pool.QueryRow(context.Background(), `SELECT string_agg(source || token_id || detail::text, ' ') FROM console_audit`).Scan(&stored); err != nil || strings.Contains(stored, "wrong") {
		t.Fatalf("the audit trail holds a presented token: %q %v", stored, err)
	}
}

// The throttle counts per api-made token id too: wrong secrets for one
// token from many addresses throttle that token, not the addresses'
// other sign-ins.
func TestIntegrationConsoleSignInThrottlePerToken(t *testing.T) {
	clk := clock.NewFake(time.Now())
	api, con := startConsoleHandler(t, false, func(c *console.Config) { c.Clock = clk })
	made, err := sundialv1.NewTokenServiceClient(jobsClient(t, api, apitest.TokenAcme)).CreateToken(context.Background(),
		&sundialv1.CreateTokenRequest{Name: "deploy", Role: sundialv1.Role_ROLE_TENANT_ADMIN})
	if err != nil {
		t.Fatal(err)
	}
	secret := made.GetSecret()
	id := made.GetToken().GetId()
	post := func(addr, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":40000"
		w := httptest.NewRecorder()
		con.ServeHTTP(w, req)
		return w
	}
	for i := range 5 {
		if w := post("192.0.2."+strconv.Itoa(i+1), "sdl_"+id+"_not-the-secret"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong secret %d: %d", i, w.Code)
		}
	}
	if w := post("198.51.100.1", secret); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the token after 5 wrong secrets from 5 addresses: %d", w.Code)
	}
	if w := post("192.0.2.1", apitest.TokenAcme); w.Code != http.StatusSeeOther {
		t.Fatalf("another token from one of those addresses: %d", w.Code)
	}
	clk.Advance(time.Second)
	if w := post("198.51.100.1", secret); w.Code != http.StatusSeeOther {
		t.Fatalf("the token after the delay: %d", w.Code)
	}
	var tokenID string
	if err := api.Pool.QueryRow(context.Background(), `SELECT token_id FROM console_audit WHERE source = '192.0.2.1'`).Scan(&tokenID); err != nil || tokenID != id {
		t.Fatalf("audit names token %q (%v), want %q", tokenID, err, id)
	}
}

// counter sums the series of the counter name (with outcome, when not
// "") that reg holds.
func counter(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := outcome == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "outcome" && l.GetValue() == outcome)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Banners come from the fixed table: a forged done= text shows nothing.
func TestIntegrationConsoleForgedBannerShowsNothing(t *testing.T) {
	api := startConsole(t, false)
	job := hourlyJob(t, jobsClient(t, api, apitest.TokenAcme), "nightly")
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	path := "/jobs/" + job.GetId()
	for _, forged := range []string{
		"?done=deleted.%20Your%20session%20expired%20-%20sign%20in%20at%20https://evil.example",
		"?done=Your+session+expired",
		"?done=backfilled&n=1+firing.+Sign+in+at+https://evil.example",
		"?done=updated&fields=name,sign.in.at.evil.example",
	} {
		code, page, _ := acme.do("GET", path+forged, nil)
		if code != http.StatusOK || strings.Contains(page, `id="notice"`) || strings.Contains(page, "evil.example") || strings.Contains(page, "expired") {
			t.Fatalf("%s: %d, a banner shows", forged, code)
		}
		if code, page, _ := acme.do("GET", "/jobs"+forged, nil); code != http.StatusOK || strings.Contains(page, `id="notice"`) {
			t.Fatalf("/jobs%s: a banner shows", forged)
		}
	}
	// Nor does a confirmation page print a link's words as an execution.
	if code, page, _ := acme.do("GET", path+"/confirm?action=cancel&execution=Your+session+expired", nil); code != http.StatusBadRequest || strings.Contains(page, "expired") {
		t.Fatalf("cancel confirmation of a forged execution: %d", code)
	}
	if n := acme.notice(path + "?done=deleted"); n != "Job deleted." {
		t.Fatalf("a known code: %q", n)
	}
}

// HSTS over TLS (at least 180 days), and not over plain HTTP.
func TestIntegrationConsoleHSTSOverTLSOnly(t *testing.T) {
	api, con := startConsoleHandler(t, false)
	srv := httptest.NewTLSServer(con)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/login", "/jobs", "/static/console.css"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		v := resp.Header.Get("Strict-Transport-Security")
		age, err := strconv.Atoi(strings.TrimPrefix(v, "max-age="))
		if err != nil || age < 180*24*3600 {
			t.Fatalf("%s over TLS: Strict-Transport-Security %q", path, v)
		}
	}
	if _, _, h := newBrowser(t, api).do("GET", "/login", nil); h.Get("Strict-Transport-Security") != "" {
		t.Fatalf("over plain HTTP: %q", h.Get("Strict-Transport-Security"))
	}
}

// A burst of concurrent wrong tokens from one address gets no more
// guesses checked than a sequence would: one sign-in per address is
// checked at a time, so at most ThrottleAfter are refused (checked) and
// the rest throttled.
func TestIntegrationConsoleSignInThrottleConcurrent(t *testing.T) {
	api := startConsole(t, false)
	b := newBrowser(t, api)
	codes := make(chan int, 40)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", b.base+"/login", strings.NewReader(url.Values{"token": {"wrong-" + strconv.Itoa(i)}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := b.c.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	checked := 0
	for code := range codes {
		switch code {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("a concurrent sign-in answered %d", code)
		}
	}
	var failures int
	if err := api.Pool.QueryRow(context.Background(), `SELECT failures FROM console_signin_throttle WHERE key = 'addr:127.0.0.1'`).Scan(&failures); err != nil {
		t.Fatal(err)
	}
	if checked == 0 || checked > 5 || failures != checked {
		t.Fatalf("%d of 40 concurrent wrong tokens were checked (%d failures counted), want 1 to 5", checked, failures)
	}
}

// The sweep deletes the sessions of a revoked api token even when no
// request came after the revocation to end them.
func TestIntegrationConsoleSweepRemovesRevokedTokensSessions(t *testing.T) {
	api, con := startConsoleHandler(t, false)
	ts := sundialv1.NewTokenServiceClient(jobsClient(t, api, apitest.TokenAcme))
	made, err := ts.CreateToken(context.Background(), &sundialv1.CreateTokenRequest{Name: "laptop", Role: sundialv1.Role_ROLE_TENANT_ADMIN})
	if err != nil {
		t.Fatal(err)
	}
	newBrowser(t, api).signIn(made.GetSecret())
	newBrowser(t, api).signIn(apitest.TokenAcme)
	id := made.GetToken().GetId()
	if n := sessionRows(t, api.Pool, `token_id = $1`, id); n != 1 {
		t.Fatalf("%d sessions of the token", n)
	}
	if err := con.Sweep(context.Background()); err != nil || sessionRows(t, api.Pool, `true`) != 2 {
		t.Fatalf("the sweep took live sessions: %v", err)
	}
	if _, err := ts.RevokeToken(context.Background(), &sundialv1.RevokeTokenRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if err := con.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, all := sessionRows(t, api.Pool, `token_id = $1`, id), sessionRows(t, api.Pool, `true`); n != 0 || all != 1 {
		t.Fatalf("after the sweep: %d sessions of the revoked token, %d in all", n, all)
	}
}
