package clock

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC)

func fired(tm Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

func TestFakeTimerFiresWhenAdvancedPastDeadline(t *testing.T) {
	c := NewFake(t0)
	tm := c.NewTimer(time.Second)
	c.Advance(999 * time.Millisecond)
	if fired(tm) {
		t.Fatal("fired early")
	}
	c.Advance(time.Millisecond)
	if !fired(tm) {
		t.Fatal("did not fire at its deadline")
	}
	if !c.Now().Equal(t0.Add(time.Second)) {
		t.Fatalf("now = %s", c.Now())
	}
}

func TestFakeTimerStopAndReset(t *testing.T) {
	c := NewFake(t0)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an active timer returned false")
	}
	c.Advance(time.Hour)
	if fired(tm) {
		t.Fatal("stopped timer fired")
	}
	tm.Reset(time.Minute)
	c.Advance(time.Minute)
	if !fired(tm) {
		t.Fatal("reset timer did not fire")
	}
	if zero := c.NewTimer(0); !fired(zero) {
		t.Fatal("zero-duration timer did not fire at once")
	}
}

func TestOffset(t *testing.T) {
	c := NewFake(t0)
	o := Offset{Base: c, Offset: func() time.Duration { return -200 * time.Millisecond }}
	if got := o.Now(); !got.Equal(t0.Add(-200 * time.Millisecond)) {
		t.Fatalf("offset now = %s", got)
	}
}

// A Steady clock follows the monotonic time elapsed since its anchor, so a
// wall clock stepped meanwhile (which the elapsed time does not see) does
// not move it.
func TestSteadyFollowsElapsedTimeNotTheWallClock(t *testing.T) {
	anchor := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	var elapsed time.Duration
	s := Steady{anchor: anchor, elapsed: func() time.Duration { return elapsed }}
	elapsed = 1500 * time.Millisecond
	if got, want := s.Now(), anchor.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now %s, want anchor + elapsed %s", got, want)
	}
	// The real one reads what the wall clock reads, give or take the
	// moment between the two calls.
	real := NewSteady()
	time.Sleep(20 * time.Millisecond)
	if d := time.Since(real.Now()); d < -5*time.Millisecond || d > 5*time.Millisecond {
		t.Fatalf("NewSteady().Now() is %s away from time.Now()", d)
	}
	if real.Now().Sub(real.anchor) < 20*time.Millisecond {
		t.Fatalf("NewSteady did not advance with elapsed time")
	}
}
