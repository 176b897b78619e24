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

// Only the watched jobs have per-job series, created at zero by New (every
// outcome and the lateness histogram), so a dashboard shows 0 for a
// watched job that has not fired rather than no data.
func TestJobSeriesOnlyForWatchedJobs(t *testing.T) {
	const a, b = "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b", "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6c"
	m := New(prometheus.NewRegistry(), DefaultMaxTenants, a, b, a, "")
	if n := testutil.CollectAndCount(m.JobFirings); n != 2*len(Outcomes) {
		t.Fatalf("%d job firing series at start, want %d (every outcome of both jobs)", n, 2*len(Outcomes))
	}
	if n := testutil.CollectAndCount(m.JobLateness); n != 2 {
		t.Fatalf("%d job lateness series at start, want 2", n)
	}
	if m.Job("some-other-job") != nil || m.Job("") != nil {
		t.Fatal("an unwatched job has series")
	}
	m.Job(a).Fired("succeeded")
	m.Job(a).Fired("an_outcome_not_listed")
	m.Job(a).Lateness.Observe(0.002)
	if v := testutil.ToFloat64(m.JobFirings.WithLabelValues(a, "succeeded")); v != 1 {
		t.Fatalf("succeeded firings of a = %v", v)
	}
	if v := testutil.ToFloat64(m.JobFirings.WithLabelValues(a, "an_outcome_not_listed")); v != 1 {
		t.Fatalf("an unlisted outcome was not counted: %v", v)
	}
	if v := testutil.ToFloat64(m.JobFirings.WithLabelValues(b, "succeeded")); v != 0 {
		t.Fatalf("succeeded firings of b = %v", v)
	}

	none := New(prometheus.NewRegistry(), DefaultMaxTenants)
	if none.Job(a) != nil || testutil.CollectAndCount(none.JobFirings) != 0 || testutil.CollectAndCount(none.JobLateness) != 0 {
		t.Fatal("without watched jobs there are per-job series")
	}
}

// The per-job view costs every firing a map lookup and nothing else: no
// allocation for an unwatched job, nor for counting a watched one.
func TestJobLookupDoesNotAllocate(t *testing.T) {
	const watched = "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b"
	m := New(prometheus.NewRegistry(), DefaultMaxTenants, watched)
	other := "0192a3b4-c5d6-7e8f-9a0b-000000000000"
	if n := testing.AllocsPerRun(100, func() {
		if j := m.Job(other); j != nil {
			j.Fired("succeeded")
		}
	}); n != 0 {
		t.Fatalf("an unwatched job's firing allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		j := m.Job(watched)
		j.Fired("succeeded")
		j.Lateness.Observe(0.003)
	}); n != 0 {
		t.Fatalf("a watched job's firing allocates %v times", n)
	}
}

func BenchmarkJobUnwatched(b *testing.B) {
	m := New(prometheus.NewRegistry(), DefaultMaxTenants, "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b")
	id := "0192a3b4-c5d6-7e8f-9a0b-000000000000"
	b.ReportAllocs()
	for b.Loop() {
		if j := m.Job(id); j != nil {
			j.Fired("succeeded")
		}
	}
}
