package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

func TestParseProcStatCountsBusyNotIdle(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  1000 50 300 9000 400 20 30 100 700 0\ncpu0 500 25 150 4500 200 10 15 50 350 0\n"
	got, err := ParseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	// 1000+50+300+20+30+100 ticks = 1500 ticks = 15 s; idle, iowait and
	// guest (already inside user) are not busy.
	if want := 15 * time.Second; got != want {
		t.Fatalf("busy = %s, want %s", got, want)
	}
}

func TestParseProcStatRejectsOtherInput(t *testing.T) {
	for _, in := range []string{"", "cpu0 1 2 3 4 5 6 7\n", "cpu 1 2 x 4 5 6 7 8\n", "intr 1 2 3"} {
		if _, err := ParseProcStat(in); err == nil {
			t.Errorf("ParseProcStat(%q): no error", in)
		}
	}
}

func snap(at time.Time, cpu map[string]time.Duration) UsageSnap {
	s := UsageSnap{}
	for n, c := range cpu {
		s[n] = harness.Usage{At: at, CPU: c}
	}
	return s
}

func TestCPUPerFiringIsCoresOverRate(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	a := snap(t0, map[string]time.Duration{"machine": 0, "worker-1": 0, "postgres": 0, "bench": 0, "gone": 0})
	// Over 10 s at 1,000 firings/s: the machine 15.5 CPU-seconds (1.55
	// cores), the worker 4.8 s, Postgres 1 s, the benchmark 10 ms (0.001
	// ms per firing: below what is shown); "gone" died in between.
	b := snap(t0.Add(10*time.Second), map[string]time.Duration{
		"machine": 15500 * time.Millisecond, "worker-1": 4800 * time.Millisecond, "postgres": time.Second, "bench": 10 * time.Millisecond, "new": time.Second})
	got := CPUPerFiring(a, b, 1000)
	// The platform is the worker and Postgres, not the benchmark.
	if want := "1.55 ms (platform 0.580: worker-1 0.480, postgres 0.100)"; got != want {
		t.Fatalf("CPUPerFiring = %q, want %q", got, want)
	}
	// A system inside the benchmark's process has no platform apart.
	if got, want := CPUPerFiringInProcess(Cores(a, b), 1000), "1.55 ms (worker-1 0.480, postgres 0.100)"; got != want {
		t.Errorf("CPUPerFiringInProcess = %q, want %q", got, want)
	}
	if got := CPUPerFiring(a, b, 0); got != "–" {
		t.Errorf("at rate 0: %q, want –", got)
	}
	if got := b.window(a); got != 10*time.Second {
		t.Errorf("window = %s", got)
	}
	delete(b, "machine")
	if got := CPUPerFiring(a, b, 1000); !strings.HasPrefix(got, "machine ?") {
		t.Errorf("without the machine's reading: %q", got)
	}
}

func TestMsPerFiring(t *testing.T) {
	for _, c := range []struct{ cores, rate, want float64 }{
		{1.5, 1000, 1.5}, {2, 8000, 0.25}, {0.5, 5000, 0.1}, {1, 0, 0},
	} {
		if got := MsPerFiring(c.cores, c.rate); got < c.want-1e-12 || got > c.want+1e-12 {
			t.Errorf("MsPerFiring(%v, %v) = %v, want %v", c.cores, c.rate, got, c.want)
		}
	}
}

// The discarding CPU net of firing: the firings received while discarding
// are priced at the platform CPU per firing of the 15 s before the delete
// and taken from the window's CPU.
func TestNetOfFiringTakesTheFiringsAtTheirPriceBefore(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	snap := func(at time.Duration, worker, bench time.Duration) UsageSnap {
		return UsageSnap{
			machineKey: {At: t0.Add(at)},
			"worker-1": {At: t0.Add(at), CPU: worker},
			BenchKey:   {At: t0.Add(at), CPU: bench},
		}
	}
	// 15 s before the delete: 3 s of worker CPU for 1,000 firings (3 ms
	// each); the bench's own CPU is not the platform's.
	snaps := []UsageSnap{snap(0, 0, 0), snap(15*time.Second, 3*time.Second, time.Hour), snap(25*time.Second, 8*time.Second, time.Hour)}
	var got []harness.Delivery
	for i := range 1000 {
		got = append(got, harness.Delivery{Received: t0.Add(time.Duration(i) * 15 * time.Millisecond)})
	}
	del0 := t0.Add(15 * time.Second)
	for i := range 500 { // 500 fired while discarding: 1.5 s of the 5 s
		got = append(got, harness.Delivery{Received: del0.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	net, note, ok := netOfFiring(snaps, got, del0, t0.Add(25*time.Second), 5)
	if !ok {
		t.Fatal("no estimate")
	}
	if math.Abs(net-3.5) > 1e-9 {
		t.Fatalf("net %.3f s, want 3.5 (%s)", net, note)
	}
	if !strings.Contains(note, "500 firings") || !strings.Contains(note, "3.000 ms") {
		t.Fatalf("note %q", note)
	}
	// No samples before the delete: no estimate.
	if _, _, ok := netOfFiring(snaps[1:], got, del0, t0.Add(25*time.Second), 5); ok {
		t.Fatal("an estimate without a window before the delete")
	}
}

// The discarding CPU over a fixed span, beyond the steady state after it:
// the span's CPU less a span as long late in the run (idle work and the
// new jobs' firing), less the deleted jobs' firings in the first span
// beyond the late span's count, at their price before the delete.
func TestDiscardBeyondSteadySubtractsTheLateSpan(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	del0 := t0.Add(15 * time.Second)
	snap := func(at time.Duration, worker time.Duration) UsageSnap {
		return UsageSnap{machineKey: {At: t0.Add(at)}, "worker-1": {At: t0.Add(at), CPU: worker}}
	}
	// Before the delete: 3 s for 1,000 firings (3 ms each). The first
	// 30 s after it: 12 s more. 55-85 s after it: 1.5 s more.
	snaps := []UsageSnap{
		snap(0, 0), snap(15*time.Second, 3*time.Second),
		snap(45*time.Second, 15*time.Second),
		snap(70*time.Second, 16*time.Second), snap(100*time.Second, 17500*time.Millisecond),
	}
	var got []harness.Delivery
	for i := range 1000 {
		got = append(got, harness.Delivery{Received: t0.Add(time.Duration(i) * 15 * time.Millisecond)})
	}
	for i := range 600 { // the first span: 600 firings
		got = append(got, harness.Delivery{Received: del0.Add(time.Duration(i) * 50 * time.Millisecond)})
	}
	for i := range 100 { // the late span: 100
		got = append(got, harness.Delivery{Received: t0.Add(70*time.Second + time.Duration(i)*300*time.Millisecond)})
	}
	net, note, ok := discardBeyondSteady(snaps, got, del0, 90*time.Second)
	if !ok {
		t.Fatal("no estimate")
	}
	// 12 s − 1.5 s − (600 − 100) × 3 ms = 9 s.
	if math.Abs(net-9) > 1e-9 {
		t.Fatalf("net %.3f s, want 9 (%s)", net, note)
	}
	if _, _, ok := discardBeyondSteady(snaps, got, del0, 60*time.Second); ok {
		t.Fatal("an estimate from a run too short to hold both spans apart")
	}
}
