//go:build integration

package console_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/testkit/chromium"

	"github.com/google/uuid"
)

// TestBrowserConsole drives the console in headless Chromium (Debian's
// package, deploy/local/chromium.sh) against the api on real Postgres,
// Redis and Cassandra: sign in, a refused and then an accepted create,
// the job in the list and its history, pause and resume through their
// confirmations, a hostile job name rendered as text, an action stripped
// of its CSRF token refused, and another tenant kept out of the job by
// URL. Every page is saved as a PNG in $SUNDIAL_SCREENSHOTS (make
// test-browser: .run/console). It runs when SUNDIAL_CHROMIUM names the
// browser, as make test-browser sets it.
func TestBrowserConsole(t *testing.T) {
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
	// The overview polls every second, so the test sees it update.
	api := startConsole(t, true, func(c *console.Config) { c.OverviewRefresh = time.Second })
	base := "http://" + api.HTTPAddr

	// The date pickers' parts in en-US order (pickerKeys).
	ctx := chromium.Start(t, bin, chromedp.Flag("lang", "en-US"))

	// Any JavaScript dialog (an injected alert) fails the test.
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
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
	step := func(name string) context.Context {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return sctx
	}
	run := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(step(name), actions...); err != nil {
			// What the browser showed when the step failed.
			_ = chromedp.Do(step("failure"), shot("failed-"+strings.ReplaceAll(name, " ", "-")))
			t.Fatalf("%s: %v", name, err)
		}
	}
	// text waits for sel and reads its visible text in one evaluation in
	// the page: a query and a read as two calls failed in CI with "No
	// node with given id found" when the page was replaced between them
	// (the job page, just after the create form's redirect).
	text := func(name, sel string) string {
		t.Helper()
		s, err := chromedp.Run(step(name), chromedp.PollFunction[[]string](
			`(sel) => { const e = document.querySelector(sel); return e ? [e.innerText] : null }`,
			chromedp.WithPollingArgs(sel)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(s[0])
	}
	eval := func(name, expr string) int {
		t.Helper()
		n, err := chromedp.Run(step(name), chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	type css = chromedp.CSS
	// tabTo presses Tab until the element sel has the focus, as a
	// keyboard user would (a date picker takes one Tab per part).
	tabTo := func(sel string) {
		t.Helper()
		for range 80 {
			if eval("focus", `document.activeElement === document.querySelector('`+sel+`') ? 1 : 0`) == 1 {
				return
			}
			run("tab", chromedp.KeyEvent(kb.Tab))
		}
		t.Fatalf("80 presses of Tab never reached %s", sel)
	}

	// Sign in with the keyboard: the token field has the focus, Enter
	// submits; the first Tab of a page reaches the skip link.
	run("sign in page",
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible(css("#token")),
		shot("01-sign-in"),
	)
	if eval("token focused", `document.activeElement === document.getElementById('token') ? 1 : 0`) != 1 {
		t.Fatal("the sign-in page does not put the focus in the token field")
	}
	run("sign in", chromedp.KeyEvent(apitest.TokenAcme+kb.Enter), chromedp.WaitVisible(css("#jobs")))
	run("skip link", chromedp.KeyEvent(kb.Tab))
	if eval("skip link focused", `document.activeElement.classList.contains('skip') && document.activeElement.getBoundingClientRect().left >= 0 ? 1 : 0`) != 1 {
		t.Fatal("the first Tab does not show the skip link")
	}

	// The live preview answers as the cron is typed.
	run("live preview",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SetValue(css("#timezone"), "Europe/Paris"),
		chromedp.SendKeys(css("#cron"), "0 9 * * MON-FRI"),
		chromedp.WaitVisible(css("#preview li:nth-child(6)")),
		shot("02a-live-preview"),
	)
	if p := text("preview", "#preview"); !strings.Contains(p, "08:00:00Z") {
		t.Fatalf("preview of 09:00 Paris shows %q", p)
	}

	run("create with errors",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "nightly-report"),
		chromedp.SendKeys(css("#cron"), "0 9 * * MON-FRY"),
		chromedp.SendKeys(css("#url"), "reports.example/run"),
		chromedp.WaitVisible(css("#preview li.field-error")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#cron-error")),
		shot("02-create-field-errors"),
	)
	if e := text("cron error", "#cron-error"); !strings.HasPrefix(e, "schedule.cron:") {
		t.Fatalf("cron error beside the field: %q", e)
	}
	if e := text("url error", "#url-error"); !strings.HasPrefix(e, "target.http.url:") {
		t.Fatalf("url error beside the field: %q", e)
	}

	run("create",
		chromedp.SetValue(css("#cron"), "*/5 * * * *"),
		chromedp.SetValue(css("#url"), "https://reports.example/run"),
		chromedp.SetValue(css("#labels"), "team=billing"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	jobURL, err := chromedp.Run(step("location"), chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if got := text("job status", "#job-status"); got != "active" {
		t.Fatalf("new job status %q", got)
	}
	jobID := strings.TrimPrefix(strings.SplitN(jobURL, "?", 2)[0], base+"/jobs/")

	// A worker's record of an attempt, as the ledger holds it, shows in
	// the job's history.
	slot := time.Now().UTC().Truncate(5 * time.Minute)
	execID := firing.ExecutionID(uuid.MustParse(jobID), slot).String()
	if err := api.Writer.Record(step("record"), &sundialv1.ExecutionAttempt{
		ExecutionId: execID, JobId: jobID, Tenant: "acme", Attempt: 1, FenceToken: 7,
		Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(slot),
		FireTime: timestamppb.New(slot), StartedTime: timestamppb.New(slot), FinishedTime: timestamppb.New(slot.Add(84 * time.Millisecond)),
		Lateness: durationpb.New(1200 * time.Microsecond), Duration: durationpb.New(84 * time.Millisecond),
		HttpStatus: 200, JobVersion: 1, Worker: "worker-1",
	}); err != nil {
		t.Fatal(err)
	}
	// Earlier slots, so the lateness chart has a line to draw.
	for k, late := range []time.Duration{3 * time.Millisecond, 9 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		s := slot.Add(-time.Duration(k+1) * 5 * time.Minute)
		if err := api.Writer.Record(step("record"), &sundialv1.ExecutionAttempt{
			ExecutionId: firing.ExecutionID(uuid.MustParse(jobID), s).String(), JobId: jobID, Tenant: "acme", Attempt: 1, FenceToken: int64(k + 1),
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ScheduledTime: timestamppb.New(s),
			FireTime: timestamppb.New(s), StartedTime: timestamppb.New(s.Add(late)), FinishedTime: timestamppb.New(s.Add(late + 50*time.Millisecond)),
			Lateness: durationpb.New(late), Duration: durationpb.New(50 * time.Millisecond), HttpStatus: 200, JobVersion: 1, Worker: "worker-1",
		}); err != nil {
			t.Fatal(err)
		}
	}
	// An execution that failed once and succeeded on its retry, each
	// attempt under its own lease (another worker, a newer fence), and a
	// slot skipped by the overlap policy, which took no lease.
	retried := slot.Add(-30 * time.Minute)
	retriedID := firing.ExecutionID(uuid.MustParse(jobID), retried).String()
	longErr := "HTTP 503 from target: " + strings.Repeat("upstream unavailable; ", 20)
	skipped := slot.Add(-35 * time.Minute)
	skippedID := firing.ExecutionID(uuid.MustParse(jobID), skipped).String()
	for _, a := range []*sundialv1.ExecutionAttempt{
		{ExecutionId: retriedID, Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED, FenceToken: 41, Worker: "worker-2",
			HttpStatus: 503, Duration: durationpb.New(2500 * time.Millisecond), Error: longErr, StartedTime: timestamppb.New(retried)},
		{ExecutionId: retriedID, Attempt: 2, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, FenceToken: 42, Worker: "worker-3",
			HttpStatus: 204, Duration: durationpb.New(37 * time.Millisecond), StartedTime: timestamppb.New(retried.Add(10 * time.Second))},
		{ExecutionId: skippedID, Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, Worker: "worker-2",
			Reason: "overlap: the previous execution is still running", StartedTime: timestamppb.New(skipped)},
	} {
		at := retried
		if a.GetExecutionId() == skippedID {
			at = skipped
		}
		a.JobId, a.Tenant, a.JobVersion = jobID, "acme", 1
		a.ScheduledTime, a.FireTime = timestamppb.New(at), timestamppb.New(at)
		a.FinishedTime = timestamppb.New(a.GetStartedTime().AsTime().Add(a.GetDuration().AsDuration()))
		a.Lateness = durationpb.New(a.GetStartedTime().AsTime().Sub(at))
		if err := api.Writer.Record(step("record"), a); err != nil {
			t.Fatal(err)
		}
	}
	run("job page",
		chromedp.Navigate(jobURL),
		chromedp.WaitVisible(css("#lateness")),
		chromedp.WaitVisible(css("#instants")),
		shot("03-job"),
	)
	if h := text("history", "#history tbody"); !strings.Contains(h, execID) || !strings.Contains(h, "succeeded") {
		t.Fatalf("history shows %q", h)
	}
	// Each attempt's row: its lease (holder and fence), HTTP status,
	// duration, and the error's excerpt (cut, on one line) or the reason.
	for _, want := range []struct{ row, holder, fence, http, duration, detail string }{
		{execID + "-1", "worker-1", "7", "200", "84ms", ""},
		{retriedID + "-1", "worker-2", "41", "503", "2.5s", excerptOf(longErr)},
		{retriedID + "-2", "worker-3", "42", "204", "37ms", ""},
	} {
		row := "#attempt-" + want.row
		if got := text("lease holder", row+" .holder"); got != want.holder {
			t.Errorf("%s: lease holder %q, want %q", want.row, got, want.holder)
		}
		if got := text("fence", row+" .fence"); got != want.fence {
			t.Errorf("%s: fence %q, want %q", want.row, got, want.fence)
		}
		if got := text("http", row+" .http"); got != want.http {
			t.Errorf("%s: HTTP %q, want %q", want.row, got, want.http)
		}
		if got := text("duration", row+" .duration"); got != want.duration {
			t.Errorf("%s: duration %q, want %q", want.row, got, want.duration)
		}
		if got := text("detail", row+" .excerpt"); got != want.detail {
			t.Errorf("%s: error excerpt %q, want %q", want.row, got, want.detail)
		}
	}
	if got := text("skipped lease", "#attempt-"+skippedID+"-1 .lease"); got != "none (seen by worker-2)" {
		t.Errorf("a skipped slot's lease: %q", got)
	}
	if got := text("skipped reason", "#attempt-"+skippedID+"-1 .reason"); got != "overlap: the previous execution is still running" {
		t.Errorf("a skipped slot's reason: %q", got)
	}
	if n := eval("instants", `document.querySelectorAll('#instants li').length`); n != 20 {
		t.Fatalf("%d next instants, want 20", n)
	}
	// The whole error is on the execution's page.
	run("execution page", chromedp.Click(css(`a[href="/executions/`+retriedID+`"]`)), chromedp.WaitVisible(css(".attempt pre")), shot("15-execution"))
	if got := text("whole error", ".attempt pre"); got != strings.TrimSpace(longErr) {
		t.Errorf("the execution's page shows %q", got)
	}
	for sel, want := range map[string]string{"#lease-holder-1": "worker-2", "#fence-1": "41", "#lease-holder-2": "worker-3", "#fence-2": "42"} {
		if got := text("execution lease", sel); got != want {
			t.Errorf("the execution's page: %s is %q, want %q", sel, got, want)
		}
	}

	// The tenant's executions across its jobs: the nav's Executions page,
	// filtered to skipped attempts by ticking the box.
	run("executions", chromedp.Click(css(`nav a[href="/executions"]`)), chromedp.WaitVisible(css("#executions")))
	if all := text("executions", "#executions tbody"); !strings.Contains(all, retriedID) || !strings.Contains(all, skippedID) {
		t.Fatalf("the executions page lists %q", all)
	}
	// The box is ticked on the page before the submit too: wait for the
	// answer's page, the first without the retried attempt, or the
	// screenshot may be taken mid-navigation, of a page 0 pixels wide.
	run("executions skipped", chromedp.Click(css(`#statuses input[value="skipped"]`)), chromedp.Click(css(`form[action="/executions"] button`)),
		chromedp.WaitNotPresent(css(`#executions a[href*="`+retriedID+`"]`)),
		chromedp.WaitVisible(css(`#statuses input[value="skipped"]:checked`)), shot("15a-executions"))
	if got := text("executions skipped", "#executions tbody"); !strings.Contains(got, skippedID) || strings.Contains(got, retriedID) {
		t.Fatalf("skipped only lists %q", got)
	}

	run("list",
		chromedp.Navigate(base+"/jobs?labels=team%3Dbilling&priority=medium"),
		chromedp.WaitVisible(css("#jobs")),
		shot("04-jobs"),
	)
	if l := text("list", "#jobs tbody"); !strings.Contains(l, "nightly-report") {
		t.Fatalf("the list shows %q", l)
	}
	run("bulk count", chromedp.Click(css("#filter-pause")), chromedp.WaitVisible(css("#bulk-jobs")), shot("04a-bulk-confirm"))
	if q := text("bulk question", "main form p"); !strings.Contains(q, "labels team=billing) matches: 1 job(s)?") {
		t.Fatalf("bulk confirmation asks %q", q)
	}

	// Pause and resume with the keyboard: Tab to the action, Enter; Tab
	// to the confirmation, Enter.
	for _, st := range []struct{ button, want string }{{"#pause", "paused"}, {"#resume", "active"}} {
		run(st.button, chromedp.Navigate(jobURL), chromedp.WaitVisible(css(st.button)))
		tabTo(st.button)
		run(st.button+" enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#confirm")))
		if st.button == "#pause" {
			run("confirm shot", shot("05-confirm-pause"))
		}
		tabTo("#confirm")
		run(st.button+" confirmed", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#notice")))
		if got := text("status", "#job-status"); got != st.want {
			t.Fatalf("after %s: status %q, want %q", st.button, got, st.want)
		}
	}

	// Edit: only the changed field is sent.
	run("edit",
		chromedp.Navigate(base+"/jobs/"+jobID+"/edit"), chromedp.WaitVisible(css("#save")),
		shot("05a-edit"),
		chromedp.SetValue(css("#name"), "nightly-report-eu"),
		chromedp.Click(css("#save")),
		chromedp.WaitVisible(css("#changes")),
		shot("05b-confirm-edit"),
	)
	// Asked first, naming the one field; nothing saved until confirmed.
	if c := text("edit changes", "#changes"); c != "name" {
		t.Fatalf("the edit's confirmation lists %q", c)
	}
	if got, err := api.Store.Get(step("get"), "acme", jobID); err != nil || got.GetName() != "nightly-report" {
		t.Fatalf("saved before the confirmation: %q %v", got.GetName(), err)
	}
	run("edit confirmed", chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#notice")))
	if n := text("edit notice", "#notice"); n != "Job updated: name." {
		t.Fatalf("after the edit: %q", n)
	}
	if got := text("edited name", "#job-name"); got != "nightly-report-eu" {
		t.Fatalf("edited name %q", got)
	}

	// The audit page: the tenant's changes so far, newest first, reached
	// from the menu.
	run("audit",
		chromedp.Click(css(`header a[href="/audit"]`)),
		chromedp.WaitVisible(css("#audit")),
		shot("16-audit"),
	)
	if a := text("audit rows", "#audit tbody"); !strings.Contains(a, "nightly-report-eu") || strings.Index(a, "update") > strings.Index(a, "resume") ||
		strings.Index(a, "resume") > strings.Index(a, "pause") || strings.Index(a, "pause") > strings.Index(a, "create") {
		t.Fatalf("the audit page reads %q", a)
	}

	// Backfill with the keyboard alone: Tab to the job page's Backfill
	// link, Enter; the range typed part by part into the date and time
	// pickers; Tab to the dry run, Enter: the slots listed, nothing staged;
	// Tab to the confirmation, Enter: staged.
	run("job page for backfill", chromedp.Navigate(jobURL), chromedp.WaitVisible(css("#backfill")))
	tabTo("#backfill")
	run("open backfill", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#dry-run")))
	if typ := eval("picker", `document.querySelector('#from').type === 'datetime-local' && document.querySelector('#to').type === 'datetime-local' ? 1 : 0`); typ != 1 {
		t.Fatal("the backfill range is not a date and time picker")
	}
	from, to := slot.Add(-time.Hour), slot.Add(-time.Second)
	tabTo("#from")
	run("type from", chromedp.KeyEvent(pickerKeys(from)))
	tabTo("#to")
	run("type to", chromedp.KeyEvent(pickerKeys(to)))
	for sel, want := range map[string]time.Time{"#from": from, "#to": to} {
		got, err := chromedp.Run(step("picker value"), chromedp.Evaluate[string](`document.querySelector('`+sel+`').value`))
		// (The picker leaves out a zero second.)
		if err != nil || (got != want.Format("2006-01-02T15:04:05") && (want.Second() != 0 || got != want.Format("2006-01-02T15:04"))) {
			t.Fatalf("%s holds %q after typing (%v), want %s", sel, got, err, want.Format("2006-01-02T15:04:05"))
		}
	}
	tabTo("#dry-run")
	run("backfill dry run", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#backfill-preview")), shot("13-backfill-dry-run"))
	if p := text("backfill preview", "#backfill-preview"); !strings.HasPrefix(p, "Dry run: 12 slot(s)") {
		t.Fatalf("backfill dry run says %q", p)
	}
	if n := eval("preview slots", `document.querySelectorAll('.instants li').length`); n != 12 {
		t.Fatalf("the dry run lists %d slots, want 12", n)
	}
	var staged int
	if err := api.Pool.QueryRow(step("outbox"), `SELECT count(*) FROM outbox WHERE job_id = $1`, jobID).Scan(&staged); err != nil || staged != 0 {
		t.Fatalf("the dry run staged %d firings (%v)", staged, err)
	}
	tabTo("#confirm")
	run("backfill", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#notice")))
	if n := text("backfill notice", "#notice"); !strings.Contains(n, "12 firing(s) staged") {
		t.Fatalf("after the backfill: %q", n)
	}
	if err := api.Pool.QueryRow(step("outbox"), `SELECT count(*) FROM outbox WHERE job_id = $1`, jobID).Scan(&staged); err != nil || staged != 12 {
		t.Fatalf("the backfill staged %d firings (%v), want 12", staged, err)
	}

	// A Kafka job with retries: the api's refusal of the retry policy
	// beside its field, the values kept, then accepted.
	run("kafka form",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "exports-to-kafka"),
		chromedp.SendKeys(css("#cron"), "0 3 * * *"),
		chromedp.Click(css("#kind-kafka")),
		chromedp.SendKeys(css("#topic"), "billing.exports"),
		chromedp.Click(css("#retry-more > summary")), // folded until opened
		chromedp.SendKeys(css("#max_attempts"), "3"),
		chromedp.SendKeys(css("#initial_delay"), "1m"),
		chromedp.SendKeys(css("#max_delay"), "10s"),
		chromedp.WaitVisible(css("#preview li:nth-child(5)")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#max_delay-error")),
		shot("02b-form-kafka-retry-errors"),
	)
	if e := text("max delay error", "#max_delay-error"); !strings.HasPrefix(e, "retry.max_delay:") {
		t.Fatalf("beside the longest delay: %q", e)
	}
	run("kafka create",
		chromedp.SetValue(css("#max_delay"), "5m"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	if f := text("kafka job", ".facts"); !strings.Contains(f, "kafka billing.exports") {
		t.Fatalf("the Kafka job's page shows %q", f)
	}

	// Misfire, overlap, timeout, jitter and callback: values the api
	// refuses, each refusal beside its field under the api's field name,
	// then accepted, shown on the job's page and stored as chosen.
	run("policies form",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "nightly-with-policies"),
		chromedp.SendKeys(css("#cron"), "30 1 * * *"),
		chromedp.SendKeys(css("#url"), "https://reports.example/nightly"),
		chromedp.Click(css("#policies-more > summary")),
		chromedp.SetValue(css("#misfire"), "run_all"),
		chromedp.SendKeys(css("#misfire_grace"), "-1m"),
		chromedp.SendKeys(css("#max_catch_up"), "100000"),
		chromedp.SetValue(css("#overlap"), "skip"),
		chromedp.SendKeys(css("#attempt_timeout"), "0s"),
		chromedp.SendKeys(css("#max_jitter"), "90s"),
		chromedp.SendKeys(css("#callback_url"), "ftp://reports.example/done"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#max_jitter-error")),
		shot("02c-form-policy-errors"),
	)
	for sel, field := range map[string]string{
		"#misfire_grace-error": "misfire.grace:", "#max_catch_up-error": "misfire.max_catch_up:",
		"#attempt_timeout-error": "attempt_timeout:", "#max_jitter-error": "max_jitter:", "#callback_url-error": "callback_url:",
	} {
		if e := text(sel, sel); !strings.HasPrefix(e, field) {
			t.Errorf("beside %s: %q, want the api's %s", sel, e, field)
		}
	}
	run("policies create",
		chromedp.SetValue(css("#misfire_grace"), "2h"),
		chromedp.SetValue(css("#max_catch_up"), "5"),
		chromedp.SetValue(css("#attempt_timeout"), "45s"),
		chromedp.SetValue(css("#max_jitter"), "20s"),
		chromedp.SetValue(css("#callback_url"), "https://reports.example/done"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	if f := text("policies", ".facts"); !strings.Contains(f, "run_all within 2h0m0s, at most 5") || !strings.Contains(f, "45s an attempt, jitter up to 20s") ||
		!strings.Contains(f, "https://reports.example/done") || text("overlap", "#job-overlap") != "skip" {
		t.Fatalf("the job's page shows %q", f)
	}
	policiesURL, err := chromedp.Run(step("location"), chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	policiesID := strings.TrimPrefix(strings.SplitN(policiesURL, "?", 2)[0], base+"/jobs/")
	// An edit of the overlap policy alone sends that path alone.
	run("policies edit",
		chromedp.Navigate(base+"/jobs/"+policiesID+"/edit"),
		chromedp.WaitVisible(css("#save")),
		chromedp.SetValue(css("#overlap"), "buffer_one"),
		chromedp.Click(css("#save")),
		chromedp.WaitVisible(css("#changes")),
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css("#notice")),
	)
	if n := text("policies edit notice", "#notice"); !strings.Contains(n, "updated: overlap.") {
		t.Errorf("after editing the overlap policy: %q", n)
	}
	if got, err := api.Store.Get(step("get"), "acme", policiesID); err != nil || got.GetOverlap() != sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE ||
		got.GetMisfire().GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL || got.GetMisfire().GetGrace().AsDuration() != 2*time.Hour ||
		got.GetMisfire().GetMaxCatchUp() != 5 || got.GetAttemptTimeout().AsDuration() != 45*time.Second ||
		got.GetMaxJitter().AsDuration() != 20*time.Second || got.GetCallbackUrl() != "https://reports.example/done" {
		t.Fatalf("stored: %v (%v)", got, err)
	}

	// An action whose form lost its CSRF token is refused, and the job
	// stays as it was.
	run("csrf",
		chromedp.Navigate(base+"/jobs/"+jobID+"/confirm?action=pause"),
		chromedp.WaitVisible(css("#confirm")),
	)
	// (The sign-out form in the header has one too; strip the action's.)
	if n := eval("strip csrf", `(() => { const f = document.querySelectorAll('main input[name=csrf]'); f.forEach(e => e.remove()); return f.length })()`); n != 1 {
		t.Fatalf("removed %d CSRF fields", n)
	}
	run("csrf submit",
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css(".error")),
		shot("06-csrf-refused"),
	)
	if e := text("csrf error", ".error"); !strings.Contains(e, "CSRF") {
		t.Fatalf("without CSRF: %q", e)
	}
	if got, err := api.Store.Get(step("get"), "acme", jobID); err != nil || got.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE {
		t.Fatalf("after a refused pause: %v %v", got.GetStatus(), err)
	}

	// A hostile name is text: no dialog, the heading shows it verbatim.
	const hostile = "<script>alert(1)</script>"
	run("hostile name",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), hostile),
		chromedp.SendKeys(css("#cron"), "@hourly"),
		chromedp.SendKeys(css("#url"), "https://reports.example/x"),
		chromedp.WaitVisible(css("#preview li:nth-child(6)")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
		shot("07-hostile-name"),
	)
	if got := text("hostile heading", "#job-name"); got != hostile {
		t.Fatalf("heading %q", got)
	}
	run("list with hostile name", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(css("#jobs")))
	if n := eval("count scripts", `document.querySelectorAll('script').length`); n != 0 || dialogs.Load() != 0 {
		t.Fatalf("%d script elements, %d dialogs", n, dialogs.Load())
	}

	// A dead letter of the job: on the overview, then re-driven from the
	// list after its dry run.
	job, err := api.Store.Get(step("get"), "acme", jobID)
	if err != nil {
		t.Fatal(err)
	}
	// The overview is live: opened before the job's firing dies, it
	// shows the dead letter without a reload (which would drop the mark
	// the test leaves on the page's window), in its tile and in its
	// per-hour chart.
	run("overview before", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#dead-hour")))
	if n := text("dead last hour", "#dead-hour"); n != "0" {
		t.Fatalf("overview counts %q dead letters in the last hour before any died", n)
	}
	if eval("mark the page", `(window.sameOverview = 1, document.getElementById('live-toggle').hidden ? 0 : 1)`) != 1 {
		t.Fatal("the live updates' pause button is not shown")
	}
	dead := api.DeadLetter(t, job, slot.Add(-5*time.Minute), "http_5xx")
	run("overview live",
		chromedp.Poll[chromedp.Void](`document.getElementById('dead-hour').textContent.trim() === '1'`, chromedp.WithPollingTimeout(15*time.Second)),
		shot("08-overview"),
	)
	if eval("not reloaded", `window.sameOverview === 1 && Number(document.getElementById('live').dataset.updates) > 0 ? 1 : 0`) != 1 {
		t.Fatal("the overview was reloaded rather than updated in place")
	}
	if eval("chart drawn", `document.querySelectorAll('#dead-letters-chart svg path').length`) != 1 ||
		eval("this hour", `Number(document.querySelector('#dead-letters-chart tbody tr:last-child td:last-child').textContent)`) != 1 ||
		eval("hours", `document.querySelectorAll('#dead-letters-chart tbody tr').length`) != 24 {
		t.Fatal("the per-hour dead-letter chart does not show this hour's dead letter")
	}
	run("dead letter",
		chromedp.Navigate(base+"/dead-letters/"+dead), chromedp.WaitVisible(css("#payload")),
		shot("12-dead-letter"),
	)
	if e := text("dead letter error", "#last-error"); e != "HTTP 503 from target" {
		t.Fatalf("dead letter page shows %q", e)
	}
	// Re-drive with the keyboard: Tab to the row's box, Space selects it;
	// Tab to the button, Enter: the dry run; Tab, Enter: re-driven.
	run("dead letters", chromedp.Navigate(base+"/dead-letters?class=http_5xx"), chromedp.WaitVisible(css("#dead-letters")))
	tabTo(`input[value="` + dead + `"]`)
	run("select", chromedp.KeyEvent(" "), shot("10-dead-letters"))
	if eval("selected", `document.querySelector('input[value="`+dead+`"]').checked ? 1 : 0`) != 1 {
		t.Fatal("Space did not select the dead letter")
	}
	tabTo("#redrive")
	run("re-drive", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#confirm")), shot("11-redrive-dry-run"))
	if q := text("dry run", "main form p"); !strings.Contains(q, "Re-drive 1 dead letter") {
		t.Fatalf("dry run says %q", q)
	}
	tabTo("#confirm")
	run("re-drive confirmed", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("#dead-letters")))
	if l := text("after re-drive", "#dead-letters tbody"); strings.Contains(l, dead) {
		t.Fatalf("the re-driven dead letter is still listed: %q", l)
	}
	var outbox int
	if err := api.Pool.QueryRow(step("outbox"), `SELECT count(*) FROM outbox WHERE execution_id = $1 AND attempt = 2`, dead).Scan(&outbox); err != nil || outbox != 1 {
		t.Fatalf("re-drive staged %d outbox rows: %v", outbox, err)
	}

	// Tenant B, signed in, types tenant A's job URL: not found.
	// Three steps, each with its own time: a failure names the part that
	// hung (a cold CI run once timed out on the whole chain).
	run("sign out", chromedp.Click(css(".who button")), chromedp.WaitVisible(css("#token")))
	run("sign in as globex",
		chromedp.SendKeys(css("#token"), apitest.TokenGlobex),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css("#dead-hour")), // the overview
	)
	run("globex opens acme's job", chromedp.Navigate(jobURL), chromedp.WaitVisible(css(".error")), shot("09-other-tenant"))
	title, err := chromedp.Run(step("title"), chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if body := text("other tenant page", "main"); !strings.HasPrefix(title, "Not Found") || strings.Contains(body, "nightly-report") {
		t.Fatalf("globex sees %q: %q", title, body)
	}
	if tenant := text("tenant", "#tenant"); !strings.Contains(tenant, "globex") {
		t.Fatalf("signed in as %q", tenant)
	}
	// Every other URL of acme's job, its executions and its dead letter:
	// Not Found too, nothing of acme's on the page.
	for _, path := range []string{
		"/jobs/" + jobID + "/edit", "/jobs/" + jobID + "/backfill", "/jobs/" + jobID + "/confirm?action=delete",
		"/executions/" + execID, "/executions/" + retriedID, "/dead-letters/" + dead,
	} {
		run("globex opens "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css("main")))
		title, err := chromedp.Run(step("title"), chromedp.Title())
		if err != nil {
			t.Fatal(err)
		}
		if body := text("other tenant page", "main"); !strings.HasPrefix(title, "Not Found") || strings.Contains(body, "nightly-report") ||
			strings.Contains(body, "worker-") || strings.Contains(body, "HTTP 503") {
			t.Errorf("globex opening %s sees %q: %q", path, title, body)
		}
	}
	// Acme's trail by its job's id is empty for globex.
	run("globex audit", chromedp.Navigate(base+"/audit?job="+jobID), chromedp.WaitVisible(css("main")))
	if body := text("globex audit", "main"); strings.Contains(body, "nightly-report") || strings.Contains(body, "acme") {
		t.Errorf("globex's audit page for acme's job shows %q", body)
	}
}

// excerptOf is what the history should show of a long error: its first
// 160 characters and an ellipsis (the console's excerpt, restated).
func excerptOf(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return s[:160] + "…"
}

// pickerKeys is what one types into Chromium's en-US datetime-local
// picker (step 1 s) for t: month, day, year, hour on the 12-hour clock,
// minute, second, AM or PM; each part moves to the next once full, but
// for the year, which takes up to six digits: the right arrow moves on.
func pickerKeys(t time.Time) string {
	h, half := t.Hour()%12, "A"
	if h == 0 {
		h = 12
	}
	if t.Hour() >= 12 {
		half = "P"
	}
	return fmt.Sprintf("%02d%02d%04d%s%02d%02d%02d%s", int(t.Month()), t.Day(), t.Year(), kb.ArrowRight, h, t.Minute(), t.Second(), half)
}
