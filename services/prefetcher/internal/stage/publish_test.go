package stage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/firing"
)

// A row beyond the window is published at half past the second at or
// before a window ahead of its slot: never later than a window before the
// slot (the worker's timer has the whole window), less than a second
// earlier, and — for the whole-second slots every cron schedule has — half
// a second away from the instants herds fire at.
func TestPublishAtIsHalfPastTheSecondBeforeTheWindow(t *testing.T) {
	window := 2 * time.Minute
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		slot time.Duration // after base
		want time.Duration // after base - window
	}{
		{0, -500 * time.Millisecond},                      // a whole second: half past the one before
		{250 * time.Millisecond, -500 * time.Millisecond}, // jittered into the first half
		{500 * time.Millisecond, 500 * time.Millisecond},  // exactly half past: itself
		{999 * time.Millisecond, 500 * time.Millisecond},  // late in the second
		{7*time.Second + time.Microsecond, 6500 * time.Millisecond},
	}
	for _, c := range cases {
		slot := base.Add(c.slot)
		got := publishAt(slot, window, time.Second)
		if want := base.Add(-window).Add(c.want); !got.Equal(want) {
			t.Errorf("slot %s: publish_at %s, want %s", slot.Format(time.StampMilli), got.Format(time.StampMilli), want.Format(time.StampMilli))
		}
	}
	for ms := 0; ms < 3000; ms += 7 {
		slot := base.Add(time.Duration(ms) * time.Millisecond)
		got := publishAt(slot, window, time.Second)
		lead := slot.Sub(got)
		if lead < window || lead >= window+time.Second {
			t.Fatalf("slot %s: published %s ahead, want [window, window+1s)", slot.Format(time.StampMilli), lead)
		}
		if got.Nanosecond() != int(500*time.Millisecond) {
			t.Fatalf("slot %s: publish_at %s is not half past a second", slot.Format(time.StampMilli), got.Format(time.StampMilli))
		}
	}
	if got := publishAt(base.Add(300*time.Millisecond), window, 0); !got.Equal(base.Add(300 * time.Millisecond).Add(-window)) {
		t.Errorf("no grain: publish_at %s, want exactly a window before", got)
	}
}

// Each range's chunks end at its first partition's share of the chunk:
// the 16 ranges of the default deployment about 1.9 s apart over 30 s;
// one prefetcher for every partition (no range), or no chunk, at 0.
func TestEachRangeHasItsOwnPhaseOfTheChunk(t *testing.T) {
	const chunk = 30 * time.Second
	seen := map[time.Duration]bool{}
	for lo := 0; lo < firing.Partitions; lo += 16 {
		ph := (&Partitions{Lo: lo, Hi: lo + 15}).phase(chunk)
		require.GreaterOrEqual(t, ph, time.Duration(0))
		require.Less(t, ph, chunk)
		require.False(t, seen[ph], "range from %d shares a phase", lo)
		seen[ph] = true
	}
	require.Equal(t, 1875*time.Millisecond, (&Partitions{Lo: 16, Hi: 31}).phase(chunk))
	require.Zero(t, (*Partitions)(nil).phase(chunk))
	require.Zero(t, (&Partitions{Lo: 240, Hi: 255}).phase(0))
}
