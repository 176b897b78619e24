package ledger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// testThrottle's waits advance fc by what they wait (autoAdvance).
func testThrottle(t *testing.T, fc *clock.Fake) *Throttle {
	t.Helper()
	th, err := NewThrottle(ThrottleConfig{
		Initial: 1000, Min: 100, Max: 2000, Burst: 100,
		Slow: 500 * time.Millisecond, Increase: 250, Decrease: 0.5, Interval: time.Second, Clock: autoAdvance{fc},
	})
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// Slow writes and errors halve the rate, once per Interval however many
// report it, down to Min and no further.
func TestThrottleCutsOnSlownessAndErrorsDownToMin(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	th := testThrottle(t, fc)
	ctx := context.Background()
	take := func() {
		if _, err := th.Take(ctx, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	take()
	take()
	th.Done(1, 2*time.Second, nil) // slow
	th.Done(1, 2*time.Second, nil) // slow, same interval: sent before the cut
	if got := th.Rate(); got != 500 {
		t.Fatalf("after two slow writes in one interval: rate %v, want 500", got)
	}
	for range 10 {
		fc.Advance(time.Second)
		take()
		th.Done(1, time.Millisecond, errors.New("write timeout"))
	}
	if got := th.Rate(); got != 100 {
		t.Fatalf("after ten failing intervals: rate %v, want the floor 100", got)
	}
	if got := th.InFlight(); got != 0 {
		t.Fatalf("in flight %d after every write is done", got)
	}
}

// The rate climbs back by Increase per healthy Interval, but only while it
// is what holds writes back, and never above Max.
func TestThrottleRaisesOnlyWhileLimiting(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	th := testThrottle(t, fc)
	ctx := context.Background()
	// Healthy writes well under the rate: nothing learned, no raise.
	for range 5 {
		fc.Advance(time.Second)
		if _, err := th.Take(ctx, 10, time.Second); err != nil {
			t.Fatal(err)
		}
		th.Done(10, time.Millisecond, nil)
	}
	if got := th.Rate(); got != 1000 {
		t.Fatalf("rate %v after writes below the limit, want 1000 unchanged", got)
	}
	// Writes that drain the bucket and then wait: each healthy interval
	// adds 250, up to Max.
	var rates []float64
	for range 8 {
		fc.Advance(time.Second)
		for range 2 { // the bucket holds 100: the second of two full writes waits
			if n, err := th.Take(ctx, 100, 10*time.Second); err != nil || n != 100 {
				t.Fatal(n, err)
			}
			th.Done(100, time.Millisecond, nil)
		}
		rates = append(rates, th.Rate())
	}
	if rates[0] != 1250 || rates[len(rates)-1] != 2000 {
		t.Fatalf("rates %v: want a climb from 1250 by 250 per interval to the cap 2000", rates)
	}
}

// With a bound on the wait, a write is granted what the bucket holds
// within it and no more (the caller puts the rest elsewhere); when not one
// record's turn comes within it, nothing is taken and the error says the
// ledger is behind.
func TestThrottleGrantsWhatFitsInMaxWait(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	th := testThrottle(t, fc)
	ctx := context.Background()
	for range 10 { // cut to the floor of 100/s
		fc.Advance(time.Second)
		if _, err := th.Take(ctx, 1, 0); err != nil {
			t.Fatal(err)
		}
		th.Done(1, 0, errors.New("overloaded"))
	}
	fc.Advance(time.Second)
	if n, err := th.Take(ctx, 100, time.Second); err != nil || n != 100 { // the full bucket
		t.Fatal(n, err)
	}
	th.Done(100, 0, nil)
	// Empty bucket at 100/s: half a second's wait holds 50 records.
	if n, err := th.Take(ctx, 100, 500*time.Millisecond); err != nil || n != 50 {
		t.Fatalf("Take(100, 500ms) at 100/s on an empty bucket: %d, %v; want 50", n, err)
	}
	_, err := th.Take(ctx, 100, 5*time.Millisecond)
	if !errors.Is(err, ErrThrottled) || !strings.Contains(err.Error(), "100 records/s") {
		t.Fatalf("Take with no turn within maxWait: %v, want ErrThrottled naming the rate", err)
	}
	if th.InFlight() != 50 {
		t.Fatalf("in flight %d, want the 50 granted (a refused turn is not in flight)", th.InFlight())
	}
	th.Done(50, 0, nil)
	// Without a bound the whole write waits its turn.
	if n, err := th.Take(ctx, 100, 0); err != nil || n != 100 {
		t.Fatal(n, err)
	}
	if th.InFlight() != 100 {
		t.Fatalf("in flight %d, want the 100 granted", th.InFlight())
	}
	th.Done(100, 0, nil)
	// A cancelled wait returns the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := th.Take(cctx, 50, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func TestThrottleConfigNamesTheField(t *testing.T) {
	err := ThrottleConfig{Initial: 5, Min: 10, Max: 1, Burst: 0, Decrease: 1}.Validate()
	for _, field := range []string{"Max", "Initial", "Burst", "Slow", "Increase", "Decrease", "Interval"} {
		if err == nil || !strings.Contains(err.Error(), "throttle "+field+":") {
			t.Errorf("Validate: %v, want it to name %s", err, field)
		}
	}
	if err := DefaultThrottleConfig.Validate(); err != nil {
		t.Fatal(err)
	}
}
