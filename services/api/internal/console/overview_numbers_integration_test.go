//go:build integration

package console_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/postgres/firingstats"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	"github.com/sundialhq/sundial/pkg/process/admin"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/services/api/internal/console"
	"github.com/sundialhq/sundial/testkit/chromium"
)

// rollupRow writes one firing_minutes row as the workers' rollup does.
func rollupRow(t *testing.T, api *apitest.API, tenant string, minute time.Time, priority int16, outcomes [firingstats.NumOutcomes]int64, lateness map[int]int64) {
	t.Helper()
	late := make([]int64, firingstats.Buckets)
	for b, n := range lateness {
		late[b] = n
	}
	o := outcomes
	if _, err := api.Pool.Exec(context.Background(), `INSERT INTO firing_minutes (tenant, minute, priority, succeeded, failed, retried, dead, skipped, cancelled, other, lateness)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, tenant, minute, priority,
		o[firingstats.Succeeded], o[firingstats.Failed], o[firingstats.Retried], o[firingstats.Dead], o[firingstats.Skipped], o[firingstats.Cancelled], o[firingstats.Other], late); err != nil {
		t.Fatal(err)
	}
}

// numbersFixture writes what the workers and the prefetchers would have:
// acme fired 56 times five minutes ago at two priorities (50 succeeded, 2
// failed, 3 retried, 1 dead; lateness 80 in (1.5 ms, 2 ms], 20 in (5 ms,
// 7.5 ms]) and 900 times three hours ago (lateness in (25 ms, 50 ms]); globex 7 two minutes ago; two live workers
// run 5 of acme's attempts and 2 of globex's, a third stopped writing
// five minutes ago; 3 outbox rows are due and 2 staged ahead; a range
// has a leader.
func numbersFixture(t *testing.T, api *apitest.API) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Minute)
	var hour, earlier, globex [firingstats.NumOutcomes]int64
	hour[firingstats.Succeeded], hour[firingstats.Failed], hour[firingstats.Retried], hour[firingstats.Dead] = 40, 2, 3, 1
	rollupRow(t, api, "acme", now.Add(-5*time.Minute), 2, hour, map[int]int64{3: 72, 6: 18})
	var low [firingstats.NumOutcomes]int64
	low[firingstats.Succeeded] = 10 // another priority of the same minute
	rollupRow(t, api, "acme", now.Add(-5*time.Minute), 4, low, map[int]int64{3: 8, 6: 2})
	earlier[firingstats.Succeeded] = 900
	rollupRow(t, api, "acme", now.Add(-3*time.Hour), 3, earlier, map[int]int64{10: 900})
	globex[firingstats.Succeeded] = 7
	rollupRow(t, api, "globex", now.Add(-2*time.Minute), 3, globex, map[int]int64{0: 7})
	ctx := context.Background()
	for _, r := range []struct {
		worker, tenant string
		n              int
		age            time.Duration
	}{{"worker-1", "acme", 4, 0}, {"worker-2", "acme", 1, 0}, {"worker-3", "acme", 9, 5 * time.Minute}, {"worker-1", "globex", 2, 0}} {
		if _, err := api.Pool.Exec(ctx, `INSERT INTO worker_running (worker_id, tenant, running, updated_at) VALUES ($1, $2, $3, now() - make_interval(secs => $4))`,
			r.worker, r.tenant, r.n, r.age.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	for i, ahead := range []time.Duration{-time.Minute, -time.Second, -time.Hour, time.Minute, 90 * time.Second} {
		if _, err := api.Pool.Exec(ctx, `INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at, publish_at, envelope)
			VALUES ($1, 1, $2, 1, 2, now(), now(), now() + make_interval(secs => $3), '\x00')`, uuid.New(), uuid.New(), ahead.Seconds()); err != nil {
			t.Fatalf("outbox row %d: %v", i, err)
		}
	}
	if _, err := api.Pool.Exec(ctx, `INSERT INTO leader_epochs (election, epoch, leader, updated_at) VALUES ('prefetcher-range-0007', 12, 'prefetcher-b', now() - interval '3 seconds')
		ON CONFLICT (election) DO UPDATE SET epoch = 12, leader = 'prefetcher-b'`); err != nil {
		t.Fatal(err)
	}
	instancesFixture(t, api)
	// The group's lag as the workers' rollups write it: low read two
	// minutes ago (stale), high just now.
	if _, err := api.Pool.Exec(ctx, `INSERT INTO group_lag (topic, records, updated_at, worker_id) VALUES
		('sundial.fire.low', 3, now() - interval '2 minutes', 'worker-1'), ('sundial.fire.high', 1200, now() - interval '4 seconds', 'worker-2')
		ON CONFLICT (topic) DO UPDATE SET records = excluded.records, updated_at = excluded.updated_at`); err != nil {
		t.Fatal(err)
	}
}

// instancesFixture has the services report as they do, through their
// reporters: a relay and a prefetcher ready, a worker whose Kafka check
// fails, a relay stopped gracefully; and a worker whose last report is
// five minutes old (it died), whose checks no longer count.
func instancesFixture(t *testing.T, api *apitest.API) {
	t.Helper()
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	refused := func(context.Context) error {
		return errors.New("kafka: dial tcp 127.0.0.1:9092: connect: connection refused")
	}
	opts := instances.Options{Interval: time.Hour} // one report, at Start
	for _, r := range []struct {
		service, name string
		checks        map[string]admin.Check
		stop          bool
	}{
		{"relay", "relay-a", map[string]admin.Check{"kafka": ok, "postgres": ok}, false},
		{"prefetcher", "prefetcher-b", map[string]admin.Check{"zookeeper": ok, "postgres": ok}, false},
		{"worker", "worker-1", map[string]admin.Check{"kafka": refused, "redis": ok, "postgres": ok}, false},
		{"relay", "relay-old", map[string]admin.Check{"kafka": ok, "postgres": ok}, true},
	} {
		rep := instances.NewReporter(api.Pool, r.service, r.name, r.checks, opts)
		if err := rep.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if r.stop {
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				var n int
				if err := api.Pool.QueryRow(ctx, `SELECT count(*) FROM service_instances WHERE instance = $1`, r.name).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s never reported", r.name)
				}
			}
			rep.Stop()
			continue
		}
		t.Cleanup(rep.Stop)
	}
	if _, err := api.Pool.Exec(ctx, `INSERT INTO service_instances (service, instance, started_at, seen_at, ready, checks)
		VALUES ('worker', 'worker-3', now() - interval '1 hour', now() - interval '5 minutes', true, '[{"name":"kafka","ok":true,"ms":1.5}]')`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rows, err := instances.Read(ctx, api.Pool, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d service rows, want 5", len(rows))
		}
	}
}

// cell is the text of the first element of class cls in the row of class
// row inside the element whose id is id, tags stripped.
func cell(t *testing.T, page, id, row, cls string) string {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no #%s in the page", id)
	}
	sec := page[i:]
	j := strings.Index(sec, `<tr class="`+row+`">`)
	if j < 0 {
		t.Fatalf("no row %s in #%s", row, id)
	}
	m := regexp.MustCompile(`<td class="` + cls + `">([^<]*)</td>`).FindStringSubmatch(sec[j:])
	if m == nil {
		t.Fatalf("no %s cell in row %s of #%s", cls, row, id)
	}
	return m[1]
}

// Against the real Postgres, without Prometheus: the overview shows the
// tenant's firings, outcomes, success rate and lateness p50/p99 for the
// hour and the day from the rollup rows (priorities summed, other
// tenants' rows not counted), what runs now on the live workers only, and
// the hour's charts; an operator tenant also sees every tenant's hour,
// the outbox's due and staged rows, the range leaders and each component
// reachable or not; a tenant that is not an operator sees none of that.
func TestIntegrationOverviewNumbersFromTheRollup(t *testing.T) {
	api := startConsole(t, false, func(c *console.Config) {
		c.OperatorTenants = []string{"acme"}
		c.Components = map[string]func(context.Context) error{
			"postgres":  func(ctx context.Context) error { return nil },
			"zookeeper": func(context.Context) error { return errors.New("dial tcp 10.0.0.9:2181: connection refused") },
		}
	})
	numbersFixture(t, api)
	acme := newBrowser(t, api)
	acme.signIn(apitest.TokenAcme)
	code, page, _ := acme.do("GET", "/", nil)
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	for _, c := range []struct{ row, cls, want string }{
		{"hour", "firings", "56"}, {"hour", "succeeded", "50"}, {"hour", "failed", "2"}, {"hour", "retried", "3"}, {"hour", "dead", "1"},
		{"hour", "success", "89.3%"}, {"hour", "p50", "1.8ms"}, {"hour", "p99", "7.4ms"},
		{"day", "firings", "956"}, {"day", "succeeded", "950"}, {"day", "p50", "36.1ms"}, {"day", "p99", "49.7ms"},
	} {
		if got := cell(t, page, "own-numbers", c.row, c.cls); got != c.want {
			t.Errorf("own %s %s = %q, want %q", c.row, c.cls, got, c.want)
		}
	}
	own := page[strings.Index(page, `id="own"`):strings.Index(page, `id="platform"`)]
	if !strings.Contains(own, `<span class="big running">5</span> executions running now, on 2 workers`) {
		t.Errorf("running now: %s", own)
	}
	for _, want := range []string{`id="firings-chart"`, `id="lateness-chart"`} {
		if !strings.Contains(own, want) {
			t.Errorf("the rollup's charts lack %s", want)
		}
	}
	if strings.Contains(own, "globex") {
		t.Error("acme's numbers name globex")
	}
	if got := cell(t, page, "platform-numbers", "hour", "firings"); got != "63" {
		t.Errorf("the platform's hour: %q firings, want 63 (acme 56 + globex 7)", got)
	}
	plat := page[strings.Index(page, `id="platform"`):]
	for _, want := range []string{
		`<span class="big running">7</span> executions running now, on 2 workers`,
		`<span class="big" id="outbox-due">3</span> outbox rows due`, `<span class="big" id="outbox-all">5</span> outbox rows in all`,
		`<td class="mono">prefetcher-range-0007</td><td class="mono">prefetcher-b</td><td>12</td>`,
		`<td>postgres</td><td><span class="status succeeded">reachable</span>`,
		`<td>zookeeper</td><td><span class="status failed">unreachable</span> <span class="clip">dial tcp 10.0.0.9:2181: connection refused</span>`,
		`id="platform-rollup-firings-chart"`,
		`<tr><td>high</td><td class="mono">sundial.fire.high</td><td>1200</td>`,
		`<tr class="stale"><td>low</td><td class="mono">sundial.fire.low</td><td>3</td>`,
		// The services' own reports, and the components as they reach them.
		`<tr><td>relay</td><td class="mono">relay-a</td>
<td><span class="status succeeded">ready</span></td>`,
		`<tr class="stale"><td>worker</td><td class="mono">worker-1</td>
<td><span class="status failed">not ready</span></td>`,
		`<span class="check">kafka <span class="status failed">failing</span> <span class="clip">kafka: dial tcp 127.0.0.1:9092: connect: connection refused</span>`,
		`<tr class="stale"><td>relay</td><td class="mono">relay-old</td>
<td><span class="status failed">stopped</span></td>`,
		`<tr class="stale"><td>worker</td><td class="mono">worker-3</td>
<td><span class="status failed">not reporting</span></td>`,
		`<tr><td>kafka</td><td>relay, worker</td>
<td><span class="status failed">reached by 1 of 2</span><br><span class="clip">worker worker-1: kafka: dial tcp 127.0.0.1:9092: connect: connection refused</span>`,
		`<tr><td>postgres</td><td>prefetcher, relay, worker</td>
<td><span class="status succeeded">reached by 3 of 3</span>`,
		`<tr><td>zookeeper</td><td>prefetcher</td>
<td><span class="status succeeded">reached by 1 of 1</span>`,
	} {
		if !strings.Contains(plat, want) {
			t.Errorf("the platform panel lacks %s", want)
		}
	}
	if hi, lo := strings.Index(plat, "sundial.fire.high"), strings.Index(plat, "sundial.fire.low"); hi > lo {
		t.Error("the lag of LOW is listed before HIGH's")
	}
	if i := strings.Index(plat, "sundial.fire.low"); !strings.Contains(plat[i:i+200], `<span class="status failed">stale</span>`) {
		t.Errorf("a lag read two minutes ago is not marked stale: %s", plat[i:i+200])
	}

	globex := newBrowser(t, api)
	globex.signIn(apitest.TokenGlobex)
	_, gpage, _ := globex.do("GET", "/", nil)
	if got := cell(t, gpage, "own-numbers", "hour", "firings"); got != "7" {
		t.Errorf("globex's hour: %q firings, want 7", got)
	}
	if strings.Contains(gpage, `id="platform"`) || strings.Contains(gpage, "outbox") {
		t.Error("a tenant that is not an operator is shown the platform panel")
	}
}

// TestBrowserOverviewWithoutPrometheus shows the overview of an operator
// tenant in headless Chromium with no Prometheus configured: the numbers
// table, the rollup's charts and the platform panel are drawn, and the
// screenshot goes to $SUNDIAL_SCREENSHOTS (docs/console for
// docs/console.md).
func TestBrowserOverviewWithoutPrometheus(t *testing.T) {
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
	api := startConsole(t, false, func(c *console.Config) {
		c.OperatorTenants = []string{"acme"}
		c.Components = map[string]func(context.Context) error{
			"postgres": func(ctx context.Context) error { return nil },
			"redis":    func(context.Context) error { return errors.New("dial tcp 127.0.0.1:6390: connection refused") },
		}
	})
	numbersFixture(t, api)
	// A live hour: acme fired every minute, more at the top of it.
	now := time.Now().UTC().Truncate(time.Minute)
	for i := 6; i < 60; i++ {
		var o [firingstats.NumOutcomes]int64
		o[firingstats.Succeeded], o[firingstats.Retried] = int64(30+i%7*4), int64(i%5)
		if i%17 == 0 {
			o[firingstats.Dead] = 2
		}
		rollupRow(t, api, "acme", now.Add(-time.Duration(i)*time.Minute), 2, o, map[int]int64{2: 20, 3: o[firingstats.Succeeded] - 20, 7 + i%3: 2})
	}

	ctx := chromium.Start(t, bin)
	step, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type css = chromedp.CSS
	base := "http://" + api.HTTPAddr
	if err := chromedp.Do(step,
		chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), apitest.TokenAcme), chromedp.Click(css("#signin")), chromedp.WaitVisible(css("#role")),
		chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#own-numbers")), chromedp.WaitVisible(css("#firings-chart svg")),
		chromedp.WaitVisible(css("#api-components")), chromedp.WaitVisible(css("#group-lag")),
		chromedp.WaitVisible(css("#services")), chromedp.WaitVisible(css("#service-components")),
	); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(step, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(v)
	}
	hour, running, redis, lag := text("#own-numbers tr.hour td.firings"), text("#own .running"), text("#api-components"), text("#group-lag")
	services, reached := text("#services"), text("#service-components")
	png, err := chromedp.Run(step, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "18-overview-rollup.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if hour == "" || hour == "56" || hour == "0" {
		t.Errorf("the hour's firings read %q: the live hour's rows are not counted", hour)
	}
	if strings.TrimSpace(running) != "5" {
		t.Errorf("running now %q, want 5", running)
	}
	if !strings.Contains(lag, "sundial.fire.high") || !strings.Contains(lag, "1200") || !strings.Contains(lag, "stale") {
		t.Errorf("the consumer lag table reads %q, want HIGH's 1200 and LOW's read marked stale", lag)
	}
	for _, want := range []string{"relay-a", "ready", "worker-1", "not ready", "relay-old", "stopped", "worker-3", "not reporting"} {
		if !strings.Contains(services, want) {
			t.Errorf("the services table reads %q, want %q in it", services, want)
		}
	}
	if !strings.Contains(reached, "reached by 1 of 2") || !strings.Contains(reached, "zookeeper") {
		t.Errorf("the components as the services reach them read %q, want Kafka reached by 1 of 2 and ZooKeeper", reached)
	}
	if !strings.Contains(redis, "unreachable") {
		t.Errorf("the components table does not show redis unreachable: %q", redis)
	}
}
