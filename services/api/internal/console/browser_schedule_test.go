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

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/testkit/chromium"
)

// TestBrowserConsoleScheduleKinds drives the create and edit forms'
// other schedule kinds in headless Chromium against the api on real
// Postgres: the script showing only the chosen kind's field and
// previewing each kind as it is typed (a business calendar's moved
// instants included); a one-off whose unreadable instant the console
// refuses and whose past instant the api refuses, each beside the field
// with nothing written, then created at a Paris wall-clock time; an
// interval whose whole-seconds rule and reversed bounds the api refuses
// beside both fields, then created; an RRULE naming a calendar the tenant
// lacks refused beside the calendar, then created on its calendar; and
// the interval job edited into a cron job, sending schedule.cron alone.
// Screenshots go to $SUNDIAL_SCREENSHOTS, as TestBrowserConsole's do.
func TestBrowserConsoleScheduleKinds(t *testing.T) {
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
	bg := context.Background()

	// The tenant's calendar: a holiday two days from now, no weekend, so
	// a daily rule's next five instants meet exactly one day off.
	holiday := time.Now().UTC().AddDate(0, 0, 2).Format("2006-01-02")
	gc, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := gc.CreateCalendar(bg, &sundialv1.Calendar{Name: "ops", Weekend: &sundialv1.Weekend{},
		Holidays: []*sundialv1.CalendarHoliday{{Date: holiday, Name: "Ops offsite"}}}); err != nil {
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
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(step(), chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	hidden := func(id string) bool {
		t.Helper()
		h, err := chromedp.Run(step(), chromedp.Evaluate[bool](`document.getElementById('`+id+`').closest('.field').hidden`))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	jobsNamed := func(name string) int {
		var n int
		if err := api.Pool.QueryRow(bg, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	createdJob := func() *sundialv1.Job {
		t.Helper()
		loc, err := chromedp.Run(step(), chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		job, err := api.Store.Get(bg, "acme", strings.TrimPrefix(strings.SplitN(loc, "?", 2)[0], base+"/jobs/"))
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	type css = chromedp.CSS
	// clearErrors removes the page's field errors before a form is sent
	// again, so waiting for one waits for the answer's page, not this one.
	clearErrors := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[int](`(() => { document.querySelectorAll('.field-error').forEach(e => e.remove()); return 0 })()`)(ctx, tg)
		return err
	})

	run("sign in",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), apitest.TokenAcme),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css("#create")),
	)
	if !hidden("once") || !hidden("interval") || !hidden("rrule") || hidden("cron") {
		t.Fatal("a new form shows another kind's field than cron's")
	}

	// One-off: no instant (the field is the browser's date and time
	// picker, which takes nothing else), then one in the past (the api's
	// "no instant after now"), each beside the field.
	run("once missing",
		chromedp.SendKeys(css("#name"), "launch-once"),
		chromedp.SendKeys(css("#url"), "https://reports.example/launch"),
		chromedp.Click(css("#schedule_kind-once")),
		chromedp.WaitVisible(css("#once")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#once-error")),
	)
	if typ, err := chromedp.Run(step(), chromedp.Evaluate[string](`document.getElementById('once').type`)); err != nil || typ != "datetime-local" {
		t.Fatalf("a one-off's instant is a %q field (%v), not the date and time picker", typ, err)
	}
	if e := text("#once-error"); !strings.HasPrefix(e, "the instant to run at") || hidden("once") || !hidden("cron") {
		t.Fatalf("beside once: %q (the field hidden: %v)", e, hidden("once"))
	}
	run("once in the past",
		chromedp.SetValue(css("#once"), "2020-01-01T09:00"),
		clearErrors,
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#once-error")),
		shot("02d-form-once-refused"),
	)
	if e := text("#once-error"); !strings.HasPrefix(e, "schedule: has no instant after now") {
		t.Fatalf("beside once: %q", e)
	}
	if n := jobsNamed("launch-once"); n != 0 {
		t.Fatalf("refused twice, yet %d job(s) written", n)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	at := time.Date(time.Now().Year()+1, 3, 1, 9, 0, 0, 0, paris)
	run("once created",
		chromedp.WaitVisible(css("#create")),
		chromedp.SetValue(css("#once"), at.Format("2006-01-02T15:04")),
		chromedp.SetValue(css("#timezone"), "Europe/Paris"),
		chromedp.Poll[chromedp.Void](`document.getElementById('preview').textContent.includes('`+at.UTC().Format("2006-01-02 15:04:05Z")+`')`),
		shot("02e-form-once-preview"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	if s := createdJob().GetSchedule(); !s.GetOnce().AsTime().Equal(at) || s.GetTimezone() != "Europe/Paris" {
		t.Fatalf("the one-off stored as %v, want %v", s, at.UTC())
	}
	if f := text(".facts"); !strings.Contains(f, "once at "+at.UTC().Format(time.RFC3339)) {
		t.Fatalf("the one-off's page shows %q", f)
	}

	// Interval: not whole seconds, and bounds the wrong way round; both
	// refusals the api's, each beside its field.
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	run("interval refused",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "every-90m"),
		chromedp.SendKeys(css("#url"), "https://reports.example/tick"),
		chromedp.Click(css("#schedule_kind-interval")),
		chromedp.SendKeys(css("#interval"), "1500ms"),
		chromedp.Click(css("#schedule-more > summary")), // folded: bounds, DST, calendar
		chromedp.SendKeys(css("#start_time"), start.Format("2006-01-02 15:04")),
		chromedp.SendKeys(css("#end_time"), start.Add(-24*time.Hour).Format("2006-01-02 15:04")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#interval-error")),
		shot("02f-form-interval-errors"),
	)
	if e := text("#interval-error"); !strings.HasPrefix(e, "schedule.interval:") {
		t.Errorf("beside the interval: %q", e)
	}
	if e := text("#end_time-error"); !strings.HasPrefix(e, "schedule.end_time: must be after start_time") {
		t.Errorf("beside the end: %q", e)
	}
	if n := jobsNamed("every-90m"); n != 0 {
		t.Fatalf("refused, yet %d job(s) written", n)
	}
	run("interval created",
		chromedp.SetValue(css("#interval"), "90m"),
		chromedp.SetValue(css("#end_time"), start.AddDate(1, 0, 0).Format("2006-01-02 15:04")),
		chromedp.Poll[chromedp.Void](`document.getElementById('preview').textContent.includes('`+start.Add(90*time.Minute).Format("2006-01-02 15:04:05Z")+`')`),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	interval := createdJob()
	if s := interval.GetSchedule(); s.GetInterval().AsDuration() != 90*time.Minute || !s.GetStartTime().AsTime().Equal(start) ||
		!s.GetEndTime().AsTime().Equal(start.AddDate(1, 0, 0)) {
		t.Fatalf("the interval stored as %v", s)
	}

	// RRULE on a business calendar: one the tenant lacks is refused beside
	// the calendar; its own is previewed with the holiday moved, then
	// created.
	run("rrule refused",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "daily-on-ops"),
		chromedp.SendKeys(css("#url"), "https://reports.example/daily"),
		chromedp.Click(css("#schedule_kind-rrule")),
		chromedp.SendKeys(css("#rrule"), "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0"),
		chromedp.Click(css("#schedule-more > summary")),
		chromedp.SendKeys(css("#calendar"), "nope"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#calendar-error")),
	)
	if e := text("#calendar-error"); !strings.HasPrefix(e, `schedule.calendar: no calendar "nope"`) {
		t.Fatalf("beside the calendar: %q", e)
	}
	run("rrule preview",
		chromedp.SetValue(css("#calendar"), "ops"),
		chromedp.SetValue(css("#calendar_policy"), "move_next"),
		chromedp.Poll[chromedp.Void](`document.getElementById('preview').textContent.includes('`+holiday+`')`),
		shot("02g-form-rrule-calendar-preview"),
	)
	if p := text("#preview"); !strings.Contains(p, "Ops offsite") {
		t.Errorf("the preview does not say why the holiday moved: %q", p)
	}
	run("rrule created", chromedp.Click(css("#create")), chromedp.WaitVisible(css("#notice")))
	if s := createdJob().GetSchedule(); s.GetRrule() != "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0" || s.GetCalendar() != "ops" ||
		s.GetCalendarPolicy() != sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT {
		t.Fatalf("the rule stored as %v", s)
	}

	// The interval job made a cron job: schedule.cron alone is sent, its
	// bounds kept.
	run("edit to cron",
		chromedp.Navigate(base+"/jobs/"+interval.GetId()+"/edit"),
		chromedp.WaitVisible(css("#interval")),
		chromedp.Click(css("#schedule_kind-cron")),
		chromedp.WaitVisible(css("#cron")),
		chromedp.SendKeys(css("#cron"), "0 * * * *"),
		chromedp.Click(css("#save")),
		chromedp.WaitVisible(css("#changes")),
	)
	if c := text("#changes"); c != "schedule.cron" {
		t.Errorf("the edit's confirmation lists %q", c)
	}
	run("edit to cron confirmed",
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css("#notice")),
	)
	if n := text("#notice"); n != "Job updated: schedule.cron." {
		t.Errorf("after the edit: %q", n)
	}
	if got, err := api.Store.Get(bg, "acme", interval.GetId()); err != nil || got.GetSchedule().GetCron() != "0 * * * *" ||
		got.GetSchedule().GetInterval() != nil || !got.GetSchedule().GetStartTime().AsTime().Equal(start) {
		t.Fatalf("after the edit: %v %v", got.GetSchedule(), err)
	}
}
