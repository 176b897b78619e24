package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func testTarget(t *testing.T) *importTarget {
	t.Helper()
	tg, err := newImportTarget("http://runner:8080/run?job={{.Name}}&cmd={{urlquery .Command}}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

const sampleCrontab = `# m h dom mon dow command
MAILTO=ops@example.com
CRON_TZ=Europe/Berlin
0 3 * * * /usr/local/bin/backup --full
# name: cleanup-tmp
*/15 * * * 1-5 find /tmp -mtime +1 -delete

@hourly /usr/bin/rotate-logs
CRON_TZ="America/New_York"
30 9 * * mon-fri echo "market open"
`

func TestParseCrontab(t *testing.T) {
	items, errs := parseCrontab("ops.cron", strings.NewReader(sampleCrontab), testTarget(t), map[string]string{"team": "ops"})
	if len(errs) != 0 {
		t.Fatal(errors.Join(errs...))
	}
	type want struct{ source, name, cron, tz string }
	wants := []want{
		{"ops.cron:4", "usr-local-bin-backup-full-", "0 3 * * *", "Europe/Berlin"},
		{"ops.cron:6", "cleanup-tmp", "*/15 * * * 1-5", "Europe/Berlin"},
		{"ops.cron:8", "usr-bin-rotate-logs-", "@hourly", "Europe/Berlin"},
		{"ops.cron:10", "echo-market-open-", "30 9 * * mon-fri", "America/New_York"},
	}
	if len(items) != len(wants) {
		t.Fatalf("%d items, want %d", len(items), len(wants))
	}
	for i, w := range wants {
		it, j := items[i], items[i].req.GetJob()
		if it.source != w.source || !strings.HasPrefix(j.GetName(), w.name) || j.GetSchedule().GetCron() != w.cron || j.GetSchedule().GetTimezone() != w.tz {
			t.Errorf("item %d: %s %q %q %q, want %+v", i, it.source, j.GetName(), j.GetSchedule().GetCron(), j.GetSchedule().GetTimezone(), w)
		}
		if j.GetLabels()["team"] != "ops" || j.GetLabels()["imported-from"] != "crontab" {
			t.Errorf("item %d labels %v", i, j.GetLabels())
		}
		if !strings.HasPrefix(it.req.GetIdempotencyKey(), "import/"+j.GetName()+"/") {
			t.Errorf("item %d key %q", i, it.req.GetIdempotencyKey())
		}
	}
	first := items[0].req.GetJob()
	if u := first.GetTarget().GetHttp().GetUrl(); u != "http://runner:8080/run?job="+first.GetName()+"&cmd=%2Fusr%2Flocal%2Fbin%2Fbackup+--full" {
		t.Errorf("url %q", u)
	}
	var payload struct {
		Command string            `json:"command"`
		Env     map[string]string `json:"env"`
	}
	if err := json.Unmarshal(first.GetPayload(), &payload); err != nil || payload.Command != "/usr/local/bin/backup --full" || payload.Env["MAILTO"] != "ops@example.com" {
		t.Errorf("payload %s (%v)", first.GetPayload(), err)
	}

	// Names and keys are stable: the same file gives the same ones; a
	// changed line keeps no key of its old self.
	again, _ := parseCrontab("ops.cron", strings.NewReader(sampleCrontab), testTarget(t), map[string]string{"team": "ops"})
	for i := range items {
		if again[i].req.GetIdempotencyKey() != items[i].req.GetIdempotencyKey() {
			t.Fatalf("item %d: key %q then %q", i, items[i].req.GetIdempotencyKey(), again[i].req.GetIdempotencyKey())
		}
	}
	changed, _ := parseCrontab("ops.cron", strings.NewReader(strings.Replace(sampleCrontab, "0 3 * * *", "0 4 * * *", 1)), testTarget(t), nil)
	if changed[0].req.GetJob().GetName() == first.GetName() || changed[1].req.GetIdempotencyKey() == items[1].req.GetIdempotencyKey() {
		t.Fatal("a changed line (or changed labels) kept its name or key")
	}
}

func TestParseCrontabErrorsNameTheLine(t *testing.T) {
	src := strings.Join([]string{
		"@reboot /usr/bin/start-daemon", // 1
		"61 * * * * /bin/true",          // 2
		"CRON_TZ=Mars/Olympus",          // 3
		"* * * *",                       // 4
		"0 1 * * * /bin/ok",             // 5
		"0 1 * * * /bin/ok",             // 6
		"@daily",                        // 7
	}, "\n")
	items, errs := parseCrontab("bad.cron", strings.NewReader(src), testTarget(t), nil)
	if len(items) != 1 {
		t.Fatalf("%d good items, want 1 (line 5)", len(items))
	}
	want := []string{
		"bad.cron:1: @reboot runs when the machine boots",
		"bad.cron:2: schedule.cron",
		`bad.cron:3: CRON_TZ="Mars/Olympus" is not an IANA time zone`,
		`bad.cron:4: want 5 schedule fields and a command`,
		`bad.cron:6: job name "bin-ok-`,
		"bad.cron:7: @daily has no command after it",
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d: %v", len(errs), len(want), errors.Join(errs...))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d: %q, want it to start %q", i, errs[i], w)
		}
	}
}

const sampleManifests = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
  namespace: billing
  labels:
    app: reports
spec:
  schedule: "0 6 * * 1"
  timeZone: Europe/Paris
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 300
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          containers:
            - name: report
              image: registry/report:1.2
              command: ["/bin/report"]
              args: ["--weekly"]
              env:
                - name: LEVEL
                  value: info
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: sync
spec:
  schedule: "*/5 * * * *"
  concurrencyPolicy: Replace
  jobTemplate:
    spec:
      template:
        spec:
          containers:
            - name: sync
              image: registry/sync:3
              command: ["/bin/sync", "--all"]
`

func TestParseCronJobs(t *testing.T) {
	items, skipped, errs := parseCronJobs("jobs.yaml", strings.NewReader(sampleManifests), testTarget(t), nil)
	if len(errs) != 0 {
		t.Fatal(errors.Join(errs...))
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "jobs.yaml:1: Deployment web") {
		t.Fatalf("skipped %v", skipped)
	}
	if len(items) != 2 {
		t.Fatalf("%d items", len(items))
	}
	report, sync := items[0], items[1]
	j := report.req.GetJob()
	if report.source != "jobs.yaml:6" || j.GetName() != "billing/report" || j.GetSchedule().GetCron() != "0 6 * * 1" || j.GetSchedule().GetTimezone() != "Europe/Paris" {
		t.Fatalf("report: %s %v", report.source, j)
	}
	if j.GetOverlap() != sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP || j.GetMisfire().GetGrace().AsDuration() != 5*time.Minute ||
		j.GetMisfire().GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE || !report.req.GetPaused() {
		t.Fatalf("report policies: overlap %v misfire %v paused %v", j.GetOverlap(), j.GetMisfire(), report.req.GetPaused())
	}
	if j.GetLabels()["app"] != "reports" || j.GetLabels()["imported-from"] != "cronjob" {
		t.Fatalf("labels %v", j.GetLabels())
	}
	if !strings.Contains(j.GetTarget().GetHttp().GetUrl(), "cmd=%2Fbin%2Freport+--weekly") || !strings.Contains(string(j.GetPayload()), `"image":"registry/report:1.2"`) ||
		!strings.Contains(string(j.GetPayload()), `"LEVEL":"info"`) {
		t.Fatalf("target %v payload %s", j.GetTarget(), j.GetPayload())
	}
	s := sync.req.GetJob()
	if s.GetName() != "sync" || s.GetOverlap() != sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER || s.GetMisfire() != nil || sync.req.GetPaused() {
		t.Fatalf("sync: %v paused %v", s, sync.req.GetPaused())
	}
}

func TestParseCronJobErrorsNameTheLine(t *testing.T) {
	doc := func(name, spec string) string {
		return "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: " + name + "\nspec:\n" + spec
	}
	src := strings.Join([]string{
		doc("a", "  schedule: \"0 0 * * *\"\n  concurrencyPolicy: Sometimes\n"),  // lines 1-7: policy on 7
		doc("b", "  schedule: \"0 25 * * *\"\n"),                                 // 9-14: schedule on 14
		doc("c", "  schedule: \"@daily\"\n  timeZone: Nowhere/Land\n"),           // 16-22: timeZone on 22
		doc("d", "  schedule: \"@daily\"\n  startingDeadlineSeconds: 9999999\n"), // 24-30: deadline on 30
		doc("e", "  schedule: \"@reboot\"\n"),                                    // 32-37: schedule on 37
		doc("f", "  schedule: \"@daily\"\n  suspend: maybe\n"),                   // 39-45
	}, "---\n")
	items, _, errs := parseCronJobs("bad.yaml", strings.NewReader(src), testTarget(t), nil)
	if len(items) != 0 {
		t.Fatalf("%d items from bad manifests", len(items))
	}
	want := []string{
		`bad.yaml:7: spec.concurrencyPolicy "Sometimes"`,
		"bad.yaml:14: CronJob b: schedule.cron",
		"bad.yaml:22: CronJob c: schedule.timezone",
		"bad.yaml:30: CronJob d: misfire.grace",
		"bad.yaml:37: spec.schedule: @reboot runs when the machine boots",
		`bad.yaml:45: spec.suspend "maybe"`,
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d: %v", len(errs), len(want), errors.Join(errs...))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d: %q, want it to start %q", i, errs[i], w)
		}
	}
}

func TestImportTargetTemplates(t *testing.T) {
	if _, err := newImportTarget("", "", ""); !errors.Is(err, errUsage) {
		t.Fatalf("no target: %v", err)
	}
	if _, err := newImportTarget("http://x/{{.Name}}", "t", ""); !errors.Is(err, errUsage) {
		t.Fatalf("both targets: %v", err)
	}
	raw, err := newImportTarget("http://runner/run?cmd={{.Command}}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.target(importSource{Command: "echo hi"}); err == nil || !strings.Contains(err.Error(), "urlquery") {
		t.Fatalf("an unescaped command with a space: %v", err)
	}
	kafka, err := newImportTarget("", "cron.{{.Name}}", "")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := kafka.target(importSource{Name: "backup"})
	if err != nil || tg.GetKafka().GetTopic() != "cron.backup" {
		t.Fatalf("kafka: %v %v", tg, err)
	}
}

// A crontab written by export reads back as the same jobs: names, cron,
// zones, commands and so idempotency keys; a paused job is written
// commented out, and a job with no crontab form is skipped with why.
func TestExportCrontabRoundTrip(t *testing.T) {
	items, errs := parseCrontab("ops.cron", strings.NewReader(sampleCrontab), testTarget(t), nil)
	if len(errs) != 0 {
		t.Fatal(errors.Join(errs...))
	}
	var jobs []*sundialv1.Job
	for _, it := range items {
		j := it.req.GetJob()
		j.Status = sundialv1.JobStatus_JOB_STATUS_ACTIVE
		jobs = append(jobs, j)
	}
	jobs[3].Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
	every := &sundialv1.Job{Name: "ticker", Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "*/5 * * * * *"}}}
	var out strings.Builder
	skipped, err := writeCrontab(&out, append(jobs, every))
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "ticker") || !strings.Contains(skipped[0], "crontab has no seconds") {
		t.Fatalf("skipped %v", skipped)
	}
	if !strings.Contains(out.String(), "# paused: 30 9 * * mon-fri echo \"market open\"") {
		t.Fatalf("the paused job is not commented out:\n%s", out.String())
	}
	back, errs := parseCrontab("exported.cron", strings.NewReader(out.String()), testTarget(t), nil)
	if len(errs) != 0 {
		t.Fatalf("%v\n%s", errors.Join(errs...), out.String())
	}
	if len(back) != 3 {
		t.Fatalf("%d jobs read back, want the 3 active ones:\n%s", len(back), out.String())
	}
	byName := map[string]importItem{}
	for _, it := range back {
		byName[it.req.GetJob().GetName()] = it
	}
	for _, it := range items[:3] {
		got, ok := byName[it.req.GetJob().GetName()]
		if !ok || got.req.GetIdempotencyKey() != it.req.GetIdempotencyKey() {
			t.Errorf("%s: read back as %v", it.req.GetJob().GetName(), got.req)
		}
	}
}

// CronJob manifests written by export read back with the same name,
// schedule, zone, concurrency policy, deadline, suspension and command.
func TestExportCronJobsRoundTrip(t *testing.T) {
	items, _, errs := parseCronJobs("jobs.yaml", strings.NewReader(sampleManifests), testTarget(t), nil)
	if len(errs) != 0 {
		t.Fatal(errors.Join(errs...))
	}
	var jobs []*sundialv1.Job
	for _, it := range items {
		j := it.req.GetJob()
		j.Status = sundialv1.JobStatus_JOB_STATUS_ACTIVE
		if it.req.GetPaused() {
			j.Status = sundialv1.JobStatus_JOB_STATUS_PAUSED
		}
		jobs = append(jobs, j)
	}
	buffered := &sundialv1.Job{Name: "q", Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "@daily"}},
		Target:  &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x/"}}},
		Overlap: sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL}
	var out strings.Builder
	skipped, err := writeCronJobs(&out, append(jobs, buffered))
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "BUFFER_ALL has no concurrencyPolicy") {
		t.Fatalf("skipped %v", skipped)
	}
	back, _, errs := parseCronJobs("exported.yaml", strings.NewReader(out.String()), testTarget(t), nil)
	if len(errs) != 0 || len(back) != 2 {
		t.Fatalf("%d read back, %v\n%s", len(back), errors.Join(errs...), out.String())
	}
	for i, it := range back {
		want, got := items[i].req, it.req
		wj, gj := want.GetJob(), got.GetJob()
		if gj.GetName() != wj.GetName() || gj.GetSchedule().GetCron() != wj.GetSchedule().GetCron() || gj.GetSchedule().GetTimezone() != wj.GetSchedule().GetTimezone() ||
			gj.GetOverlap() != wj.GetOverlap() || gj.GetMisfire().GetGrace().AsDuration() != wj.GetMisfire().GetGrace().AsDuration() ||
			got.GetPaused() != want.GetPaused() || string(gj.GetPayload()) != string(wj.GetPayload()) {
			t.Errorf("job %d: read back as\n%v\nwant\n%v\n%s", i, got, want, out.String())
		}
	}
}

// No crontab makes the parser panic, and every problem it reports names
// the file and a line within it.
func FuzzParseCrontab(f *testing.F) {
	f.Add(sampleCrontab)
	f.Add("@reboot x\nCRON_TZ=\n* * * *\n# name: \n0 0 * * * a\n0 0 * * * a\n")
	tg, err := newImportTarget("http://runner/run?cmd={{urlquery .Command}}", "", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		items, errs := parseCrontab("f.cron", strings.NewReader(src), tg, nil)
		lines := strings.Count(src, "\n") + 1
		for _, err := range errs {
			var n int
			if _, serr := fmt.Sscanf(err.Error(), "f.cron:%d:", &n); serr != nil || n < 1 || n > lines+1 {
				t.Fatalf("error %q does not name a line of the file (%d lines)", err, lines)
			}
		}
		for _, it := range items {
			if it.req.GetIdempotencyKey() == "" || it.req.GetJob().GetName() == "" {
				t.Fatalf("item without a key or name: %v", it.req)
			}
		}
	})
}

// No YAML makes the CronJob parser panic, and every problem names the file.
func FuzzParseCronJobs(f *testing.F) {
	f.Add(sampleManifests)
	f.Add("kind: CronJob\napiVersion: batch/v1\nspec: [1]\n---\n- a\n")
	tg, err := newImportTarget("http://runner/run?cmd={{urlquery .Command}}", "", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, _, errs := parseCronJobs("f.yaml", strings.NewReader(src), tg, nil)
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("error %q does not name the file", err)
			}
		}
	})
}
