//go:build integration

package console_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/testkit/chromium"
)

// TestBrowserConsoleAuditView drives the one audit view in headless
// Chromium against the api on real Postgres: a job, a token and the
// tenant's first signing key made through the api, and a calendar
// change, appear in one table newest first; the kind and actor filters
// of the form narrow it; a calendar's entry links to its own trail; a
// read-only user is shown no token trail (its role may not list it).
// Screenshots go to $SUNDIAL_SCREENSHOTS (docs/console for
// docs/console.md).
func TestBrowserConsoleAuditView(t *testing.T) {
	bin := os.Getenv("SUNDIAL_CHROMIUM")
	if bin == "" {
		t.Skip("SUNDIAL_CHROMIUM is not set: run make test-browser")
	}
	shots := os.Getenv("SUNDIAL_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	api := startConsole(t, false)
	base := "http://" + api.HTTPAddr
	_, viewerToken := readOnlySetup(t, api)
	if err := audittrail.Append(context.Background(), api.Pool, audittrail.Record{Kind: audittrail.KindCalendar, Tenant: "acme",
		Subject: "eu-holidays", Actor: "acme/calendar-sync", Action: "update", Version: 3,
		Detail: map[string]any{"holidays": 14, "jobs_rescheduled": 2}}); err != nil {
		t.Fatal(err)
	}

	ctx := chromium.Start(t, bin)
	step := func() context.Context {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return sctx
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	run := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(step(), actions...); err != nil {
			_ = chromedp.Do(step(), shot("failed-"+strings.ReplaceAll(name, " ", "-")))
			t.Fatalf("%s: %v", name, err)
		}
	}
	kinds := func() string {
		t.Helper()
		s, err := chromedp.Run(step(), chromedp.Evaluate[string](`[...document.querySelectorAll('#audit tbody td.kind')].map(e => e.textContent).join(' ')`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// waitURL waits for the form's submission to land on a URL with sub.
	waitURL := func(sub string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			u, err := chromedp.Run(step(), chromedp.Location())
			if err == nil && strings.Contains(u, sub) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page stayed at %q, want one with %q (%v)", u, sub, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	type css = chromedp.CSS
	signIn := func(token string) {
		t.Helper()
		run("sign in", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css("#token")),
			chromedp.SendKeys(css("#token"), token), chromedp.Click(css("#signin")), chromedp.WaitVisible(css("#role")))
	}

	signIn(apitest.TokenAcme)
	run("audit", chromedp.Click(css(`header a[href="/audit"]`)), chromedp.WaitVisible(css("#audit")), shot("16b-audit-every-trail"))
	got := kinds()
	for _, k := range []string{"calendar", "token", "signing-key", "job"} {
		if !strings.Contains(" "+got+" ", " "+k+" ") {
			t.Fatalf("the audit view shows the kinds %q, want %s among them", got, k)
		}
	}
	if !strings.HasPrefix(got, "calendar") {
		t.Fatalf("the newest entry (the calendar's) is not first: %q", got)
	}

	// The form's kind filter.
	run("kind filter", chromedp.SetValue(css("#kind"), "token"), chromedp.Click(css(`#audit-filter button`)))
	waitURL("kind=token")
	run("kind filtered", chromedp.WaitVisible(css("#audit")))
	if got := kinds(); got != "token" {
		t.Fatalf("kind=token shows %q", got)
	}
	// The actor filter, every kind.
	run("actor filter", chromedp.SetValue(css("#kind"), ""), chromedp.SetValue(css("#actor"), "acme/calendar-sync"),
		chromedp.Click(css(`#audit-filter button`)))
	waitURL("actor=acme%2Fcalendar-sync")
	run("actor filtered", chromedp.WaitVisible(css("#audit")), shot("16c-audit-by-actor"))
	if got := kinds(); got != "calendar" {
		t.Fatalf("actor=acme/calendar-sync shows %q", got)
	}
	// The action filter, every kind: only that action's entries.
	run("action filter", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(css("#action")),
		chromedp.SendKeys(css("#action"), "update"), chromedp.Click(css(`#audit-filter button`)))
	waitURL("action=update")
	run("action filtered", chromedp.WaitVisible(css("#audit")), shot("16d-audit-by-action"))
	actions, err := chromedp.Run(step(), chromedp.Evaluate[string](`[...document.querySelectorAll('#audit tbody tr')].map(r => r.children[2].textContent).join(' ')`))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(actions); len(f) == 0 || slices.ContainsFunc(f, func(a string) bool { return a != "update" }) {
		t.Fatalf("action=update shows the actions %q", actions)
	}
	if got := kinds(); !strings.Contains(got, "calendar") {
		t.Fatalf("action=update shows the kinds %q, want the calendar's update among them", got)
	}
	// The calendar's entry links to its own trail.
	run("calendar link", chromedp.Click(css(`#audit tbody a[href*="subject=eu-holidays"]`)))
	waitURL("subject=eu-holidays")
	run("calendar trail", chromedp.WaitVisible(css("#audit")))
	if got := kinds(); got != "calendar" {
		t.Fatalf("the calendar's trail shows %q", got)
	}
	// A bad time is refused naming the field, in the page.
	run("bad since", chromedp.Navigate(base+"/audit?since=tomorrow"), chromedp.WaitVisible(css("#filter-error")))
	if s, err := chromedp.Run(step(), chromedp.Text(css("#filter-error"))); err != nil || !strings.HasPrefix(s, "since:") {
		t.Fatalf("the filter error reads %q (%v)", s, err)
	}

	// A read-only user may not list tokens: no token trail in its view.
	run("sign out", chromedp.Navigate(base+"/login"))
	signIn(viewerToken)
	run("viewer audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(css("#audit")))
	if got := kinds(); strings.Contains(got, "token") || !strings.Contains(got, "job") {
		t.Fatalf("the read-only view shows the kinds %q", got)
	}
}
