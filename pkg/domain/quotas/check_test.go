package quotas_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFileOverridesDefaultsPerField(t *testing.T) {
	f, err := quotas.ParseFile([]byte(`
defaults:
  min_interval: 5s
tenants:
  acme:
    max_jobs: 500
  loadtest:
    max_jobs: 0
    create_rate_per_minute: 0
    min_interval: 0s
`))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.DefaultLimits(), f)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.For("globex"); got != (quotas.Limits{MaxJobs: quotas.DefaultMaxJobs, MinInterval: 5 * time.Second, CreatesPerMinute: quotas.DefaultCreatesPerMinute}) {
		t.Fatalf("globex = %+v", got)
	}
	if got := q.For("acme"); got != (quotas.Limits{MaxJobs: 500, MinInterval: 5 * time.Second, CreatesPerMinute: quotas.DefaultCreatesPerMinute}) {
		t.Fatalf("acme = %+v", got)
	}
	if got := q.For("loadtest"); got != (quotas.Limits{}) {
		t.Fatalf("loadtest = %+v", got)
	}
	if got := q.Overridden(); len(got) != 2 || got[0] != "acme" {
		t.Fatalf("Overridden = %v", got)
	}
	var nilQ *quotas.Tenants
	if nilQ.For("x") != (quotas.Limits{}) {
		t.Fatal("nil quotas limit something")
	}
}

func TestParseFileRefusesUnknownAndNegative(t *testing.T) {
	if _, err := quotas.ParseFile([]byte("tenants:\n  acme:\n    max_job: 5\n")); err == nil {
		t.Fatal("misspelt quota accepted")
	}
	if _, err := quotas.ParseFile([]byte("defaults:\n  min_interval: 5\n")); err == nil {
		t.Fatal("min_interval without a unit accepted")
	}
	f, err := quotas.ParseFile([]byte("tenants:\n  acme:\n    max_jobs: -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quotas.Resolve(quotas.DefaultLimits(), f); err == nil || !strings.Contains(err.Error(), "acme") {
		t.Fatalf("negative limit: %v", err)
	}
	if f, err := quotas.ParseFile(nil); err != nil || !f.Defaults.IsZero() {
		t.Fatalf("empty file: %+v %v", f, err)
	}
}

func TestCheckCreate(t *testing.T) {
	l := quotas.Limits{MaxJobs: 3, CreatesPerMinute: 10}
	if err := l.CheckCreate("acme", 2, 9); err != nil {
		t.Fatal(err)
	}
	err := l.CheckCreate("acme", 3, 0)
	var ex *quotas.ExceededError
	if !errors.As(err, &ex) || ex.Quota != quotas.MaxJobs || err.Error() != "quota max_jobs: tenant acme has 3 jobs (limit 3); delete some, or ask for a higher limit" {
		t.Fatalf("max_jobs: %v", err)
	}
	err = l.CheckCreate("acme", 0, 10)
	if !errors.As(err, &ex) || ex.Quota != quotas.CreateRate || !strings.HasPrefix(err.Error(), "quota create_rate: tenant acme created 10 jobs in the last minute") {
		t.Fatalf("create_rate: %v", err)
	}
	if err := (quotas.Limits{}).CheckCreate("acme", 1<<30, 1<<30); err != nil {
		t.Fatalf("zero limits: %v", err)
	}
}

func TestCheckIntervalFindsTheSmallestGap(t *testing.T) {
	from := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	parse := func(expr string) schedule.Schedule {
		s, err := schedule.Parse(expr, schedule.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	minute := quotas.Limits{MinInterval: time.Minute}
	// Hourly slots at :00 and :00:30 — the first gap is 30 s, fine at 30 s.
	if err := (quotas.Limits{MinInterval: 30 * time.Second}).CheckInterval("acme", parse("0,30 0 * * * *"), from); err != nil {
		t.Fatal(err)
	}
	err := minute.CheckInterval("acme", parse("0,30 0 * * * *"), from)
	var ex *quotas.ExceededError
	if !errors.As(err, &ex) || ex.Quota != quotas.MinInterval || !strings.Contains(err.Error(), "fires 30s apart") {
		t.Fatalf("30 s gap: %v", err)
	}
	if err := minute.CheckInterval("acme", parse("0 0 * * *"), from); err != nil {
		t.Fatalf("daily: %v", err)
	}
	// Seconds 0 and 1 of the first day of each month: the close pair is
	// weeks away, and still found.
	err = minute.CheckInterval("acme", parse("0,1 0 0 1 * *"), from)
	if !errors.As(err, &ex) || !strings.Contains(err.Error(), "1s apart (2026-02-01T00:00:00Z and 2026-02-01T00:00:01Z)") {
		t.Fatalf("monthly pair: %v", err)
	}
	once := schedule.Once(from.Add(time.Hour), schedule.Options{})
	if err := (quotas.Limits{MinInterval: 24 * time.Hour}).CheckInterval("acme", once, from); err != nil {
		t.Fatalf("one-off: %v", err)
	}
	every, err := schedule.Every(10*time.Second, from, schedule.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := minute.CheckInterval("acme", every, from); err == nil {
		t.Fatal("10 s interval passed a 1 m minimum")
	}
}

// The worker's keys in the quotas file are accepted and change none of
// the api's limits: they are the tenant's Firing alone.
func TestWorkerKeysInTheFileAreIgnored(t *testing.T) {
	f, err := quotas.ParseFile([]byte("tenants:\n  acme:\n    firing_rate_per_second: 5\n    firing_burst: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.DefaultLimits(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := quotas.DefaultLimits()
	want.Firing = quotas.FiringRate{Rate: 5, Burst: 10}
	if q.For("acme") != want {
		t.Fatalf("acme %+v", q.For("acme"))
	}
}
