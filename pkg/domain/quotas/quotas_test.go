package quotas_test

import (
	"strings"
	"testing"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
)

func TestFiringRatesResolveDefaultsThenTenants(t *testing.T) {
	f, err := quotas.ParseFile([]byte(`
defaults:
  max_jobs: 10
  firing_rate_per_second: 50
tenants:
  acme:
    firing_rate_per_second: 5
    firing_burst: 20
  globex:
    firing_burst: 3
  initech:
    max_jobs: 1
  loadtest:
    firing_rate_per_second: 0
`))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quotas.Resolve(quotas.Limits{Firing: quotas.FiringRate{Rate: 1, Burst: 7}}, f)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]quotas.FiringRate{
		"acme":     {Rate: 5, Burst: 20},
		"globex":   {Rate: 50, Burst: 3},
		"initech":  {Rate: 50, Burst: 7}, // only the api's keys: the defaults
		"other":    {Rate: 50, Burst: 7},
		"loadtest": {Rate: 0, Burst: 7},
	} {
		if got := q.For(tenant).Firing; got != want {
			t.Errorf("%s: %+v, want %+v", tenant, got, want)
		}
	}
	if !q.FiringLimited() {
		t.Fatal("Limited with a default rate")
	}
	var none *quotas.Tenants
	if none.For("x") != (quotas.Limits{}) || none.FiringLimited() {
		t.Fatal("nil limits something")
	}
	// A rate without a burst bursts one.
	q, _ = quotas.Resolve(quotas.Limits{Firing: quotas.FiringRate{Rate: 2}}, quotas.File{})
	if q.For("x").Firing.Burst != 1 {
		t.Fatalf("burst %d", q.For("x").Firing.Burst)
	}
}

func TestFileRejectsUnknownKeysAndNegativeRates(t *testing.T) {
	if _, err := quotas.ParseFile([]byte("tenants:\n  acme:\n    firing_rate: 5\n")); err == nil || !strings.Contains(err.Error(), "firing_rate") {
		t.Fatalf("misspelt key: %v", err)
	}
	f, err := quotas.ParseFile([]byte("tenants:\n  acme:\n    firing_rate_per_second: -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := quotas.Resolve(quotas.Limits{}, f); err == nil || !strings.Contains(err.Error(), "tenant acme") || !strings.Contains(err.Error(), "firing_rate_per_second") {
		t.Fatalf("negative rate: %v", err)
	}
}
