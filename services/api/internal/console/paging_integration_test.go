//go:build integration

package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// TestIntegrationConsoleBackfillPagedFormFoldedHistoryLive: a 20 s cron's
// dry run over 24 hours (4,321 slots) lists the first 100 and "and 4,221
// more", pages on without staging anything, and its confirmation still
// fires all of them; the create form opens with its advanced sections
// folded (each opens when it holds a value or an error) and a one-off's
// instant in the date and time picker; the job page's history is in its
// live part.
func TestIntegrationConsoleBackfillPagedFormFoldedHistoryLive(t *testing.T) {
	api := startConsole(t, true)
	jobID, _ := readOnlySetup(t, api)
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	_, page, _ := b.do("GET", "/jobs/"+jobID+"/backfill", nil)
	tok := csrf(t, page)
	end := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	form := url.Values{"csrf": {tok}, "from": {end.Add(-24 * time.Hour).Format("2006-01-02T15:04:05")}, "to": {end.Format("2006-01-02T15:04:05")}, "rate": {"1000"}}
	code, page, _ := b.do("POST", "/jobs/"+jobID+"/backfill", form)
	if code != http.StatusOK || !strings.Contains(page, "Dry run: 4321 slot(s)") {
		t.Fatalf("dry run: %d %.2000s", code, page)
	}
	if n := strings.Count(page, "<li>"); n != 100 || !strings.Contains(page, `<strong id="slots-more">and 4,221 more</strong>`) ||
		!strings.Contains(page, `id="slots-next"`) || strings.Contains(page, `id="slots-prev"`) {
		t.Fatalf("first page: %d slots listed: %s", n, page)
	}
	form.Set("offset", "4300")
	_, page, _ = b.do("POST", "/jobs/"+jobID+"/backfill", form)
	if n := strings.Count(page, "<li>"); n != 21 || !strings.Contains(page, "Slots 4301–4321 of 4321") || strings.Contains(page, "slots-more") ||
		!strings.Contains(page, `name="offset" value="4200" id="slots-prev"`) || strings.Contains(page, `id="slots-next"`) {
		t.Fatalf("last page: %d slots listed: %s", n, page)
	}
	var staged int
	if err := api.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE job_id = $1`, jobID).Scan(&staged); err != nil {
		t.Fatal(err)
	}
	if staged != 0 {
		t.Fatalf("paging the dry run staged %d firings", staged)
	}
	form.Del("offset")
	form.Set("confirm", "yes")
	if code, _, h := b.do("POST", "/jobs/"+jobID+"/backfill", form); code != http.StatusSeeOther || b.notice(h.Get("Location")) == "" ||
		!strings.Contains(h.Get("Location"), "4321") {
		t.Fatalf("confirm: %d %v", code, h)
	}

	// The create form: folded, the one-off in the picker.
	_, page, _ = b.do("GET", "/jobs/new", nil)
	for _, id := range []string{"schedule-more", "retry-more", "policies-more", "more"} {
		if !strings.Contains(page, `id="`+id+`" >`) {
			t.Errorf("the new-job form's %s is not folded: %s", id, page)
		}
	}
	if !strings.Contains(page, `<input type="datetime-local" step="1" id="once" name="once" value=""`) {
		t.Error("a one-off's instant is not a date and time picker")
	}
	// A refused retry setting opens its section, with the one-off's
	// instant shown back in the picker's format.
	code, page, _ = b.do("POST", "/jobs/new", url.Values{"csrf": {tok}, "name": {"launch"}, "schedule_kind": {"once"}, "once": {"2030-01-02 09:30"},
		"timezone": {"UTC"}, "url": {"https://reports.example/x"}, "kind": {"http"}, "method": {"POST"}, "priority": {"medium"}, "initial_delay": {"soon"}})
	if code != http.StatusBadRequest || !strings.Contains(page, `id="retry-more" open>`) || !strings.Contains(page, `id="policies-more" >`) ||
		!strings.Contains(page, `value="2030-01-02T09:30:00"`) {
		t.Fatalf("refused retry: %d %s", code, page)
	}

	// The job page: its history is live.
	_, page, _ = b.do("GET", "/jobs/"+jobID, nil)
	live, hist := strings.Index(page, `<div id="live"`), strings.Index(page, `<table id="history">`)
	if live < 0 || hist < live || !strings.Contains(page, `<script src="/static/live.js" defer></script>`) {
		t.Fatalf("the job page's history is not live: %s", page)
	}
}
