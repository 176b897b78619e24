package readyq

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	crit = sundialv1.Priority_PRIORITY_CRITICAL
	high = sundialv1.Priority_PRIORITY_HIGH
	med  = sundialv1.Priority_PRIORITY_MEDIUM
	low  = sundialv1.Priority_PRIORITY_LOW
)

func item(p sundialv1.Priority, seq uint64) *work.Item {
	return &work.Item{Facts: work.Facts{Priority: p}, Hold: work.Hold{Seq: seq}}
}

func TestCriticalNeverWaitsBehindLow(t *testing.T) {
	q := New()
	for i := range 1000 {
		q.Push(item(low, uint64(i)))
	}
	q.Push(item(med, 2000))
	q.Push(item(crit, 3000))
	q.Push(item(high, 4000))
	for i, want := range []sundialv1.Priority{crit, high, med, low} {
		it := q.TryPop()
		if it == nil || it.Priority != want {
			t.Fatalf("pop %d: %v, want %v", i, it, want)
		}
	}
	if q.Len() != 999 {
		t.Fatalf("Len %d, want 999", q.Len())
	}
}

func TestFIFOWithinPriority(t *testing.T) {
	q := New()
	// Interleave priorities; each priority's items come out in push order,
	// across ring growth and shrink.
	for i := range 500 {
		q.Push(item([]sundialv1.Priority{low, high, crit, med}[i%4], uint64(i)))
	}
	last := map[sundialv1.Priority]int64{crit: -1, high: -1, med: -1, low: -1}
	order := []sundialv1.Priority{}
	for it := q.TryPop(); it != nil; it = q.TryPop() {
		if int64(it.Seq) <= last[it.Priority] {
			t.Fatalf("priority %v: seq %d after %d", it.Priority, it.Seq, last[it.Priority])
		}
		last[it.Priority] = int64(it.Seq)
		if len(order) == 0 || order[len(order)-1] != it.Priority {
			order = append(order, it.Priority)
		}
	}
	if len(order) != 4 || order[0] != crit || order[1] != high || order[2] != med || order[3] != low {
		t.Fatalf("served priorities in order %v, want each drained before the next", order)
	}
	if unspecified := Rank(sundialv1.Priority_PRIORITY_UNSPECIFIED); unspecified != Rank(med) {
		t.Fatal("unspecified priority must be served as medium")
	}
}

func TestPopBlocksUntilPush(t *testing.T) {
	q := New()
	got := make(chan *work.Item)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got <- q.Pop(context.Background())
	}()
	q.Push(item(high, 7))
	if it := <-got; it.Seq != 7 {
		t.Fatalf("popped %d", it.Seq)
	}
	wg.Wait()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if it := q.Pop(ctx); it != nil {
		t.Fatal("Pop on an empty queue with a cancelled context returned an item")
	}
}

// Many executors waiting, many items pushed at once: every item is popped
// exactly once (the wake token is passed on).
func TestManyPoppers(t *testing.T) {
	q := New()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[uint64]int{}
	)
	const n = 2000
	done := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				it := q.Pop(ctx)
				if it == nil {
					return
				}
				mu.Lock()
				seen[it.Seq]++
				if len(seen) == n {
					close(done)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		q.Push(item([]sundialv1.Priority{low, crit}[i%2], uint64(i)))
	}
	<-done
	cancel()
	wg.Wait()
	for seq, c := range seen {
		if c != 1 {
			t.Fatalf("item %d popped %d times", seq, c)
		}
	}
}

type countingLane struct {
	FIFO
	pushes *int
}

func (c *countingLane) Push(it *work.Item) { *c.pushes++; c.FIFO.Push(it) }

func TestWithLaneAndDepthObserver(t *testing.T) {
	pushes := 0
	depth := map[sundialv1.Priority]int{}
	q := New(
		WithLane(func(sundialv1.Priority) Lane { return &countingLane{pushes: &pushes} }),
		WithDepthObserver(func(p sundialv1.Priority, d int) { depth[p] = d }),
	)
	q.Push(item(low, 1))
	q.Push(item(low, 2))
	q.Push(item(crit, 3))
	if pushes != 3 {
		t.Fatalf("custom lane saw %d pushes", pushes)
	}
	if depth[low] != 2 || depth[crit] != 1 {
		t.Fatalf("depths %v", depth)
	}
	q.TryPop()
	if depth[crit] != 0 {
		t.Fatalf("depth of critical after pop: %d", depth[crit])
	}
}

func titem(tenant string, seq uint64) *work.Item {
	return &work.Item{Facts: work.Facts{Priority: med, Tenant: tenant}, Hold: work.Hold{Seq: seq}}
}

// One tenant's 100,000 firings due at once do not delay another tenant's
// firing due at the same instant by more than one turn: it is served second.
func TestFairLaneServesEachTenantInTurn(t *testing.T) {
	q := New(WithLane(FairLanes))
	for i := range 100_000 {
		q.Push(titem("big", uint64(i)))
	}
	q.Push(titem("small", 1_000_000))
	q.Push(titem("other", 1_000_001))
	q.Push(titem("other", 1_000_002))
	var got []string
	for range 6 {
		got = append(got, q.TryPop().Tenant)
	}
	want := []string{"big", "small", "other", "big", "other", "big"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	// Within a tenant, FIFO; and the lane drains completely.
	last := uint64(2)
	for it := q.TryPop(); it != nil; it = q.TryPop() {
		if it.Tenant != "big" || it.Seq <= last {
			t.Fatalf("after the others: %s/%d after %d", it.Tenant, it.Seq, last)
		}
		last = it.Seq
	}
	if last != 99_999 || q.Len() != 0 {
		t.Fatalf("drained to %d, Len %d", last, q.Len())
	}
}

// Fairness does not cross priorities: a CRITICAL firing of the busy tenant
// still goes before a LOW one of the quiet tenant.
func TestFairLaneKeepsStrictPriority(t *testing.T) {
	q := New(WithLane(FairLanes))
	q.Push(&work.Item{Facts: work.Facts{Priority: low, Tenant: "quiet"}})
	for range 10 {
		q.Push(&work.Item{Facts: work.Facts{Priority: crit, Tenant: "busy"}})
	}
	for i := range 10 {
		if it := q.TryPop(); it.Priority != crit {
			t.Fatalf("pop %d: %v before the critical ones", i, it.Priority)
		}
	}
	if it := q.TryPop(); it.Tenant != "quiet" {
		t.Fatalf("last: %v", it)
	}
}

// A tenant's FIFO is dropped when it empties, and a returning tenant joins
// the back of the ring.
func TestFairLaneForgetsIdleTenants(t *testing.T) {
	f := NewFair()
	f.Push(titem("a", 1))
	f.Push(titem("b", 2))
	if f.Pop().Tenant != "a" || f.Tenants() != 1 {
		t.Fatal("a not served first or not forgotten")
	}
	f.Push(titem("a", 3))
	f.Push(titem("c", 4))
	var got []string
	for it := f.Pop(); it != nil; it = f.Pop() {
		got = append(got, it.Tenant)
	}
	if len(got) != 3 || got[0] != "b" || got[1] != "a" || got[2] != "c" || f.Tenants() != 0 || f.Len() != 0 {
		t.Fatalf("order %v, tenants %d", got, f.Tenants())
	}
}

// PopCritical takes only CRITICAL items, waits for one while others are
// ready, and wakes when one is pushed.
func TestPopCriticalTakesOnlyCritical(t *testing.T) {
	q := New()
	q.Push(item(high, 1))
	q.Push(item(crit, 2))
	if it := q.PopCritical(context.Background()); it == nil || it.Seq != 2 {
		t.Fatalf("PopCritical = %v, want the CRITICAL item", it)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *work.Item)
	go func() { got <- q.PopCritical(ctx) }()
	q.Push(item(low, 3))
	q.Push(item(crit, 4))
	if it := <-got; it == nil || it.Seq != 4 {
		t.Fatalf("PopCritical = %v, want the CRITICAL item pushed while it waited", it)
	}
	go func() { got <- q.PopCritical(ctx) }()
	cancel()
	if it := <-got; it != nil {
		t.Fatalf("PopCritical = seq %d with no CRITICAL item ready, want nil at cancel", it.Seq)
	}
	if q.Len() != 2 {
		t.Fatalf("Len %d, want the HIGH and LOW items left", q.Len())
	}
	if it := q.TryPop(); it == nil || it.Seq != 1 {
		t.Fatalf("TryPop = %v, want HIGH", it)
	}
}

// LimitsOf rounds each share of the pool down, but never to nothing.
func TestLimitsOf(t *testing.T) {
	if got, want := LimitsOf(128, 90, 80, 50), (Limits{High: 115, Medium: 102, Low: 64}); got != want {
		t.Fatalf("LimitsOf(128) = %+v, want %+v", got, want)
	}
	if got, want := LimitsOf(1, 90, 80, 50), (Limits{High: 1, Medium: 1, Low: 1}); got != want {
		t.Fatalf("LimitsOf(1) = %+v, want %+v: every priority keeps an executor", got, want)
	}
	if got := LimitsOf(128, 0, 0, 0); got != (Limits{}) {
		t.Fatalf("LimitsOf(0 %%) = %+v, want no caps", got)
	}
}

// With the caps reached by LOW and MEDIUM attempts in progress, the queue
// holds the LOW and MEDIUM firings back and hands out HIGH and CRITICAL
// ones; the caps count each priority with those below it, and an attempt's
// Done lets the next capped firing start.
func TestLimitsKeepExecutorsForTheUrgent(t *testing.T) {
	q := New(WithLimits(Limits{High: 6, Medium: 4, Low: 2}))
	for i := range 10 {
		q.Push(item(low, uint64(i)))
	}
	for range 2 {
		if it := q.TryPop(); it == nil || it.Priority != low {
			t.Fatalf("TryPop = %v, want LOW under its cap", it)
		}
	}
	if it := q.TryPop(); it != nil {
		t.Fatalf("TryPop = %v with LOW at its cap of 2, want nothing", it)
	}
	// MEDIUM counts LOW's two: two more fit under its cap of 4.
	for i := range 5 {
		q.Push(item(med, uint64(100+i)))
	}
	for range 2 {
		if it := q.TryPop(); it == nil || it.Priority != med {
			t.Fatalf("TryPop = %v, want MEDIUM under its cap", it)
		}
	}
	if it := q.TryPop(); it != nil {
		t.Fatalf("TryPop = %v with MEDIUM and LOW at their cap of 4, want nothing", it)
	}
	// Two executors are HIGH's; then only CRITICAL starts.
	for i := range 3 {
		q.Push(item(high, uint64(200+i)))
	}
	q.Push(item(crit, 300))
	want := []sundialv1.Priority{crit, high, high}
	for i, p := range want {
		if it := q.TryPop(); it == nil || it.Priority != p {
			t.Fatalf("pop %d = %v, want %v", i, it, p)
		}
	}
	if it := q.TryPop(); it != nil {
		t.Fatalf("TryPop = %v with HIGH and below at their cap of 6, want nothing", it)
	}
	if q.Running(low) != 2 || q.Running(med) != 2 || q.Running(high) != 2 || q.Running(crit) != 1 {
		t.Fatalf("running LOW %d MEDIUM %d HIGH %d CRITICAL %d, want 2 2 2 1", q.Running(low), q.Running(med), q.Running(high), q.Running(crit))
	}
	q.Push(item(crit, 301))
	if it := q.TryPop(); it == nil || it.Priority != crit {
		t.Fatalf("TryPop = %v, want CRITICAL: it has no cap", it)
	}
	// A LOW attempt ends: the executor goes to the queued HIGH firing
	// (strict priority), not to LOW.
	q.Done(low)
	if it := q.TryPop(); it == nil || it.Priority != high {
		t.Fatalf("TryPop = %v, want the HIGH firing waiting", it)
	}
	q.Done(high)
	q.Done(high)
	// HIGH's queue is empty; MEDIUM and LOW hold 3 of their 4.
	if it := q.TryPop(); it == nil || it.Priority != med {
		t.Fatalf("TryPop = %v, want MEDIUM with a slot under its cap", it)
	}
	if it := q.TryPop(); it != nil {
		t.Fatalf("TryPop = %v with MEDIUM and LOW at their cap again, want nothing", it)
	}
}

// An executor waiting in Pop while every queued firing is at its cap is
// woken when an attempt is Done.
func TestPopWaitsForTheCapAndWakesOnDone(t *testing.T) {
	q := New(WithLimits(Limits{High: 2, Medium: 2, Low: 1}))
	q.Push(item(low, 1))
	q.Push(item(low, 2))
	if it := q.Pop(context.Background()); it == nil || it.Seq != 1 {
		t.Fatalf("Pop = %v, want the first LOW", it)
	}
	got := make(chan *work.Item)
	go func() { got <- q.Pop(context.Background()) }()
	q.Done(low)
	if it := <-got; it == nil || it.Seq != 2 {
		t.Fatalf("Pop = %v, want the second LOW once the first was done", it)
	}
}

// Emptied is closed at once for an empty queue and, for a queue with items,
// exactly when the last one is taken, by Pop or PopCritical.
func TestEmptiedClosesWhenTheLastItemIsTaken(t *testing.T) {
	q := New()
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !isClosed(q.Emptied()) {
		t.Fatal("an empty queue's Emptied is open")
	}
	q.Push(item(med, 1))
	q.Push(item(crit, 2))
	c := q.Emptied()
	if isClosed(c) {
		t.Fatal("Emptied closed with two items waiting")
	}
	if it := q.PopCritical(context.Background()); it == nil || it.Seq != 2 {
		t.Fatalf("PopCritical = %v, want item 2", it)
	}
	if isClosed(c) || isClosed(q.Emptied()) {
		t.Fatal("Emptied closed with one item waiting")
	}
	if it := q.TryPop(); it == nil || it.Seq != 1 {
		t.Fatalf("TryPop = %v, want item 1", it)
	}
	if !isClosed(c) {
		t.Fatal("Emptied still open after the last item was taken")
	}
	// A queue filled again gives a new, open channel.
	q.Push(item(low, 3))
	if isClosed(q.Emptied()) {
		t.Fatal("Emptied closed after a push")
	}
	q.Pop(context.Background())
	if !isClosed(q.Emptied()) {
		t.Fatal("Emptied open on an empty queue")
	}
}

// stall counts an executor as waiting in Pop (pop) or PopCritical without
// it coming back for an item: an executor woken and not yet scheduled, which
// is the time IdleWhileDue accounts.
func stall(q *Queue, critical bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if critical {
		q.waiting[0]++
	} else {
		q.waiting[1]++
	}
	q.account()
}

func TestIdleWhileDueCountsWaitingExecutorsThatCouldStart(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	q := New(WithClock(clk))
	stall(q, false)
	clk.Advance(time.Second)
	if got := q.IdleWhileDue(); got != 0 {
		t.Fatalf("an executor waiting on an empty queue counted as idle: %v", got)
	}
	q.Push(item(med, 1))
	clk.Advance(3 * time.Second)
	if got := q.IdleWhileDue(); got != 3*time.Second {
		t.Fatalf("one waiting executor, one startable item for 3s: idle %v, want 3s", got)
	}
	// A second item does not make one executor idle twice over.
	q.Push(item(med, 2))
	clk.Advance(time.Second)
	if got := q.IdleWhileDue(); got != 4*time.Second {
		t.Fatalf("one waiting executor, two items for 1s more: idle %v, want 4s", got)
	}
	// A second waiting executor is idle too while two items wait.
	stall(q, false)
	clk.Advance(time.Second)
	if got := q.IdleWhileDue(); got != 6*time.Second {
		t.Fatalf("two waiting executors, two items for 1s more: idle %v, want 6s", got)
	}
	// Both come back and take the items: nothing idles from then on.
	for range 2 {
		if q.tryPop(true, false) == nil {
			t.Fatal("a waiting executor found nothing")
		}
	}
	clk.Advance(5 * time.Second)
	if got := q.IdleWhileDue(); got != 6*time.Second {
		t.Fatalf("idle grew with no executor waiting: %v, want 6s", got)
	}
}

func TestIdleWhileDueLeavesOutWhatACapHoldsBack(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	q := New(WithClock(clk), WithLimits(Limits{Low: 1}))
	q.Push(item(low, 1))
	if q.TryPop() == nil {
		t.Fatal("the first LOW item did not start")
	}
	stall(q, false)
	q.Push(item(low, 2))
	clk.Advance(10 * time.Second)
	if got := q.IdleWhileDue(); got != 0 {
		t.Fatalf("a LOW item held back by LOW's cap counted as startable: idle %v", got)
	}
	// A MEDIUM item may start past LOW's cap.
	q.Push(item(med, 3))
	clk.Advance(2 * time.Second)
	if got := q.IdleWhileDue(); got != 2*time.Second {
		t.Fatalf("a MEDIUM item under no cap waited on an idle executor for 2s: idle %v, want 2s", got)
	}
	// The executor takes the MEDIUM one; LOW's attempt ends, and the LOW
	// item may start: the executor is idle again until it comes back.
	if it := q.tryPop(true, false); it == nil || it.Priority != med {
		t.Fatalf("the waiting executor took %v, want the MEDIUM item", it)
	}
	stall(q, false)
	q.Done(low)
	clk.Advance(time.Second)
	if got := q.IdleWhileDue(); got != 3*time.Second {
		t.Fatalf("after LOW's attempt ended: idle %v, want 3s", got)
	}
}

func TestIdleWhileDueGivesCriticalExecutorsOnlyCriticalItems(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	q := New(WithClock(clk))
	stall(q, true)
	q.Push(item(med, 1))
	clk.Advance(2 * time.Second)
	if got := q.IdleWhileDue(); got != 0 {
		t.Fatalf("an executor reserved for CRITICAL counted idle beside a MEDIUM item: %v", got)
	}
	q.Push(item(crit, 2))
	clk.Advance(time.Second)
	if got := q.IdleWhileDue(); got != time.Second {
		t.Fatalf("a CRITICAL item beside a waiting CRITICAL executor for 1s: idle %v, want 1s", got)
	}
}

func TestExecutorsThatPopAtOnceAccountNoIdleTime(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	q := New(WithClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	got := make(chan *work.Item, 100)
	for range 4 {
		wg.Go(func() {
			for {
				it := q.Pop(ctx)
				if it == nil {
					return
				}
				got <- it
				q.Done(it.Priority)
			}
		})
	}
	for i := range 100 {
		q.Push(item(med, uint64(i)))
	}
	for range 100 {
		<-got
	}
	clk.Advance(time.Minute)
	cancel()
	wg.Wait()
	if idle := q.IdleWhileDue(); idle != 0 {
		t.Fatalf("executors that were woken at once accounted %v idle after the clock moved on", idle)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting != [2]int{} {
		t.Fatalf("executors still counted waiting after they returned: %v", q.waiting)
	}
}
