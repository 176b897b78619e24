package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/testkit/harness"
)

// perSecond is n firings due every second from t0 for secs seconds, each
// late by late(second index).
func perSecond(t0 time.Time, secs, n int, late func(i int) time.Duration) []harness.Late {
	var out []harness.Late
	for i := range secs {
		for k := range n {
			out = append(out, harness.Late{FireAt: t0.Add(time.Duration(i)*time.Second + time.Duration(k)*time.Millisecond), Lateness: late(i)})
		}
	}
	return out
}

func TestBackToNormal(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	onTime := func(int) time.Duration { return 100 * time.Millisecond }
	cases := []struct {
		name     string
		timeline []harness.Late
		to       time.Time
		want     time.Duration
		ok       bool
	}{
		{"never late", perSecond(t0, 30, 10, onTime), t0.Add(30 * time.Second), 0, true},
		// Firings due in the first 10 s are 3 s late. The last late window
		// starts at 9 s (it holds second 9's firings); the first window
		// after it, [10 s, 15 s), ends at 15 s.
		{"late for 10 s", perSecond(t0, 30, 10, func(i int) time.Duration {
			if i < 10 {
				return 3 * time.Second
			}
			return onTime(i)
		}), t0.Add(30 * time.Second), 15 * time.Second, true},
		{"still late at the end", perSecond(t0, 30, 10, func(i int) time.Duration {
			if i >= 20 {
				return 3 * time.Second
			}
			return onTime(i)
		}), t0.Add(30 * time.Second), 0, false},
		// One firing in a hundred late is within p99; more is not.
		{"p99 tolerates one in a hundred", append(perSecond(t0, 30, 100, onTime), harness.Late{FireAt: t0.Add(2 * time.Second), Lateness: 10 * time.Second}), t0.Add(30 * time.Second), 0, true},
		// A lost firing is not normal whatever the others: the windows
		// holding it (starting at 0–4 s) are late, the first after them
		// ends at 10 s.
		{"lost firings are late", append(perSecond(t0, 30, 1, onTime), harness.Late{FireAt: t0.Add(4 * time.Second), Lateness: Never}), t0.Add(30 * time.Second), 10 * time.Second, true},
		{"too short to judge", perSecond(t0, 3, 10, onTime), t0.Add(3 * time.Second), 0, false},
	}
	// The disturbance ended 63 ms past a whole second and firings due
	// before 2 s were 3 s late; the run ends at 7 s, when the five seconds
	// [2 s, 7 s) are on time. The last window judged is that one, ending
	// at the run's end — not [1.063 s, 6.063 s), which would reach back
	// among the late ones and call a recovered run not back. The last late
	// window is [1 s, 6 s); the one after it ends 7 s, 6.937 s after from.
	t.Run("windows end at the run's end", func(t *testing.T) {
		var tl []harness.Late // a firing every 100 ms
		for i := range 70 {
			at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			l := onTime(i)
			if at.Before(t0.Add(2 * time.Second)) {
				l = 3 * time.Second
			}
			tl = append(tl, harness.Late{FireAt: at, Lateness: l})
		}
		from := t0.Add(63 * time.Millisecond)
		got, ok := BackToNormal(tl, from, t0.Add(7*time.Second), NormalWindow, time.Second, NormalP99)
		if want := 6937 * time.Millisecond; got != want || !ok {
			t.Fatalf("BackToNormal = %s, %v; want %s, true", got, ok, want)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := BackToNormal(c.timeline, t0, c.to, NormalWindow, time.Second, NormalP99)
			if got != c.want || ok != c.ok {
				t.Fatalf("BackToNormal = %s, %v; want %s, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestBacklogRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 100 firings due every second for 20 s; those due in seconds 5–9 wait
	// until 15 s and arrive then; the rest on time (50 ms).
	var tl []harness.Late
	for i := range 20 {
		for k := range 100 {
			due := t0.Add(time.Duration(i) * time.Second)
			late := 50 * time.Millisecond
			if i >= 5 && i < 10 {
				// the delayed ones arrive spread over [10 s, 15 s)
				late = t0.Add(10*time.Second + time.Duration((i-5)*100+k)*10*time.Millisecond).Sub(due)
			}
			tl = append(tl, harness.Late{FireAt: due, Lateness: late})
		}
	}
	b := BacklogOf(tl, time.Second)
	// The first delivery later than 1 s: the one due at 5 s arriving at
	// 10 s (the ones due at 9 s arriving after 10 s are later still).
	if want := t0.Add(10 * time.Second); !b.From.Equal(want) {
		t.Fatalf("From = %s, want %s", b.From, want)
	}
	if want := t0.Add(14*time.Second + 990*time.Millisecond); !b.To.Equal(want) {
		t.Fatalf("To = %s, want %s", b.To, want)
	}
	// In [10 s, 14.99 s]: the 500 delayed ones and the on-time ones due
	// at 10–14 s (arriving 50 ms after), 500 more.
	if b.Delivered != 1000 {
		t.Fatalf("Delivered = %d, want 1000", b.Delivered)
	}
	if got, want := b.Rate(), 1000/4.99; got < want-0.01 || got > want+0.01 {
		t.Fatalf("Rate = %.2f, want %.2f", got, want)
	}
	if none := BacklogOf(perSecond(t0, 10, 10, func(int) time.Duration { return 0 }), time.Second); !none.From.IsZero() || none.Rate() != 0 {
		t.Fatalf("on-time timeline has a backlog: %+v", none)
	}
}

func TestSnapsAround(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var snaps []UsageSnap
	for i := range 10 {
		snaps = append(snaps, snap(t0.Add(time.Duration(i)*time.Second), map[string]time.Duration{machineKey: time.Duration(i) * time.Second}))
	}
	a, b, ok := snapsAround(snaps, t0.Add(2500*time.Millisecond), t0.Add(6500*time.Millisecond))
	if !ok || !a[machineKey].At.Equal(t0.Add(2*time.Second)) || !b[machineKey].At.Equal(t0.Add(7*time.Second)) {
		t.Fatalf("snapsAround = %v, %v, %v; want the samples at 2 s and 7 s", a, b, ok)
	}
	if _, _, ok := snapsAround(snaps, t0.Add(-time.Second), t0.Add(5*time.Second)); ok {
		t.Fatal("snapsAround covered a span starting before the first sample")
	}
	if _, _, ok := snapsAround(snaps, t0.Add(5*time.Second), t0.Add(20*time.Second)); ok {
		t.Fatal("snapsAround covered a span ending after the last sample")
	}
}

func TestFlagValue(t *testing.T) {
	args := []string{"--worker-id", "w1", "--cluster-limits=false", "-breaker-failures", "0", "--pprof", "--executors", "64", "--executors=32"}
	for name, want := range map[string]string{
		"worker-id":        "w1",
		"cluster-limits":   "false",
		"breaker-failures": "0",
		"pprof":            "true",
		"executors":        "32", // the last one wins, as with the flag package
		"ranges":           "",
	} {
		if got := flagValue(args, name); got != want {
			t.Errorf("flagValue(%q) = %q, want %q", name, got, want)
		}
	}
}

// latest names the latest firings of a timeline, latest first, with their
// jobs, and no more than asked.
func TestLatest(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	want := harness.Expected{}
	var tl []harness.Late
	for i, late := range []time.Duration{10 * time.Millisecond, 3 * time.Second, time.Second, 2 * time.Second} {
		id, job := uuid.New(), uuid.New()
		want[id] = harness.Slot{JobID: job, FireAt: t0.Add(time.Duration(i) * time.Second)}
		tl = append(tl, harness.Late{ExecutionID: id, FireAt: t0.Add(time.Duration(i) * time.Second), Lateness: late})
	}
	got := latest(tl, want, 2)
	if len(got) != 2 {
		t.Fatalf("latest named %d firings, want 2: %v", len(got), got)
	}
	for k, i := range []int{1, 3} {
		l := tl[i]
		if w := fmt.Sprintf("%s (job %s, due %s, %s late)", l.ExecutionID, want[l.ExecutionID].JobID, l.FireAt.Format("15:04:05.000"), FormatLatency(l.Lateness)); got[k] != w {
			t.Fatalf("latest[%d] = %q, want %q", k, got[k], w)
		}
	}
	if tl[0].Lateness != 10*time.Millisecond {
		t.Fatal("latest reordered the timeline it was given")
	}
}

// The on-time CPU window opens 2 s after the first slot, or once the
// disturbance's firings are staged if that is later; with a staging probe
// that never said yes, there is no on-time window.
func TestOnTimeWindow(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	o := recoveryOutcome{start: t0, disturbed: t0.Add(20 * time.Second)}
	for _, c := range []struct {
		name   string
		staged time.Time
		probed bool
		from   time.Time
		ok     bool
	}{
		{"no probe", time.Time{}, false, t0.Add(2 * time.Second), true},
		{"staged before the first slot", t0.Add(-time.Minute), true, t0.Add(2 * time.Second), true},
		{"staged during the baseline", t0.Add(9 * time.Second), true, t0.Add(9 * time.Second), true},
		{"never staged", time.Time{}, true, t0.Add(2 * time.Second), false},
	} {
		o.staged = c.staged
		from, to, ok := onTimeWindow(o, c.probed)
		if ok != c.ok || (ok && (!from.Equal(c.from) || !to.Equal(o.disturbed))) {
			t.Errorf("%s: window %s–%s ok %v, want from %s ok %v", c.name, from.Format(time.TimeOnly), to.Format(time.TimeOnly), ok,
				c.from.Format(time.TimeOnly), c.ok)
		}
	}
}
