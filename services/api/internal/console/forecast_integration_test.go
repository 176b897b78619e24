//go:build integration

package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
	"github.com/sundialhq/sundial/testkit/chromium"
)

// forecastFleet registers, as acme, a fleet with a midnight herd: 150
// jobs at 00:00 UTC without jitter and 30 with, plus quieter schedules.
func forecastFleet(t *testing.T, api *apitest.API) {
	t.Helper()
	conn, err := grpc.NewClient(api.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer(apitest.TokenAcme)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	jobs := sundialv1.NewJobServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	add := func(n int, name, cron, zone string, jitter time.Duration, prio sundialv1.Priority) {
		for i := range n {
			_, err := jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: &sundialv1.Job{Name: fmt.Sprintf("%s-%03d", name, i),
				Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: cron}, Timezone: zone},
				MaxJitter: durationpb.New(jitter), Priority: prio,
				Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	add(150, "nightly-report", "0 0 * * *", "UTC", 0, sundialv1.Priority_PRIORITY_MEDIUM)
	add(30, "nightly-sync", "0 0 * * *", "UTC", 30*time.Second, sundialv1.Priority_PRIORITY_LOW)
	add(40, "quarter-hour", "*/15 * * * *", "UTC", 0, sundialv1.Priority_PRIORITY_HIGH)
	add(25, "office-open", "0 9 * * *", "America/New_York", 0, sundialv1.Priority_PRIORITY_MEDIUM)
	add(20, "hourly-half", "30 * * * *", "Europe/Berlin", 10*time.Second, sundialv1.Priority_PRIORITY_CRITICAL)
}

// The forecast page over the real api: the midnight herd with its
// jitter-less share, the H suggestion and the jobs linked; the chart's
// herd bar; a bad window refused naming it; another tenant sees none of
// acme's jobs.
func TestIntegrationForecastPage(t *testing.T) {
	api := startConsole(t, false)
	forecastFleet(t, api)
	b := newBrowser(t, api)
	b.signIn(apitest.TokenAcme)
	code, page, _ := b.do("GET", "/forecast?window=24h", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /forecast: %d\n%s", code, page)
	}
	for _, want := range []string{
		"from 265 active jobs",
		"220 firings at ", " 00:00:00 UTC, 190 of them from jobs with no jitter", // and the quarter-hour jobs
		"cron <code>H 0 * * *</code>", "max_jitter 1m0s",
		`<a href="/jobs/`, "nightly-report-000",
		`class="bar herd"`,
		`aria-current="page">Forecast</a>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the forecast page lacks %q", want)
		}
	}
	if n := strings.Count(page, `<rect class="bar`); n != 144 {
		t.Errorf("%d bars for 24 hours, want 144 (one per 10 minutes)", n)
	}
	code, page, _ = b.do("GET", "/forecast?window=168h&priority=HIGH", nil)
	if code != http.StatusOK || !strings.Contains(page, "from 40 active jobs") || !strings.Contains(page, `id="no-herds"`) {
		t.Fatalf("HIGH over 7 days: %d, page lacks the 40 jobs or the no-herd note", code)
	}
	if code, page, _ = b.do("GET", "/forecast?window=5h", nil); code != http.StatusBadRequest || !strings.Contains(page, "window: &#34;5h&#34; is not one of") {
		t.Fatalf("window=5h: %d %s", code, excerpt(page))
	}
	g := newBrowser(t, api)
	g.signIn(apitest.TokenGlobex)
	if code, page, _ = g.do("GET", "/forecast", nil); code != http.StatusOK || !strings.Contains(page, "from 0 active jobs") || strings.Contains(page, "nightly-report") {
		t.Fatalf("globex's forecast: %d, shows acme's jobs or not zero: %s", code, excerpt(page))
	}
}

func excerpt(s string) string {
	if i := strings.Index(s, "<main"); i >= 0 {
		s = s[i:]
	}
	return s[:min(len(s), 600)]
}

// The forecast page in headless Chromium: the chart draws, the herd bar
// is red, the herd's card and the job links are there, the window select
// reloads the page for seven days; saved as forecast.png in
// $SUNDIAL_SCREENSHOTS (the docs' screenshot).
func TestBrowserForecast(t *testing.T) {
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
	forecastFleet(t, api)
	base := "http://" + api.HTTPAddr
	ctx := chromium.Start(t, bin)
	step := func() context.Context {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return sctx
	}
	type css = chromedp.CSS
	run := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(step(), actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	eval := func(name, expr string) int {
		t.Helper()
		n, err := chromedp.Run(step(), chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	text := func(name, sel string) string {
		t.Helper()
		s, err := chromedp.Run(step(), chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(s)
	}
	run("sign in",
		chromedp.Navigate(base+"/forecast"),
		chromedp.WaitVisible(css("#token")),
		chromedp.KeyEvent(apitest.TokenAcme+kb.Enter),
		chromedp.WaitVisible(css("#forecast-chart svg")), // back where it was going
		chromedp.WaitVisible(css(`nav a[href="/forecast"][aria-current="page"]`)),
	)
	if n := eval("bars", `document.querySelectorAll('#forecast-chart rect.bar').length`); n != 144 {
		t.Fatalf("%d bars drawn, want 144", n)
	}
	if n := eval("herd bar", `[...document.querySelectorAll('#forecast-chart rect.bar.herd')].filter(r => getComputedStyle(r).fill === 'rgb(179, 38, 30)' && r.getBBox().height > 100).length`); n != 1 {
		t.Fatalf("%d tall red herd bars, want 1", n)
	}
	if h := text("herd", ".herd-title"); !strings.HasPrefix(h, "220 firings at ") || !strings.HasSuffix(h, "190 of them from jobs with no jitter") {
		t.Fatalf("herd title %q", h)
	}
	if n := eval("job links", `document.querySelectorAll('.herd-jobs a[href^="/jobs/"]').length`); n < 20 {
		t.Fatalf("%d job links in the herd, want the samples (20 and more)", n)
	}
	png, err := chromedp.Run(step(), chromedp.FullScreenshot(100)) // 100: a PNG
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "forecast.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	run("seven days",
		chromedp.SetValue(css("#window"), "168h"),
		chromedp.Click(css(`#forecast-form button[type="submit"]`)),
	)
	// The click navigates; an evaluation that meets the old page's end
	// fails, so ask again until the new page answers.
	arrived := false
	for range 200 {
		ok, err := chromedp.Run(step(), chromedp.Evaluate[bool](`location.search.includes('window=168h') && document.readyState === 'complete'`))
		if arrived = err == nil && ok; arrived {
			break
		}
		run("wait for the page", chromedp.WaitReady(css("body")))
	}
	if !arrived {
		t.Fatal("the seven-day page never came")
	}
	if n := eval("bars", `document.querySelectorAll('#forecast-chart rect.bar').length`); n != 168 {
		t.Fatalf("%d bars over 7 days, want 168 (one an hour)", n)
	}
	if n := eval("herds", `document.querySelectorAll('section.herd').length`); n != 7 {
		t.Fatalf("%d herds over 7 days, want 7 (every midnight)", n)
	}
}
