package metrics

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The first maxTenants tenants are labelled by name, any later one as
// "other", however many goroutines ask at once.
func TestTenantLabelIsCapped(t *testing.T) {
	m := New(prometheus.NewRegistry(), 3)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				m.Tenant(fmt.Sprint("t", (g+i)%10))
			}
		})
	}
	wg.Wait()
	named := 0
	for i := range 10 {
		if l := m.Tenant(fmt.Sprint("t", i)); l != TenantOther {
			named++
			if l != fmt.Sprint("t", i) {
				t.Fatalf("tenant t%d labelled %q", i, l)
			}
		}
	}
	if named != 3 {
		t.Fatalf("%d tenants labelled by name, want 3", named)
	}
	if m.Tenant("") != TenantUnknown {
		t.Fatal("an empty tenant is not labelled unknown")
	}
	if New(prometheus.NewRegistry(), 0).Tenant("acme") != TenantOther {
		t.Fatal("with no room, a tenant got a label of its own")
	}
}

func TestFiringSeriesCarryTheTenant(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, DefaultMaxTenants)
	m.Firings.WithLabelValues("high", "succeeded", m.Tenant("acme")).Inc()
	m.Lateness.WithLabelValues("high", "target", m.Tenant("acme")).Observe(0.002)
	if n := testutil.CollectAndCount(m.Firings); n != 1 {
		t.Fatalf("%d firing series", n)
	}
	if v := testutil.ToFloat64(m.Firings.WithLabelValues("high", "succeeded", "acme")); v != 1 {
		t.Fatalf("acme's succeeded firings = %v", v)
	}
	if n := testutil.CollectAndCount(m.Lateness); n != 1 {
		t.Fatalf("%d lateness series", n)
	}
}

func BenchmarkTenantSeen(b *testing.B) {
	m := New(prometheus.NewRegistry(), DefaultMaxTenants)
	m.Tenant("acme")
	b.ReportAllocs()
	for b.Loop() {
		m.Tenant("acme")
	}
}
