//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"
)

func everySecond(n int) []jobPlan {
	var plans []jobPlan
	for i := range n {
		plans = append(plans, jobPlan{name: fmt.Sprintf("sec-%03d", i), cron: "* * * * * *", priority: priorities[i%len(priorities)]})
	}
	return plans
}

// led is how many partition ranges pr says it leads, and whether it could
// be read (a dead process reads as leading nothing).
func led(t *testing.T, pr *proc) (float64, bool) {
	if !pr.Alive() {
		return 0, true
	}
	return metric(t, pr, "sundial_prefetcher_ranges_led")
}

// soleLeader returns the one prefetcher of ps that leads the only range of
// a --ranges 1 group, failing the test if two lead at once; nil while none
// does (or a gauge cannot be read).
func soleLeader(t *testing.T, ps ...*proc) *proc {
	t.Helper()
	var leading *proc
	for _, pr := range ps {
		n, ok := led(t, pr)
		if !ok {
			return nil
		}
		if n > 1 {
			t.Fatalf("%s leads %v ranges of a one-range group", pr.Name, n)
		}
		if n == 1 {
			if leading != nil {
				t.Fatalf("%s and %s both lead the only range", leading.Name, pr.Name)
			}
			leading = pr
		}
	}
	return leading
}

// TestPrefetcherLeaderKilled runs a single leader (--ranges 1) and a
// standby, and kills -9 the leader mid-run. What moves: the only range,
// every partition. To whom: the standby, and only it (never both at once).
// Within what time: the 3 s ZooKeeper session timeout plus 4 s (the
// server's expiry check, the standby's reconciliation, its first pass).
// The window is short (5 s) so the standby must stage most of the run's
// slots itself: no firing of the range's jobs may be lost or doubled.
func TestPrefetcherLeaderKilled(t *testing.T) {
	t.Parallel()
	const sessionTimeout = 3 * time.Second
	args := []string{"--ranges", "1", "--window", "5s", "--zk-session-timeout", sessionTimeout.String()}
	p := newPlatform(t)
	pf1 := p.start("prefetcher-1", "prefetcher", append([]string{"--node-id", "pf-1"}, args...)...)
	pf2 := p.start("prefetcher-2", "prefetcher", append([]string{"--node-id", "pf-2"}, args...)...)
	p.start("worker-1", "worker", "--worker-id", "w1")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(30 * time.Second)
	want, _ := p.register(t, everySecond(40), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	// Until the kill, exactly one of the two leads, checked every 50 ms.
	kill := start.Add(8 * time.Second) // a point in the run, not synchronisation
	var old *proc
	for time.Now().Before(kill) {
		if l := soleLeader(t, pf1, pf2); l != nil {
			if old != nil && l != old {
				t.Fatalf("the range moved from %s to %s with nobody killed", old.Name, l.Name)
			}
			old = l
		}
		time.Sleep(50 * time.Millisecond)
	}
	if old == nil {
		t.Fatal("no prefetcher says it leads the range")
	}
	standby := pf1
	if old == pf1 {
		standby = pf2
	}
	if v, _ := metric(t, old, "sundial_prefetcher_leader"); v != 1 {
		t.Fatalf("%s leads the range but its leader gauge is %v", old.Name, v)
	}
	if v, _ := metric(t, standby, "sundial_prefetcher_leader"); v != 0 {
		t.Fatalf("standby %s says it leads (leader gauge %v)", standby.Name, v)
	}

	old.kill(t)
	killed := time.Now()
	bound := sessionTimeout + 4*time.Second
	for soleLeader(t, pf1, pf2) != standby {
		if time.Since(killed) > bound {
			n, _ := led(t, standby)
			t.Fatalf("standby %s did not take the range over within %s of the kill -9 (leads %v)", standby.Name, bound, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	takeover := time.Since(killed)
	if v, _ := metric(t, standby, "sundial_prefetcher_leader"); v != 1 {
		t.Fatalf("%s leads the range but its leader gauge is %v", standby.Name, v)
	}
	t.Logf("%s led the only range until its kill -9; %s leads it %s later (bound %s)", old.Name, standby.Name, takeover.Round(time.Millisecond), bound)

	awaitDeliveries(t, s, want, end.Add(60*time.Second))
	checkDeliveries(t, s, want, false, true)
	got, _ := s.snapshot()
	// Firings due right after the kill were already in Kafka: the leader's
	// death must not make them late.
	inKafka := func(d delivery) bool {
		return d.scheduled.After(killed) && d.scheduled.Before(killed.Add(4*time.Second))
	}
	t.Logf("lateness of slots staged before the kill and due in the 4s after it: %s", lateness(got, inKafka))
	t.Logf("lateness of all slots: %s", lateness(got, nil))
}

// TestWorkerKilled kills -9 one of two workers mid-run: its firings are
// delivered by the other, none is lost, and redeliveries of executions it
// had finished are dropped before the target.
func TestWorkerKilled(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	w1 := p.start("worker-1", "worker", "--worker-id", "w1", "--session-timeout", "6s")
	p.start("worker-2", "worker", "--worker-id", "w2", "--session-timeout", "6s")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(25 * time.Second)
	want, _ := p.register(t, everySecond(60), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	killed := time.Now()
	w1.kill(t)

	awaitDeliveries(t, s, want, end.Add(90*time.Second))
	// The surviving worker fires the dead one's backlog at once, out of
	// slot order, so only fence uniqueness is checked.
	dups := checkDeliveries(t, s, want, true, false)
	// Only attempts in flight at the instant of the kill can reach the
	// target twice (the second after their lease expires); every execution
	// the dead worker finished is refused by its done marker. The kill
	// lands on the second the herd of 60 fires, and the worker sends a
	// herd's requests together (their leases were taken ahead), so up to
	// that herd may be in flight — and nothing due earlier or later.
	if dups > 60 {
		t.Errorf("%d raw duplicate deliveries after one worker's kill; only the attempts in flight may repeat", dups)
	}
	for id, ds := range s.ByExecution() {
		if len(ds) > 1 && (ds[0].Scheduled.Before(killed.Add(-2*time.Second)) || ds[0].Scheduled.After(killed.Add(time.Second))) {
			t.Errorf("execution %s of slot %s arrived %d times, but it was not in flight at the kill (%s)",
				id, ds[0].Scheduled.Format(time.TimeOnly), len(ds), killed.Format("15:04:05.000"))
		}
	}
	got, _ := s.snapshot()
	t.Logf("lateness of all slots: %s", lateness(got, nil))
}
