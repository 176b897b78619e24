// Package clock is the time source injected into every component, so logic
// never calls time.Now directly and tests can move time by hand.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires after d on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that components use.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Steady is the wall clock as read when it was made plus the monotonic time
// elapsed since. A step of the host's wall clock afterwards — an NTP step,
// an operator's `date -s`, a VM resumed with a corrected clock — does not
// move it, while the slewing NTP does all the time reaches it as it reaches
// the monotonic clock. The worker fires by it, corrected by the offset it
// measures against the database: between two measurements a step of the
// host's clock can then make no firing early or late, and the next
// measurement takes in whatever the step corrected.
type Steady struct {
	anchor  time.Time
	elapsed func() time.Duration
}

// NewSteady anchors a Steady clock at the wall clock's reading now.
func NewSteady() Steady {
	anchor := time.Now()
	return Steady{anchor: anchor, elapsed: func() time.Duration { return time.Since(anchor) }}
}

func (s Steady) Now() time.Time { return s.anchor.Add(s.elapsed()) }

func (Steady) NewTimer(d time.Duration) Timer { return Real{}.NewTimer(d) }

// Offset is a clock shifted from another by a fixed amount; a worker uses it
// to fire by the database clock rather than its own.
type Offset struct {
	Base   Clock
	Offset func() time.Duration
}

func (o Offset) Now() time.Time { return o.Base.Now().Add(o.Offset()) }

func (o Offset) NewTimer(d time.Duration) Timer { return o.Base.NewTimer(d) }

// Fake is a clock that moves only when told to. Timers fire when Advance or
// Set passes their deadline.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t and fires due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	var keep []*fakeTimer
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			select {
			case tm.c <- t:
			default:
			}
			tm.active = false
			continue
		}
		keep = append(keep, tm)
	}
	f.timers = keep
	f.mu.Unlock()
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), at: f.now.Add(d), active: true}
	if d <= 0 {
		t.c <- f.now
		t.active = false
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	was := t.Stop()
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.at = t.f.now.Add(d)
	if d <= 0 {
		select {
		case t.c <- t.f.now:
		default:
		}
		return was
	}
	t.active = true
	t.f.timers = append(t.f.timers, t)
	return was
}
