//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// rangesLed is how many partition ranges pr says it leads (0 when it
// cannot be read).
func rangesLed(t *testing.T, pr *proc) float64 {
	if !pr.Alive() {
		return 0
	}
	v, _ := metric(t, pr, "sundial_prefetcher_ranges_led")
	return v
}

// TestPartitionedPrefetchLeadersKilledAndJoining runs partitioned prefetch
// (--ranges 16) with two prefetchers leading half the ranges each at once,
// then kills -9 one of them mid-run, and later starts a third, which takes
// half of the survivor's ranges. The window is short (5 s), so every
// prefetcher stages slots of the run itself: every slot arrives exactly
// once.
func TestPartitionedPrefetchLeadersKilledAndJoining(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	args := []string{"--ranges", "16", "--window", "5s"}
	pf1 := p.start("prefetcher-1", "prefetcher", append([]string{"--node-id", "pf-1"}, args...)...)
	pf2 := p.start("prefetcher-2", "prefetcher", append([]string{"--node-id", "pf-2"}, args...)...)
	p.start("worker-1", "worker", "--worker-id", "w1")

	deadline := time.Now().Add(30 * time.Second)
	for rangesLed(t, pf1) != 8 || rangesLed(t, pf2) != 8 {
		if time.Now().After(deadline) {
			t.Fatalf("ranges never split 8/8: pf-1 leads %v, pf-2 %v", rangesLed(t, pf1), rangesLed(t, pf2))
		}
		time.Sleep(50 * time.Millisecond)
	}

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(30 * time.Second)
	want, _ := p.register(t, everySecond(40), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	if rangesLed(t, pf1) != 8 || rangesLed(t, pf2) != 8 {
		t.Fatalf("both prefetchers must lead at once: pf-1 leads %v ranges, pf-2 %v", rangesLed(t, pf1), rangesLed(t, pf2))
	}
	pf2.kill(t)
	killed := time.Now()
	deadline = killed.Add(20 * time.Second)
	for rangesLed(t, pf1) != 16 {
		if time.Now().After(deadline) {
			t.Fatalf("pf-1 did not take over pf-2's ranges within 20s (leads %v)", rangesLed(t, pf1))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("pf-1 leads all 16 ranges %s after pf-2's kill -9 (target: within the 3s session timeout plus a tick)", time.Since(killed).Round(time.Millisecond))

	// A newcomer takes its share, and only that.
	pf3 := p.start("prefetcher-3", "prefetcher", append([]string{"--node-id", "pf-3"}, args...)...)
	joined := time.Now()
	deadline = joined.Add(20 * time.Second)
	for rangesLed(t, pf1) != 8 || rangesLed(t, pf3) != 8 {
		if time.Now().After(deadline) {
			t.Fatalf("ranges never split 8/8 after pf-3 joined: pf-1 leads %v, pf-3 %v", rangesLed(t, pf1), rangesLed(t, pf3))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("pf-3 leads 8 ranges %s after it was ready", time.Since(joined).Round(time.Millisecond))
	if end.Before(time.Now().Add(5 * time.Second)) {
		t.Errorf("the run ended before pf-3 staged a window of it (end %s)", end.Format(time.TimeOnly))
	}

	awaitDeliveries(t, s, want, end.Add(60*time.Second))
	checkDeliveries(t, s, want, false, true)
	got, _ := s.snapshot()
	t.Logf("lateness of all slots: %s", lateness(got, nil))
}
