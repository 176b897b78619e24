//go:build integration

package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

func errorBeside(body, field string) string {
	m := regexp.MustCompile(`<p class="field-error" id="` + field + `-error">([^<]*)</p>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// The form's other schedule kinds against the real api and Postgres:
// each refusal (the console's own reading, or the api's field errors)
// beside its field with nothing written; a one-off, an interval with
// bounds and an RRULE on a business calendar created and stored as
// typed; the live preview of each, the calendar's moves included; an
// edit from interval to cron sending the new kind's path alone.
func TestIntegrationConsoleScheduleKinds(t *testing.T) {
	api := startConsole(t, false)
	ctx := context.Background()
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	_, page, _ := acme.do("GET", "/jobs/new", nil)
	token := csrf(t, page)
	// The holiday: two days from now, so the preview's next five daily
	// instants meet it.
	holiday := time.Now().UTC().AddDate(0, 0, 2).Format("2006-01-02")
	gc, err := client.New(api.GRPCAddr, apitest.TokenAcme, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := gc.CreateCalendar(ctx, &sundialv1.Calendar{Name: "ops", Holidays: []*sundialv1.CalendarHoliday{{Date: holiday, Name: "Ops day"}},
		Weekend: &sundialv1.Weekend{}}); err != nil {
		t.Fatal(err)
	}
	if _, page, _ = acme.do("GET", "/jobs/new", nil); !strings.Contains(page, `<option value="ops">`) {
		t.Fatal("the form does not offer the tenant's calendar")
	}
	jobs := func(name string) int {
		var n int
		if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant = 'acme' AND name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	post := func(path string, kv ...string) (int, string, http.Header) {
		v := url.Values{"csrf": {token}, "url": {"https://reports.example/run"}, "timezone": {"UTC"}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return acme.do("POST", path, v)
	}
	refused := func(name string, want map[string]string, kv ...string) {
		t.Helper()
		code, body, _ := post("/jobs/new", append([]string{"name", name}, kv...)...)
		if code != http.StatusBadRequest {
			t.Fatalf("%s: %d, want 400", name, code)
		}
		for field, prefix := range want {
			if e := errorBeside(body, field); !strings.HasPrefix(e, prefix) {
				t.Errorf("%s: beside %s %q, want %q…", name, field, e, prefix)
			}
		}
		if n := jobs(name); n != 0 {
			t.Errorf("%s: refused, yet %d job(s) written", name, n)
		}
	}
	refused("once-unreadable", map[string]string{"once": "a time such as", "end_time": "a time such as"},
		"schedule_kind", "once", "once", "next tuesday", "end_time", "2027-13-01")
	refused("once-past", map[string]string{"once": "schedule: has no instant after now"},
		"schedule_kind", "once", "once", "2020-01-01 09:00")
	refused("interval-bad", map[string]string{"interval": "schedule.interval:", "end_time": "schedule.end_time: must be after start_time"},
		"schedule_kind", "interval", "interval", "1500ms", "start_time", "2026-12-01 00:00", "end_time", "2026-11-01 00:00")
	refused("rrule-bad", map[string]string{"rrule": "schedule.rrule:", "timezone": "schedule.timezone:"},
		"schedule_kind", "rrule", "rrule", "FREQ=SOMETIMES", "timezone", "Mars/Olympus")
	refused("calendar-unknown", map[string]string{"calendar": "schedule.calendar:"},
		"schedule_kind", "rrule", "rrule", "FREQ=DAILY", "calendar", "nope")
	refused("policy-without-calendar", map[string]string{"calendar_policy": "schedule.calendar_policy:"},
		"schedule_kind", "cron", "cron", "@daily", "calendar_policy", "move_next")

	created := func(name string, kv ...string) *sundialv1.Job {
		t.Helper()
		code, body, h := post("/jobs/new", append([]string{"name", name}, kv...)...)
		if code != http.StatusSeeOther {
			t.Fatalf("%s: %d\n%s", name, code, body)
		}
		id := strings.TrimPrefix(strings.SplitN(h.Get("Location"), "?", 2)[0], "/jobs/")
		job, err := api.Store.Get(ctx, "acme", id)
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	next := time.Now().UTC().AddDate(1, 0, 0)
	paris, _ := time.LoadLocation("Europe/Paris")
	onceAt := time.Date(next.Year(), 3, 1, 9, 0, 0, 0, paris)
	once := created("once-paris", "schedule_kind", "once", "once", onceAt.Format("2006-01-02 15:04"), "timezone", "Europe/Paris")
	if !once.GetSchedule().GetOnce().AsTime().Equal(onceAt) || once.GetSchedule().GetCron() != "" {
		t.Errorf("once stored as %v, want %v", once.GetSchedule(), onceAt.UTC())
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	interval := created("every-90m", "schedule_kind", "interval", "interval", "90m",
		"start_time", start.Format("2006-01-02 15:04"), "end_time", start.AddDate(1, 0, 0).Format(time.RFC3339), "dst_gap", "skip")
	if s := interval.GetSchedule(); s.GetInterval().AsDuration() != 90*time.Minute || !s.GetStartTime().AsTime().Equal(start) ||
		!s.GetEndTime().AsTime().Equal(start.AddDate(1, 0, 0)) || s.GetDstGap() != sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP {
		t.Errorf("interval stored as %v", s)
	}
	if _, page, _ := acme.do("GET", "/jobs/"+interval.GetId(), nil); !strings.Contains(page, `<dd id="job-bounds">not before `+start.Format("2006-01-02 15:04:05Z")+`, not after `+start.AddDate(1, 0, 0).Format("2006-01-02 15:04:05Z")+`</dd>`) {
		t.Errorf("the interval's page does not show its bounds")
	}
	rule := created("daily-on-ops", "schedule_kind", "rrule", "rrule", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "calendar", "ops", "calendar_policy", "move_next")
	if s := rule.GetSchedule(); s.GetRrule() != "FREQ=DAILY;BYHOUR=9;BYMINUTE=0" || s.GetCalendar() != "ops" ||
		s.GetCalendarPolicy() != sundialv1.CalendarPolicy_CALENDAR_POLICY_MOVE_NEXT {
		t.Errorf("rrule stored as %v", s)
	}

	// The live preview of each kind, and what is wrong, by field.
	type preview struct {
		Times       []string
		Description string
		Adjustments []string
		Error       string
		Errors      []struct{ Field, Message string }
	}
	ask := func(kv ...string) preview {
		t.Helper()
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		code, body, _ := acme.do("GET", "/preview?"+q.Encode(), nil)
		var p preview
		if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
			t.Fatalf("preview %v: %d %v\n%s", q, code, err, body)
		}
		return p
	}
	p := ask("schedule_kind", "rrule", "rrule", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "timezone", "UTC", "calendar", "ops", "calendar_policy", "skip")
	if len(p.Times) != 5 || len(p.Adjustments) == 0 || !strings.Contains(strings.Join(p.Adjustments, " "), holiday) {
		t.Errorf("rrule on ops: %+v, want 5 times and the %s holiday among the adjustments", p, holiday)
	}
	for _, tm := range p.Times {
		if strings.HasPrefix(tm, holiday) {
			t.Errorf("the preview fires on the holiday: %v", p.Times)
		}
	}
	if p := ask("schedule_kind", "once", "once", onceAt.Format("2006-01-02 15:04"), "timezone", "Europe/Paris"); len(p.Times) != 1 || p.Times[0] != onceAt.UTC().Format("2006-01-02 15:04:05Z") {
		t.Errorf("once: %+v", p)
	}
	if p := ask("schedule_kind", "interval", "interval", "1h", "start_time", "2030-01-01 00:00", "timezone", "UTC"); len(p.Times) != 5 || p.Times[1] != "2030-01-01 01:00:00Z" {
		t.Errorf("interval: %+v", p)
	}
	if p := ask("schedule_kind", "interval", "interval", "soon"); len(p.Errors) != 1 || p.Errors[0].Field != "Interval" || len(p.Times) != 0 {
		t.Errorf("unreadable interval: %+v", p)
	}
	if p := ask("schedule_kind", "rrule", "rrule", "FREQ=SOMETIMES"); len(p.Errors) != 1 || p.Errors[0].Field != "RRule" || !strings.HasPrefix(p.Errors[0].Message, "schedule.rrule:") {
		t.Errorf("bad rule: %+v", p)
	}

	// Interval to cron: the new kind's path alone; the api's oneof drops
	// the interval.
	_, page, _ = acme.do("GET", "/jobs/"+interval.GetId()+"/edit", nil)
	if !strings.Contains(page, `id="schedule_kind-interval" checked`) || !strings.Contains(page, `name="interval" value="1h30m0s"`) {
		t.Fatalf("the edit form does not show the interval:\n%s", page)
	}
	f := formValues(page)
	f.Set("schedule_kind", "cron")
	f.Set("cron", "0 * * * *")
	code, body, h, _ := acme.edit(interval.GetId(), f)
	if code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Job updated: schedule.cron." {
		t.Fatalf("edit to cron: %d %q\n%s", code, h.Get("Location"), body)
	}
	if got, _ := api.Store.Get(ctx, "acme", interval.GetId()); got.GetSchedule().GetCron() != "0 * * * *" || got.GetSchedule().GetInterval() != nil ||
		!got.GetSchedule().GetStartTime().AsTime().Equal(start) {
		t.Errorf("after the edit: %v", got.GetSchedule())
	}
	// An edit that changes the name of the one-off keeps its instant.
	_, page, _ = acme.do("GET", "/jobs/"+once.GetId()+"/edit", nil)
	// In the date and time picker's format, to the second.
	if !strings.Contains(page, `name="once" value="`+onceAt.Format("2006-01-02T15:04:05")+`"`) {
		t.Fatalf("the edit form does not show the Paris wall clock:\n%s", page)
	}
	f = formValues(page)
	f.Set("name", "once-paris-2")
	code, _, h, _ = acme.edit(once.GetId(), f)
	if code != http.StatusSeeOther || acme.notice(h.Get("Location")) != "Job updated: name." {
		t.Fatalf("rename of the one-off: %d %q", code, h.Get("Location"))
	}
}

// formValues are what a browser would post from the page's form (the
// console's own markup: inputs with name before value, checked radios,
// selected options, textareas), the sign-out form's CSRF field aside.
func formValues(page string) url.Values {
	main := page[strings.Index(page, "<main"):]
	v := url.Values{}
	for _, m := range regexp.MustCompile(`<input ([^>]*)>`).FindAllStringSubmatch(main, -1) {
		attr := func(name string) (string, bool) {
			a := regexp.MustCompile(`(?:^|\s)` + name + `="([^"]*)"`).FindStringSubmatch(m[1])
			if a == nil {
				return "", false
			}
			return html.UnescapeString(a[1]), true
		}
		name, ok := attr("name")
		if !ok {
			continue
		}
		if typ, _ := attr("type"); typ == "radio" || typ == "checkbox" {
			if !regexp.MustCompile(`\schecked(\s|$)`).MatchString(m[1]) {
				continue
			}
		}
		val, _ := attr("value")
		v.Set(name, val)
	}
	for _, m := range regexp.MustCompile(`(?s)<select [^>]*name="([^"]*)"[^>]*>(.*?)</select>`).FindAllStringSubmatch(main, -1) {
		v.Set(m[1], "")
		for _, o := range regexp.MustCompile(`<option(?: value="([^"]*)")?([^>]*)>([^<]*)</option>`).FindAllStringSubmatch(m[2], -1) {
			if strings.Contains(o[2], "selected") {
				val := o[1]
				if !strings.Contains(o[0], "value=") {
					val = o[3]
				}
				v.Set(m[1], html.UnescapeString(val))
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?s)<textarea [^>]*name="([^"]*)"[^>]*>(.*?)</textarea>`).FindAllStringSubmatch(main, -1) {
		v.Set(m[1], html.UnescapeString(m[2]))
	}
	return v
}
