//go:build integration

package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// Business calendars over HTTP/JSON: the CalendarService routes, a job's
// schedule naming one, the preview's adjustments, and another tenant
// seeing none of it.
func TestIntegrationHTTPCalendars(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})

	code, out, _ := call(t, api, "POST", "/v1/calendars", apitest.TokenAcme,
		`{"name": "ae", "weekend": {"days": ["WEEKDAY_FRIDAY", "WEEKDAY_SATURDAY"]}, "holidays": [{"date": "2026-12-02", "name": "National Day"}]}`)
	if c, _ := out["calendar"].(map[string]any); code != 200 || c["name"] != "ae" || c["version"] != "1" || c["tenant"] != "acme" {
		t.Fatalf("create: %d %v", code, out)
	}
	code, out, _ = call(t, api, "POST", "/v1/schedules:preview", apitest.TokenAcme,
		`{"schedule": {"cron": "0 8 * * *", "timezone": "Asia/Dubai", "calendar": "ae", "calendar_policy": "CALENDAR_POLICY_MOVE_NEXT"}, "from": "2026-12-01T00:00:00Z", "count": 3}`)
	if code != 200 {
		t.Fatalf("preview: %d %v", code, out)
	}
	times, _ := out["times"].([]any)
	adj, _ := out["adjustments"].([]any)
	// Tue 1st, Wed 2nd holiday -> Thu 3rd, Fri/Sat weekend -> Sun 6th.
	if len(times) != 3 || times[0] != "2026-12-01T04:00:00Z" || times[1] != "2026-12-03T04:00:00Z" || times[2] != "2026-12-06T04:00:00Z" {
		t.Fatalf("times %v", times)
	}
	if len(adj) != 3 || !strings.Contains(adj[0].(map[string]any)["reason"].(string), "National Day") {
		t.Fatalf("adjustments %v", adj)
	}
	code, out, _ = call(t, api, "PUT", "/v1/calendars/ae", apitest.TokenAcme, `{"calendar": {"weekend": {}}, "expected_version": "1"}`)
	if code != 200 || out["calendar"].(map[string]any)["version"] != "2" {
		t.Fatalf("update: %d %v", code, out)
	}
	code, out, _ = call(t, api, "GET", "/v1/calendars", apitest.TokenAcme, "")
	if cals, _ := out["calendars"].([]any); code != 200 || len(cals) != 1 {
		t.Fatalf("list: %d %v", code, out)
	}
	code, out, _ = call(t, api, "POST", "/v1/calendars/de:import", apitest.TokenAcme,
		`{"ics": "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\nSUMMARY:Weihnachten\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"}`)
	if code != 200 || len(out["calendar"].(map[string]any)["holidays"].([]any)) != 1 {
		t.Fatalf("import: %d %v", code, out)
	}

	// globex: not found, not listed, not usable.
	if code, _, _ := call(t, api, "GET", "/v1/calendars/ae", apitest.TokenGlobex, ""); code != 404 {
		t.Fatalf("globex get: %d", code)
	}
	code, out, _ = call(t, api, "POST", "/v1/jobs", apitest.TokenGlobex,
		`{"job": {"schedule": {"cron": "0 8 * * *", "calendar": "ae"}, "target": {"http": {"url": "https://x.example/"}}}}`)
	if code != 400 || !strings.Contains(out["message"].(string), "schedule.calendar") {
		t.Fatalf("globex job on acme's calendar: %d %v", code, out)
	}
	if code, _, _ := call(t, api, "DELETE", "/v1/calendars/ae", apitest.TokenAcme, ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
}
