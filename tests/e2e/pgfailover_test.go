//go:build e2e && pgfailover

package e2e

import (
	"testing"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// TestPostgresPrimaryKilledStandbyPromoted runs the four services on the
// cluster profile's Postgres pair (one multi-host DSN with
// target_session_attrs=read-write, as an operator would give them), kills
// the primary the way a crash does while per-second jobs fire, and
// promotes the standby at once, as a failover manager would: the slots
// staged before go on firing, jobs created after it are written by the
// api, staged by the prefetcher's epoch-fenced transactions and published
// by the relay's claims, each through its own pool reconnected to the new
// primary, and every slot reaches its target once (0 lost, 0 duplicate
// effects). The commits are synchronous to the
// standby, so nothing acknowledged is behind on it.
func TestPostgresPrimaryKilledStandbyPromoted(t *testing.T) {
	infra := harness.InfraFromEnv()
	infra.PostgresDSN = testinfra.PostgresHADSN(t)
	// Whatever happens, the pair is made whole again for the next test
	// (the old primary comes back as the new one's standby).
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("postgres", "up"); err != nil {
			t.Errorf("healing the Postgres pair: %v", err)
		}
	})
	p := newPlatformOn(t, infra)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")

	s := newSink(t, p)
	start := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end := start.Add(30 * time.Second)
	want, _ := p.register(t, everySecond(40), s, "", start, end)
	t.Logf("%d slots expected between %s and %s", len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))

	time.Sleep(time.Until(start.Add(8 * time.Second))) // a point in the run, not synchronisation
	primary := testinfra.ClusterScript(t, "postgres", "primary")
	killed := time.Now()
	testinfra.ClusterScript(t, "postgres", "kill-primary")
	testinfra.ClusterScript(t, "postgres", "promote")
	promoted := time.Now()
	t.Logf("killed the primary (port %s) at %s; the standby promoted %s later", primary, killed.Format("15:04:05.000"), promoted.Sub(killed).Round(time.Millisecond))

	// Jobs created after the promotion: the api writes them to the new
	// primary, the prefetcher stages their slots and the relay publishes
	// them through their own reconnected pools.
	after := everySecond(20)
	for i := range after {
		after[i].name = "after-" + after[i].name
	}
	start2 := time.Now().Add(5 * time.Second).Truncate(time.Second)
	end2 := start2.Add(10 * time.Second)
	want2, _ := p.registerRetrying(t, after, s, "", start2, end2, 30*time.Second)
	t.Logf("%d more slots, of jobs created after the promotion, between %s and %s", len(want2), start2.Format(time.TimeOnly), end2.Format(time.TimeOnly))
	for id, sl := range want2 {
		want[id] = sl
	}

	awaitDeliveries(t, s, want, end2.Add(90*time.Second))
	// A worker whose settle write failed mid-failover may fire a retry's
	// attempt again under a new fence; the slot's execution is one, so
	// only fence uniqueness is checked, not slot order.
	dups := checkDeliveries(t, s, want, true, false)
	got, _ := s.snapshot()
	t.Logf("%d raw duplicate deliveries (deduplicated by the execution id); lateness of all slots: %s", dups, lateness(got, nil))
	around := func(d delivery) bool {
		return !d.scheduled.Before(killed.Add(-time.Second)) && d.scheduled.Before(promoted.Add(10*time.Second))
	}
	t.Logf("lateness of the slots due from a second before the kill to 10 s after the promotion: %s", lateness(got, around))
}
