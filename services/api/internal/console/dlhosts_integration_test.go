//go:build integration

package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// TestIntegrationConsoleDeadLetterHostGroups: the dead-letter page counts
// every match by target host in the database, not the newest 1,000: 1,500
// dead letters to one host and, older than the newest 1,000, 10 to
// another, one to a Kafka topic and 7 written before hosts were stored
// (target_host NULL) — each counted exactly, the NULL ones as one group
// "(recorded before hosts were stored)". The filter narrows the host
// groups as it does the others. One sweep fills every NULL row in from
// its envelope (1,507 rows: more than one batch), after which those rows
// count under their host and the NULL group is gone; an envelope that
// does not decode gets the empty host, so it is not read again.
func TestIntegrationConsoleDeadLetterHostGroups(t *testing.T) {
	api, con := startConsoleHandler(t, false)
	ctx := context.Background()
	web := func(name, u string) *sundialv1.Job {
		return &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: name,
			Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: u}}}}
	}
	busy := web("busy", "https://Hooks-A.example:8443/run")
	quiet := web("quiet", "http://b.example/hook")
	before := web("before", "http://c.example:9000/old")
	orders := &sundialv1.Job{Id: uuid.NewString(), Tenant: "acme", Name: "orders",
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "Orders"}}}}
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute).UTC()

	// Old ones first, two days back: none among the newest 1,000.
	for i := range 10 {
		api.DeadLetter(t, quiet, slot.Add(time.Duration(i)*time.Minute), "http_5xx")
	}
	api.DeadLetter(t, orders, slot, "http_5xx")
	for i := range 7 {
		api.DeadLetter(t, before, slot.Add(time.Duration(i)*time.Minute), "timeout")
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := api.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`UPDATE dead_letters SET dead_at = now() - interval '2 days'`)
	// Written before the worker stored hosts.
	exec(`UPDATE dead_letters SET target_host = NULL WHERE job_id = $1`, before.GetId())
	// Then 1,500 to the busy host, the newest.
	manyDeadLetters(t, api, api.DeadLetter(t, busy, slot, "http_5xx"), 1499)
	// Another tenant's row whose envelope does not decode, also NULL.
	exec(`INSERT INTO dead_letters (execution_id, tenant, job_id, error_class, last_error, attempts, last_attempt, envelope)
		VALUES ($1, 'globex', $2, 'poison', 'undecodable', 1, 1, '\xffff'::bytea)`, uuid.NewString(), uuid.NewString())

	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	get := func(path string) string {
		t.Helper()
		code, page, _ := b.do("GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.500s", path, code, page)
		}
		return page
	}
	hosts := func(page string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<div class="tile" id="groups-host">(.*?)</div>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no host groups: %s", page)
		}
		return m[1]
	}
	row := func(key string, n int) string {
		return "<td>" + key + `</td><td class="count">` + strconv.Itoa(n) + "</td>"
	}
	unrecorded := func(n int) *regexp.Regexp {
		return regexp.MustCompile(`\(recorded before hosts were stored\)</span></td><td class="count">` + strconv.Itoa(n) + `</td>`)
	}

	page := get("/dead-letters")
	g := hosts(page)
	for _, want := range []string{row("hooks-a.example:8443", 1500), row("b.example", 10), row("kafka Orders", 1)} {
		if !strings.Contains(g, want) {
			t.Errorf("the host groups lack %s:\n%s", want, g)
		}
	}
	if !unrecorded(7).MatchString(g) {
		t.Errorf("the 7 rows without a host are not one group:\n%s", g)
	}
	if !strings.Contains(page, "over all 1518 dead letter(s) the filter matches") || strings.Contains(page, "among the newest") {
		t.Errorf("the groups do not say they count every match: %s", page)
	}
	// The largest first.
	if strings.Index(g, "hooks-a.example") > strings.Index(g, "b.example") {
		t.Errorf("the host groups are not largest first:\n%s", g)
	}

	// The filter narrows them: class timeout is the 7 without a host.
	g = hosts(get("/dead-letters?class=timeout"))
	if !unrecorded(7).MatchString(g) || strings.Contains(g, "hooks-a.example") || strings.Contains(g, "b.example") {
		t.Errorf("class-filtered host groups:\n%s", g)
	}
	g = hosts(get("/dead-letters?job=" + quiet.GetId()))
	if !strings.Contains(g, row("b.example", 10)) || strings.Contains(g, "hooks-a.example") || strings.Contains(g, "recorded before") {
		t.Errorf("job-filtered host groups:\n%s", g)
	}

	// One sweep fills them all in, in batches.
	exec(`UPDATE dead_letters SET target_host = NULL WHERE job_id = $1`, busy.GetId())
	if err := con.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters WHERE target_host IS NULL`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows without a host after the sweep (%v)", left, err)
	}
	var poison string
	if err := api.Pool.QueryRow(ctx, `SELECT target_host FROM dead_letters WHERE tenant = 'globex'`).Scan(&poison); err != nil || poison != "" {
		t.Errorf("the undecodable envelope's host: %q (%v), want empty", poison, err)
	}
	g = hosts(get("/dead-letters"))
	for _, want := range []string{row("hooks-a.example:8443", 1500), row("b.example", 10), row("kafka Orders", 1), row("c.example:9000", 7)} {
		if !strings.Contains(g, want) {
			t.Errorf("after the fill, the host groups lack %s:\n%s", want, g)
		}
	}
	if strings.Contains(g, "recorded before") {
		t.Errorf("a group of unrecorded hosts is left after the fill:\n%s", g)
	}
	// Nothing left to fill: a sweep finds nothing and changes nothing.
	if err := con.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
}
