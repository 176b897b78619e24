package holder

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

type rig struct {
	h     *Holder
	clk   *clock.Fake
	out   chan *work.Item
	waits chan struct{}
}

func newRig(t *testing.T, clk clock.Clock, fake *clock.Fake) *rig {
	t.Helper()
	r := &rig{clk: fake, out: make(chan *work.Item, 20000), waits: make(chan struct{}, 1000)}
	r.h = New(clk, func(it *work.Item) { r.out <- it }, WithWaitHook(func() { r.waits <- struct{}{} }))
	if err := r.h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.h.Stop)
	<-r.waits // armed
	return r
}

// settle waits until the loop has processed every wake-up so far and is
// waiting again.
func (r *rig) settle() {
	<-r.waits
	for {
		select {
		case <-r.waits:
		default:
			return
		}
	}
}

func at(d time.Duration, name string) *work.Item {
	return &work.Item{Facts: work.Facts{FireAt: t0.Add(d).UnixNano(), Tenant: name}, Hold: work.Hold{HeapIndex: -1}}
}

// take blocks for the next n fired items (the test's timeout guards it).
func (r *rig) take(n int) []string {
	var s []string
	for range n {
		s = append(s, (<-r.out).Tenant)
	}
	return s
}

// none checks nothing was fired.
func (r *rig) none(t *testing.T, when string) {
	t.Helper()
	select {
	case it := <-r.out:
		t.Fatalf("%s: fired %s", when, it.Tenant)
	default:
	}
}

func equal(a []string, b ...string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFiresInOrderAtDeadline(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	r.h.Add(at(3*time.Second, "c"))
	r.settle() // armed for 3s
	r.h.Add(at(1*time.Second, "a"))
	r.settle() // re-armed for 1s
	r.h.Add(at(2*time.Second, "b1"))
	r.h.Add(at(2*time.Second, "b2")) // same instant: FIFO
	r.h.Add(at(10*time.Second, "z"))
	if r.h.Len() != 5 {
		t.Fatalf("Len %d", r.h.Len())
	}
	r.none(t, "before any deadline")

	// The timer is armed for 1s: moving to 0.999s wakes nothing.
	fake.Set(t0.Add(999 * time.Millisecond))
	r.none(t, "a millisecond early")
	fake.Set(t0.Add(time.Second))
	if got := r.take(1); !equal(got, "a") {
		t.Fatalf("at 1s fired %v, want [a]", got)
	}
	r.settle() // re-armed for 2s
	fake.Set(t0.Add(3 * time.Second))
	if got := r.take(3); !equal(got, "b1", "b2", "c") {
		t.Fatalf("at 3s fired %v, want [b1 b2 c]", got)
	}
	r.settle()
	r.none(t, "after 3s")
	if r.h.Len() != 1 {
		t.Fatalf("Len %d, want 1", r.h.Len())
	}
}

// A firing sent back to wait (AddAfter) is not released before the instant
// it names, though its own instant is past; its FireAt stays.
func TestAddAfterHoldsUntilNotBefore(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	back := at(-time.Second, "back")
	r.h.AddAfter(back, t0.Add(2*time.Second).UnixNano())
	r.settle() // armed for 2s
	r.h.Add(at(time.Second, "next"))
	r.settle()
	fake.Set(t0.Add(time.Second))
	if got := r.take(1); !equal(got, "next") {
		t.Fatalf("at 1s fired %v, want [next]", got)
	}
	r.settle()
	fake.Set(t0.Add(2*time.Second - time.Millisecond))
	r.none(t, "a millisecond before its NotBefore")
	fake.Set(t0.Add(2 * time.Second))
	if got := r.take(1); !equal(got, "back") {
		t.Fatalf("at 2s fired %v, want [back]", got)
	}
	if back.NotBefore != t0.Add(2*time.Second).UnixNano() || back.FireAt != t0.Add(-time.Second).UnixNano() {
		t.Fatalf("NotBefore %d FireAt %d", back.NotBefore, back.FireAt)
	}
}

func TestPastDueFiresAtOnce(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	r.h.Add(at(-time.Minute, "late"))
	it := <-r.out
	if it.Ready != t0.UnixNano() {
		t.Fatalf("past-due item ready at %d, want now", it.Ready)
	}
}

func TestRemove(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	a, b, c := at(time.Second, "a"), at(2*time.Second, "b"), at(3*time.Second, "c")
	for _, it := range []*work.Item{a, b, c} {
		r.h.Add(it)
	}
	r.settle()
	if !r.h.Remove(a) || r.h.Remove(a) {
		t.Fatal("Remove must succeed once")
	}
	fake.Set(t0.Add(5 * time.Second))
	if got := r.take(2); !equal(got, "b", "c") {
		t.Fatalf("fired %v, want [b c]", got)
	}
	if r.h.Remove(b) {
		t.Fatal("Remove of a fired item reported true")
	}
}

// The holder fires by the corrected clock: with an offset of +200ms (the
// database clock runs ahead of this host), an item due at T fires when the
// local clock reads T-200ms.
func TestFiresByCorrectedClock(t *testing.T) {
	fake := clock.NewFake(t0)
	offset := 200 * time.Millisecond
	corrected := clock.Offset{Base: fake, Offset: func() time.Duration { return offset }}
	r := newRig(t, corrected, fake)
	r.h.Add(at(time.Second, "x"))
	r.settle()
	fake.Set(t0.Add(799 * time.Millisecond))
	r.none(t, "at local 0.799s")
	fake.Set(t0.Add(800 * time.Millisecond))
	if got := r.take(1); !equal(got, "x") {
		t.Fatalf("at local 0.8s (database 1.0s) fired %v", got)
	}
}

func TestHeapShrinksAfterBurst(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	r.h.Add(at(time.Hour, "first")) // the head, so the adds below do not wake
	r.settle()
	for i := range 10000 {
		r.h.Add(at(time.Hour+time.Duration(i+1)*time.Millisecond, "x"))
	}
	fake.Set(t0.Add(2 * time.Hour))
	if n := len(r.take(10001)); n != 10001 {
		t.Fatalf("fired %d of 10001", n)
	}
	r.h.mu.Lock()
	c := cap(r.h.h)
	r.h.mu.Unlock()
	if c > 2048 {
		t.Fatalf("heap capacity %d after draining", c)
	}
}

// A herd due at one instant leaves the heap in chunks, the most urgent
// priority first, whatever order it arrived in.
func TestSameInstantMostUrgentFirst(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	const herd = 3*ReleaseChunk + 7
	for i := range herd {
		it := at(time.Second, fmt.Sprintf("m%d", i))
		if i%100 == 99 {
			it.Priority = sundialv1.Priority_PRIORITY_LOW
		}
		r.h.Add(it)
	}
	crit := at(time.Second, "critical")
	crit.Priority = sundialv1.Priority_PRIORITY_CRITICAL
	r.h.Add(crit)
	high := at(time.Second, "high")
	high.Priority = sundialv1.Priority_PRIORITY_HIGH
	r.h.Add(high)
	fake.Set(t0.Add(time.Second))
	got := r.take(herd + 2)
	if got[0] != "critical" || got[1] != "high" {
		t.Fatalf("first released %v, want [critical high ...]", got[:2])
	}
	for i, name := range got[2 : herd+2-herd/100] {
		if want := fmt.Sprintf("m%d", i+i/99); name != want {
			t.Fatalf("release %d: %s, want %s (MEDIUM in arrival order)", i+2, name, want)
		}
	}
	for _, name := range got[herd+2-herd/100:] {
		var n int
		if _, err := fmt.Sscanf(name, "m%d", &n); err != nil || n%100 != 99 {
			t.Fatalf("last releases are %s, want the LOW ones", name)
		}
	}
	r.settle()
	r.none(t, "after the herd")
}

func TestReleasedReportsEachChunkBeforeItsItems(t *testing.T) {
	fake := clock.NewFake(t0)
	out := make(chan *work.Item, 1000)
	waits := make(chan struct{}, 1000)
	var chunks []int
	var seenBefore []int // items the sink had taken when each chunk was reported
	sunk := 0            // both written by the holder's goroutine only
	h := New(fake, func(it *work.Item) { sunk++; out <- it }, WithWaitHook(func() { waits <- struct{}{} }),
		WithReleased(func(n int) { chunks = append(chunks, n); seenBefore = append(seenBefore, sunk) }))
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	<-waits
	for i := range 300 {
		h.Add(at(time.Second, fmt.Sprint(i)))
	}
	h.Add(at(2*time.Second, "later"))
	<-waits
	fake.Advance(time.Second)
	for range 300 {
		<-out
	}
	<-waits
	h.Stop()
	if fmt.Sprint(chunks) != "[256 44]" {
		t.Fatalf("released chunks %v, want [256 44] (a 300-firing herd in chunks of 256)", chunks)
	}
	if fmt.Sprint(seenBefore) != "[0 256]" {
		t.Fatalf("items at the sink when each chunk was reported: %v, want [0 256]", seenBefore)
	}
}

func TestTenantTurnsAtTheSameInstant(t *testing.T) {
	fake := clock.NewFake(t0)
	out := make(chan *work.Item, 1000)
	waits := make(chan struct{}, 1000)
	h := New(fake, func(it *work.Item) { out <- it }, WithWaitHook(func() { waits <- struct{}{} }), WithTenantTurns())
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	<-waits
	add := func(tenant string, d time.Duration, p sundialv1.Priority) {
		it := at(d, tenant)
		it.Priority = p
		h.Add(it)
	}
	for range 600 {
		add("big", time.Second, sundialv1.Priority_PRIORITY_MEDIUM)
	}
	add("mid", time.Second, sundialv1.Priority_PRIORITY_MEDIUM)
	add("mid", time.Second, sundialv1.Priority_PRIORITY_MEDIUM)
	add("small", time.Second, sundialv1.Priority_PRIORITY_MEDIUM)
	add("late", time.Second, sundialv1.Priority_PRIORITY_CRITICAL) // priority still comes first
	// Removing held items gives their turns back without disturbing the rest.
	gone := at(time.Second, "big")
	gone.Priority = sundialv1.Priority_PRIORITY_MEDIUM
	h.Add(gone)
	if !h.Remove(gone) {
		t.Fatal("Remove: not held")
	}
	<-waits
	fake.Advance(time.Second)
	var order []string
	for range 604 {
		order = append(order, (<-out).Tenant)
	}
	if got := fmt.Sprint(order[:6]); got != "[late big mid small big mid]" {
		t.Fatalf("first six released: %s, want [late big mid small big mid] (CRITICAL, then turns between tenants)", got)
	}
	for i, tn := range order[6:] {
		if tn != "big" {
			t.Fatalf("release %d: tenant %s, want big's remaining turns", i+6, tn)
		}
	}
	h.mu.Lock()
	left := len(h.turns)
	h.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d turn counters left after every item was released, want 0", left)
	}
}

// RemoveIf takes out every matching item in one pass and leaves the rest
// in order.
func TestRemoveIfDropsMatchingItemsInOnePass(t *testing.T) {
	fake := clock.NewFake(t0)
	r := newRig(t, fake, fake)
	var gone []*work.Item
	for i := range 3000 {
		it := at(time.Duration(i%7+1)*time.Second, fmt.Sprintf("t%d", i%7))
		it.JobID = fmt.Sprintf("job-%d", i%30)
		if i%30 < 20 {
			gone = append(gone, it)
		}
		r.h.Add(it)
	}
	keep := at(500*time.Millisecond, "keep") // the earliest stays too
	r.h.Add(keep)
	r.settle()
	calls := 0
	out := r.h.RemoveIf(func(it *work.Item) bool {
		calls++
		var n int
		_, _ = fmt.Sscanf(it.JobID, "job-%d", &n)
		return it.JobID != "" && n < 20
	})
	if calls != 3001 {
		t.Fatalf("the predicate ran %d times, want once per held item (3001)", calls)
	}
	if len(out) != len(gone) || r.h.Len() != 3001-len(gone) {
		t.Fatalf("removed %d, held %d; want %d and %d", len(out), r.h.Len(), len(gone), 3001-len(gone))
	}
	for _, it := range out {
		if it.HeapIndex != -1 || r.h.Remove(it) {
			t.Fatal("a removed item still looks held")
		}
	}
	if r.h.RemoveIf(func(*work.Item) bool { return false }) != nil {
		t.Fatal("nothing matched: nil")
	}
	r.settle()
	fake.Set(t0.Add(10 * time.Second))
	var last int64
	for range 3001 - len(gone) {
		it := <-r.out
		if it.JobID != "" {
			var n int
			_, _ = fmt.Sscanf(it.JobID, "job-%d", &n)
			if n < 20 {
				t.Fatalf("removed item %s fired", it.JobID)
			}
		}
		if it.Due < last {
			t.Fatal("the heap is out of order after RemoveIf")
		}
		last = it.Due
	}
	r.settle()
	r.none(t, "after the kept items")
}

// A large drop gives the heap's memory back.
func TestRemoveIfShrinksTheHeap(t *testing.T) {
	h := New(clock.NewFake(t0), func(*work.Item) {}, WithTenantTurns())
	for i := range 10000 {
		it := at(time.Duration(i)*time.Millisecond, "t")
		it.JobVersion = int64(i % 100)
		h.Add(it)
	}
	h.RemoveIf(func(it *work.Item) bool { return it.JobVersion > 0 })
	h.mu.Lock()
	c, turns := cap(h.h), len(h.turns)
	h.mu.Unlock()
	if h.Len() != 100 || c > 1024 {
		t.Fatalf("held %d with capacity %d; want 100 and the capacity given back", h.Len(), c)
	}
	if turns != 100 {
		t.Fatalf("%d turn keys for 100 held items at distinct instants", turns)
	}
}

// TestHeapReleasesInOrderThroughRandomAddsAndRemoves drives the heap with
// adds, removals from anywhere and releases in random order, checking each
// release against the earliest item still held by (instant, priority,
// arrival), and each removal's answer against whether the item was held.
func TestHeapReleasesInOrderThroughRandomAddsAndRemoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	h := New(clock.NewFake(time.Unix(0, 0)), func(*work.Item) {})
	prios := []sundialv1.Priority{sundialv1.Priority_PRIORITY_CRITICAL, sundialv1.Priority_PRIORITY_HIGH,
		sundialv1.Priority_PRIORITY_MEDIUM, sundialv1.Priority_PRIORITY_LOW}
	held := map[*work.Item]bool{}
	var all []*work.Item
	earliest := func() *work.Item {
		var best *work.Item
		for it := range held {
			if best == nil || it.Due < best.Due ||
				it.Due == best.Due && (readyq.Rank(it.Priority) < readyq.Rank(best.Priority) ||
					readyq.Rank(it.Priority) == readyq.Rank(best.Priority) && it.Seq < best.Seq) {
				best = it
			}
		}
		return best
	}
	for step := range 20_000 {
		switch op := rng.IntN(10); {
		case op < 5:
			it := &work.Item{Facts: work.Facts{FireAt: rng.Int64N(50), Priority: prios[rng.IntN(len(prios))]}}
			h.Add(it)
			held[it] = true
			all = append(all, it)
		case op < 7 && len(all) > 0:
			it := all[rng.IntN(len(all))]
			if got := h.Remove(it); got != held[it] {
				t.Fatalf("step %d: Remove reported %v for an item held=%v", step, got, held[it])
			}
			delete(held, it)
		default:
			want := earliest()
			h.mu.Lock()
			var got *work.Item
			if len(h.h) > 0 {
				got = h.popLocked()
			}
			h.mu.Unlock()
			if got != want {
				t.Fatalf("step %d: released %+v, want %+v", step, got, want)
			}
			delete(held, got)
		}
		if h.Len() != len(held) {
			t.Fatalf("step %d: holder holds %d, want %d", step, h.Len(), len(held))
		}
	}
}
