//go:build integration

package console_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/testkit/chromium"
)

// TestBrowserConsoleOperatorsDay drives the operator's console items in
// headless Chromium against the api on real Postgres, Redis and
// Cassandra: a read-only user is shown its role and no write control,
// and a typed URL to one is refused naming the role; dead letters show
// job names and groups (by job and by target host) over all 1,201 of a
// job's; the job filter takes
// the start of a name; a 20 s cron's 24-hour backfill dry run lists 100
// slots "and 4,221 more" and pages on; the create form opens folded; the
// job page's history updates in place; the executions' job filter takes
// the start of a name too. Screenshots go to
// $SUNDIAL_SCREENSHOTS (docs/console for docs/console.md).
func TestBrowserConsoleOperatorsDay(t *testing.T) {
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
	api := startConsole(t, true, func(c *console.Config) { c.OverviewRefresh = time.Second })
	base := "http://" + api.HTTPAddr
	jobID, viewerToken := readOnlySetup(t, api)
	job, err := api.Store.Get(context.Background(), "acme", jobID)
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()
	manyDeadLetters(t, api, api.DeadLetter(t, job, slot, "http_5xx"), 1200)
	other := createJobs(t, api, "reports-weekly")["reports-weekly"]
	api.DeadLetter(t, other, slot.Add(time.Minute), "timeout")

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
	// view saves what the window shows, for a page whose whole length
	// (a hundred dead letters) says nothing more.
	view := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.CaptureScreenshot()(ctx, tg)
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
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(step(), chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(step(), chromedp.Evaluate[int](`document.querySelectorAll('`+sel+`').length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	type css = chromedp.CSS
	signIn := func(token string) {
		t.Helper()
		run("sign in", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css("#token")),
			chromedp.SendKeys(css("#token"), token), chromedp.Click(css("#signin")), chromedp.WaitVisible(css("#role")))
	}

	// A read-only user: the role in the header, no write control drawn.
	signIn(viewerToken)
	run("read-only job page", chromedp.Navigate(base+"/jobs/"+jobID), chromedp.WaitVisible(css("#read-only-note")), shot("17-read-only-job"))
	if r := text("#tenant"); !strings.Contains(r, "tenant acme as acme/viewer, role read-only") {
		t.Fatalf("the header says %q", r)
	}
	if n := count(`#pause, #resume, #trigger, #backfill, #edit, #delete, a[href="/jobs/new"]`); n != 0 {
		t.Fatalf("a read-only user is drawn %d write control(s) on the job page", n)
	}
	run("read-only dead letters", chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible(css("#dead-letters")))
	if n := count(`#redrive, #redrive-all, #dead-letters input[type=checkbox]`); n != 0 {
		t.Fatalf("a read-only user is drawn %d re-drive control(s)", n)
	}
	run("read-only typed backfill URL", chromedp.Navigate(base+"/jobs/"+jobID+"/backfill"), chromedp.WaitVisible(css("main p")), shot("17a-read-only-refused"))
	if m := text("main"); !strings.Contains(m, "role read-only may not call sundial.v1.JobService/BackfillJob") {
		t.Fatalf("the refusal says %q", m)
	}
	run("sign out", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(".who button")), chromedp.Click(css(".who button")), chromedp.WaitVisible(css("#token")))

	// An admin: names and groups over every dead letter.
	signIn(apitest.TokenAcme)
	run("dead letters", chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible(css("#groups-job")), view("10b-dead-letters-groups"))
	if g := strings.Join(strings.Fields(text("#groups-job")), " "); !strings.Contains(g, "nightly-report 1201") || !strings.Contains(g, "reports-weekly 1") {
		t.Fatalf("the job groups say %q", g)
	}
	// Both jobs' targets are on 127.0.0.1:9: one host, every dead letter.
	if g := strings.Join(strings.Fields(text("#groups-host")), " "); !strings.Contains(g, "127.0.0.1:9 1202") {
		t.Fatalf("the host groups say %q", g)
	}
	if n := count(`#dead-letters td.job a[href="/jobs/` + jobID + `"]`); n == 0 || !strings.Contains(text("#dead-letters"), "nightly-report") {
		t.Fatal("the dead letters do not name their job")
	}
	run("filter by a name's start",
		chromedp.SendKeys(css("#job"), "NIGHT"), chromedp.Click(css(`form[action="/dead-letters"] button`)),
		chromedp.WaitVisible(css("#job-filter")), view("10a-dead-letters-by-name"))
	if f := text("#job-filter"); !strings.Contains(f, "nightly-report") || strings.Contains(text("#dead-letters"), "reports-weekly") {
		t.Fatalf("filtered by name: %q", f)
	}

	// Backfill of a 20 s cron over the default 24 hours: capped and paged.
	run("backfill dry run", chromedp.Navigate(base+"/jobs/"+jobID+"/backfill"), chromedp.WaitVisible(css("#dry-run")),
		chromedp.Click(css("#dry-run")), chromedp.WaitVisible(css("#slots-shown")), shot("13a-backfill-capped"))
	if s := text("#slots-shown"); !strings.Contains(s, "The first 100, and 4,221 more") || count("#slots li") != 100 {
		t.Fatalf("the dry run shows %q and %d slots", s, count("#slots li"))
	}
	run("next slots", chromedp.Click(css("#slots-next")), chromedp.WaitVisible(css("#slots-prev")))
	if s := text("#slots-shown"); !strings.HasPrefix(s, "Slots 101–200 of 4321, and 4,121 more") {
		t.Fatalf("the second page says %q", s)
	}
	if h, err := chromedp.Run(step(), chromedp.Evaluate[int](`document.documentElement.scrollHeight`)); err != nil || h > 6000 {
		t.Fatalf("the dry run's page is %d pixels tall (%v)", h, err)
	}

	// The create form: folded, and short.
	run("new job form", chromedp.Navigate(base+"/jobs/new"), chromedp.WaitVisible(css("#create")), shot("02h-form-folded"))
	if n := count("form details[open]"); n != 0 {
		t.Fatalf("%d section(s) of a new job's form are open", n)
	}
	if h, err := chromedp.Run(step(), chromedp.Evaluate[int](`document.documentElement.scrollHeight`)); err != nil || h > 2000 {
		t.Fatalf("the new-job form is %d pixels tall (%v)", h, err)
	} else {
		t.Logf("the new-job form is %d pixels tall", h)
	}

	// The overview: a new dead letter reaches the tiles and the newest
	// table in the same refresh (the table once stayed as first loaded,
	// under a tile that counted it).
	run("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#recent-dead-letters")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[int](`(window.__stay = 1)`)(ctx, tg)
			return err
		}))
	api.DeadLetter(t, other, time.Now().UTC().Truncate(time.Second), "connect_refused")
	run("overview live", chromedp.Poll[chromedp.Void](`document.getElementById('recent-dead-letters').textContent.includes('connect_refused')`))
	if stay, err := chromedp.Run(step(), chromedp.Evaluate[int](`window.__stay || 0`)); err != nil || stay != 1 {
		t.Fatal("the overview reloaded instead of updating in place")
	}

	// The job page's history: a new attempt appears without a reload.
	run("job page", chromedp.Navigate(base+"/jobs/"+jobID), chromedp.WaitVisible(css("#history")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[int](`(window.__stay = 1)`)(ctx, tg)
			return err
		}))
	exec := uuid.NewString()
	at := time.Now().UTC().Truncate(time.Second)
	if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{ExecutionId: exec, JobId: jobID, Tenant: "acme", Attempt: 1,
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at),
		HttpStatus: 204}); err != nil {
		t.Fatal(err)
	}
	run("history live", chromedp.WaitVisible(css(`#history a[href="/executions/`+exec+`"]`)), shot("03a-job-history-live"))
	if stay, err := chromedp.Run(step(), chromedp.Evaluate[int](`window.__stay || 0`)); err != nil || stay != 1 {
		t.Fatal("the page reloaded instead of updating its history in place")
	}

	// Executions: the job filter takes the start of a name, as the dead
	// letters' does, and reads that job's own history.
	if err := api.Writer.Record(context.Background(), &sundialv1.ExecutionAttempt{ExecutionId: uuid.NewString(), JobId: other.GetId(), Tenant: "acme",
		Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED, ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at),
		HttpStatus: 503}); err != nil {
		t.Fatal(err)
	}
	run("executions", chromedp.Navigate(base+"/executions"), chromedp.WaitVisible(css(`#executions a[href="/executions/`+exec+`"]`)))
	if n := count(`#executions td.job a[href="/jobs/` + other.GetId() + `"]`); n != 1 {
		t.Fatalf("the unfiltered executions show reports-weekly's attempt %d times, want 1", n)
	}
	run("executions by a name's start",
		chromedp.SendKeys(css("#job"), "NIGHT"), chromedp.Click(css(`form[action="/executions"] button`)),
		chromedp.WaitVisible(css("#job-filter")), chromedp.WaitVisible(css("#executions")), view("11a-executions-by-name"))
	if f := text("#job-filter"); !strings.Contains(f, "nightly-report") {
		t.Fatalf("the executions' job filter says %q", f)
	}
	if n := count(`#executions a[href="/executions/` + exec + `"]`); n != 1 || strings.Contains(text("#executions"), "reports-weekly") {
		t.Fatalf("filtered by name: nightly-report's attempt shown %d times, reports-weekly's in the table: %v", n, strings.Contains(text("#executions"), "reports-weekly"))
	}
}
