package console

import (
	"html/template"
	"strings"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The host groups as the page draws them: a host as stored, a target
// without a host as "–", and the rows whose host is not stored yet as
// one group saying so; the note counts classes, jobs and hosts over
// every match, and nothing calls the hosts a sample.
func TestDeadLetterPageDrawsHostGroups(t *testing.T) {
	page, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/deadletters.html")
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]groupSet{
		"Class": {Shown: []group{{Key: "http_5xx", Count: 1518, Link: "/dead-letters?class=http_5xx"}}, Groups: 1, Total: 1518},
		"Job":   {Shown: []group{{Key: "0190aaaa-0000-7000-8000-000000000001", Name: "busy", Count: 1518}}, Groups: 1, Total: 1518},
		"Host": {Shown: []group{
			{Key: "hooks-a.example:8443", Count: 1500}, {Key: "kafka Orders", Count: 8}, {Unrecorded: true, Count: 7},
			{Key: "", Count: 2}, {Key: "b.example", Count: 1},
		}, Groups: 12, Total: 1518},
	}
	var b strings.Builder
	err = page.Execute(&b, map[string]any{
		"Session": &session{role: "admin", Tenant: "acme"}, "Page": "deadletters",
		"Filter": &sundialv1.DeadLetterFilter{}, "Job": jobChoice{}, "Groups": groups,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		`<td>hooks-a.example:8443</td><td class="count">1500</td>`,
		`<td>kafka Orders</td><td class="count">8</td>`,
		`(recorded before hosts were stored)</span></td><td class="count">7</td>`,
		`<td>–</td><td class="count">2</td>`,
		"and 7 more host(s)",
		"Classes, jobs and target hosts over all 1518 dead letter(s) the filter matches, counted in the database.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the page lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "among the newest") {
		t.Errorf("the page still calls the host groups a sample:\n%s", got)
	}
}
