//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/sundialhq/sundial/testkit/chromium"
	"github.com/sundialhq/sundial/testkit/harness"
)

// TestBrowserConsoleFiresEndToEnd creates a job in the web console, in
// headless Chromium, against the four services running as processes, and
// watches its firings arrive: at the target (the sink) and in the job's
// history, which the console reads from the ledger the worker wrote. Then
// it pauses the job in the console and checks the target stops hearing
// from it, and resumes it and checks it fires again. Nothing is written
// behind the console's back: every row the page shows came through the
// prefetcher, relay, Kafka and a worker.
//
// It runs when SUNDIAL_CHROMIUM names the browser (make test-browser sets
// it); screenshots go to $SUNDIAL_SCREENSHOTS.
func TestBrowserConsoleFiresEndToEnd(t *testing.T) {
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

	httpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// Prometheus (Debian's package, make test-browser installs it) scrapes
	// the worker each second; the console's overview charts from it.
	promBin := os.Getenv("SUNDIAL_PROMETHEUS")
	promAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if tlsMode == harness.MutualTLS {
		t.Skip("SUNDIAL_E2E_TLS=mtls: the headless browser has no client certificate for the console; run it with tls")
	}
	apiArgs := []string{"--http-addr", httpAddr}
	if promBin != "" {
		// The test's tenant is an operator too: the overview adds the
		// platform's panel.
		apiArgs = append(apiArgs, "--console-prometheus-url", "http://"+promAddr, "--console-operator-tenants", "e2e")
	}
	p := newPlatform(t, apiArgs...)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")
	if promBin != "" {
		targets := map[string]string{}
		for _, pr := range p.plat.Processes() {
			targets[pr.Service] = pr.Admin
		}
		startPrometheus(t, promBin, promAddr, targets)
	} else {
		t.Log("SUNDIAL_PROMETHEUS is not set: the overview's charts are not checked")
	}
	s := newSink(t, p)
	base := p.plat.URL(httpAddr)

	// The browser trusts the api's development certificate.
	ctx := chromium.Start(t, bin, trustAPI(t, p))
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	step := func() context.Context {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return sctx
	}
	run := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(step(), actions...); err != nil {
			_ = chromedp.Do(step(), shot("e2e-failed-"+strings.ReplaceAll(name, " ", "-")))
			t.Fatalf("%s: %v", name, err)
		}
	}
	text := func(name, sel string) string {
		t.Helper()
		v, err := chromedp.Run(step(), chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(v)
	}
	type css = chromedp.CSS

	run("sign in",
		chromedp.Navigate(base+"/jobs/new"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), "e2e-token"),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css("#create")), // back where sign-in was asked
	)
	run("create",
		chromedp.SendKeys(css("#name"), "console-every-second"),
		chromedp.SendKeys(css("#cron"), "* * * * * *"),
		chromedp.SendKeys(css("#url"), s.URL()),
		chromedp.WaitVisible(css("#preview li:nth-child(5)")),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#notice")),
	)
	loc, err := chromedp.Run(step(), chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	jobURL := strings.SplitN(loc, "?", 2)[0]
	jobID, err := uuid.Parse(strings.TrimPrefix(jobURL, base+"/jobs/"))
	if err != nil {
		t.Fatalf("the console went to %s after create", loc)
	}

	// fired counts the job's executions the target received, with the
	// latest scheduled instant among them.
	fired := func() (int, time.Time) {
		n, last := 0, time.Time{}
		for _, ds := range s.ByExecution() {
			if ds[0].JobID == jobID {
				n++
				if ds[0].Scheduled.After(last) {
					last = ds[0].Scheduled
				}
			}
		}
		return n, last
	}
	// waitPage reloads the job page until cond holds for what it shows (the
	// page is server-rendered: a reload is how it learns of new rows).
	waitPage := func(what string, cond func(history string) bool) string {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			run("reload "+what, chromedp.Navigate(jobURL), chromedp.WaitVisible(css("#history")))
			h := text("history", "#history tbody")
			if cond(h) {
				return h
			}
			if time.Now().After(deadline) {
				_ = chromedp.Do(step(), shot("e2e-failed-"+strings.ReplaceAll(what, " ", "-")))
				t.Fatalf("timed out waiting for %s; the history shows %q", what, h)
			}
			time.Sleep(500 * time.Millisecond) // other processes' effects: polled
		}
	}

	// The first firings reach the target and the ledger, and the page shows
	// them as the worker recorded them.
	h := waitPage("succeeded firings in the history", func(h string) bool { return strings.Count(h, "succeeded") >= 3 })
	if n, _ := fired(); n < 3 {
		t.Fatalf("the history shows succeeded firings but the target saw %d executions: %q", n, h)
	}
	if !strings.Contains(h, "w1") {
		t.Errorf("the history does not name the worker w1: %q", h)
	}
	// The next fire is the schedule's next instant from now, not the
	// prefetcher's cursor (up to its window ahead).
	if nf, err := time.Parse("2006-01-02 15:04:05Z", text("next fire", "#next-fire")); err != nil || time.Until(nf) > 5*time.Second {
		t.Errorf("next fire of a job firing every second shows %s (%v)", nf.Format(time.RFC3339), err)
	}
	run("fired shot", chromedp.WaitVisible(css("#lateness")), shot("14-e2e-fired"))

	// Pause in the console: firings due after the change settles never
	// reach the target (a firing already leased may finish: one second's).
	run("pause",
		chromedp.Click(css("#pause")),
		chromedp.WaitVisible(css("#confirm")),
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css("#notice")),
	)
	pausedAt := time.Now()
	if st := text("status", "#job-status"); st != "paused" {
		t.Fatalf("after pause: status %q", st)
	}
	before, _ := fired()
	time.Sleep(4 * time.Second) // a quiet period is the thing measured here
	after, last := fired()
	if last.After(pausedAt.Add(2 * time.Second)) {
		t.Fatalf("a firing scheduled at %s reached the target after the pause at %s (%d → %d executions)",
			last.Format(time.RFC3339Nano), pausedAt.Format(time.RFC3339Nano), before, after)
	}
	t.Logf("paused at %s: %d executions before, %d after 4 s, the last scheduled %s",
		pausedAt.Format(time.TimeOnly), before, after, last.Format(time.TimeOnly))

	// Resume: it fires again, from now on.
	run("resume",
		chromedp.Click(css("#resume")),
		chromedp.WaitVisible(css("#confirm")),
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css("#notice")),
	)
	resumedAt := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, last := fired(); last.After(resumedAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no firing reached the target within 60 s of the resume")
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitPage("the resume in the audit trail and a firing after it", func(string) bool {
		a := text("audit", "#audit tbody")
		return strings.Contains(a, "resume") && strings.Contains(a, "pause")
	})
	run("resumed shot", shot("15-e2e-resumed"))

	// The overview charts the tenant's firings by outcome and their
	// lateness from Prometheus.
	if promBin != "" {
		// The newest minute of each chart's table, by column: succeeded
		// firings counted, and p50/p99 lateness with a value. The job keeps
		// firing every second, so they come within a few scrapes.
		const lastMinute = `(() => {
			const out = {};
			for (const id of ['firings-chart', 'lateness-chart']) {
				const t = document.querySelector('#' + id + ' table.minutes');
				if (!t) continue;
				const heads = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
				const rows = t.querySelectorAll('tbody tr');
				const last = rows[rows.length - 1];
				[...last.querySelectorAll('td')].forEach((td, i) => { if (i > 0) out[heads[i]] = td.textContent.trim(); });
			}
			return JSON.stringify(out);
		})()`
		// Opened once: the overview updates itself (polling, every 10 s by
		// default), so the test waits for its figures without reloading it;
		// a mark left on the page's window shows it stayed the same page.
		run("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#as-of")))
		if _, err := chromedp.Run(step(), chromedp.Evaluate[int](`window.sameOverview = 1`)); err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Second)
		defer cancel()
		_, err := chromedp.Run(pctx, chromedp.Poll[bool](`(() => {
			const o = JSON.parse(`+lastMinute+`);
			return window.sameOverview === 1 && Number(document.getElementById('live').dataset.updates) > 0 && Number(o.succeeded) > 0 && !!o.p50 && o.p50 !== '–' && !!o.p99 && o.p99 !== '–';
		})()`, chromedp.WithPollingInterval(time.Second), chromedp.WithPollingTimeout(90*time.Second)))
		js, jerr := chromedp.Run(step(), chromedp.Evaluate[string](lastMinute))
		var got map[string]string
		_ = json.Unmarshal([]byte(js), &got)
		if err != nil {
			_ = chromedp.Do(step(), shot("e2e-failed-overview-charts"))
			t.Fatalf("after 90 s (and at least one live update, not a reload) the overview's newest minute reads %v (%v, %v)", got, err, jerr)
		}
		t.Logf("the overview's newest minute: %v", got)
		// Firings per second too, the newest minute's rate beside each outcome.
		if ps, err := chromedp.Run(step(), chromedp.Evaluate[string](`[...document.querySelectorAll('#firings-chart .per-second')].map(e => e.textContent).join(' ')`)); err != nil || ps == "" {
			t.Errorf("no firings per second beside the chart's outcomes (%v)", err)
		} else {
			t.Logf("firings per second in the newest minute, by outcome: %s", ps)
		}
		run("overview shot", shot("17-e2e-overview-charts"))

		// The platform panel: every component up, the prefetcher leading,
		// the consumer lag and outbox charted.
		comps := text("components", "#components tbody")
		for _, want := range []string{"api", "relay", "prefetcher", "worker"} {
			if !strings.Contains(comps, want) {
				t.Errorf("the components table lacks %s: %q", want, comps)
			}
		}
		if strings.Contains(comps, "down") || !strings.Contains(comps, "election") {
			t.Errorf("the components table reads %q", comps)
		}
		if n, err := chromedp.Run(step(), chromedp.Evaluate[int](`document.querySelectorAll('#platform-lag-chart, #platform-outbox-chart, #platform-firings-chart').length`)); err != nil || n != 3 {
			t.Errorf("%d platform charts (%v)", n, err)
		}
	}
}

// startPrometheus runs Prometheus on addr scraping each service's admin
// address (targets, by service) every second, with its data in a
// temporary directory, and waits until it is ready; the test's cleanup
// stops it.
func startPrometheus(t *testing.T, bin, addr string, targets map[string]string) {
	t.Helper()
	dir := t.TempDir()
	cfg := "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
	for service, admin := range targets {
		cfg += "  - job_name: " + service + "\n    static_configs:\n      - targets: [\"" + admin + "\"]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() { // owned by the cleanup below, which waits for it
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			t.Logf("---- prometheus log (tail) ----\n%s", harness.Tail(log.Name(), 20))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30 s: %v\n%s", err, harness.Tail(log.Name(), 20))
		}
		time.Sleep(100 * time.Millisecond) // another process's start-up: polled
	}
}

// trustAPI has Chromium accept the api's certificate under TLS. The
// platform's CA is in no browser store, so the browser is told the one
// public key the api serves (its SPKI hash) rather than to ignore
// certificate errors: a wrong certificate still fails the test.
func trustAPI(t *testing.T, p *platform) chromedp.ExecAllocatorOption {
	t.Helper()
	dir := p.plat.TLSDir()
	if dir == "" {
		return func(*chromedp.ExecAllocator) {}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(sum[:]))
}
