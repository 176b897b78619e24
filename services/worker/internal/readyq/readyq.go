// Package readyq is the queue between the holder and the executor pool:
// firings that are due, ordered by priority so a CRITICAL firing never waits
// behind LOW ones, first in first out within a priority.
//
// Each priority is a Lane. The default lane is FIFO; per-tenant fairness
// (one tenant's 100,000 firings due at 00:00 must not delay another's by
// more than a fair share) is the Fair lane — round robin over per-tenant
// FIFOs — plugged in with New(WithLane(FairLanes)), which is what the worker
// runs. Priority stays strict across lanes: fairness applies among tenants
// within one priority.
//
// Strict priority decides which firing an idle executor takes; it cannot
// help a HIGH firing that becomes due while slow LOW attempts occupy every
// executor. Limits (WithLimits) are the admission rule for that: the
// executors the less urgent priorities may occupy are capped, nested from
// the bottom — LOW at most Limits.Low, MEDIUM and LOW together at most
// Limits.Medium, HIGH, MEDIUM and LOW together at most Limits.High — so
// the rest of the pool is always left to the more urgent ones. A firing
// whose priority is at its cap waits in the queue; Pop hands out only what
// may start, and the executor reports the end of each attempt with Done.
package readyq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Lane holds the ready items of one priority.
type Lane interface {
	Push(it *work.Item)
	// Pop removes the next item; nil when empty.
	Pop() *work.Item
	Len() int
}

// priorities in the order they are served.
var priorities = firing.Priorities()

// Rank is p's place in the order firings are served, 0 (CRITICAL) first;
// unspecified counts as MEDIUM. The prepare stage leases in the same order.
func Rank(p sundialv1.Priority) int {
	switch p {
	case sundialv1.Priority_PRIORITY_CRITICAL:
		return 0
	case sundialv1.Priority_PRIORITY_HIGH:
		return 1
	case sundialv1.Priority_PRIORITY_LOW:
		return 3
	default:
		return 2
	}
}

// Queue is a strict-priority queue of lanes. Pop blocks until an item is
// ready or the context ends.
type Queue struct {
	mu    sync.Mutex
	lanes [len(priorities)]Lane
	n     int
	// wake has one token per waiting-worthy event; Pop waits on it when the
	// queue is empty. Buffered 1: a Push while nobody waits leaves a token.
	wake chan struct{}
	// urgent is wake for the CRITICAL lane alone (PopCritical).
	urgent chan struct{}
	// OnDepth, when set, is told the depth of a priority after each change
	// (metrics).
	onDepth func(p sundialv1.Priority, depth int)
	// limit[r] caps the items of rank r and less urgent ones popped by Pop
	// and not yet Done (limit[0] is unused: CRITICAL may take every
	// executor); running[r] counts those of rank r.
	limit   [len(priorities)]int
	running [len(priorities)]int
	// popped counts every item taken, for the drain rate the prepare
	// stage admits leases by (Drained).
	popped atomic.Uint64
	// empty is closed when the queue next becomes empty; nil while nobody
	// asked (Emptied).
	empty chan struct{}
	// The idle account (IdleWhileDue): waiting[0] executors wait in
	// PopCritical and waiting[1] in Pop; idle is how many of them could
	// be firing a waiting item now, and idleNs sums idle × time, read
	// from clk only while idle is or becomes non-zero.
	clk     clock.Clock
	waiting [2]int
	idle    int
	since   int64
	idleNs  atomic.Int64
}

// closed is a channel that is always closed: Emptied's answer for a queue
// that is empty already.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Limits caps, out of a pool of executors, how many the less urgent
// priorities may occupy, counting each priority with those below it, so a
// LOW backlog cannot take the executors a HIGH or CRITICAL firing will
// need. Zero is no cap. Limits need not be ordered, but a cap larger than
// the one above it (Low > Medium) is bounded by that one anyway.
type Limits struct {
	// High: HIGH, MEDIUM and LOW attempts together (what is left is
	// CRITICAL's alone).
	High int
	// Medium: MEDIUM and LOW attempts together.
	Medium int
	// Low: LOW attempts.
	Low int
}

// LimitsOf turns percentages of a pool of executors into Limits, each
// rounded down but at least 1, so no priority is ever shut out of a small
// pool; a percentage of 0 is no cap.
func LimitsOf(executors, highPct, mediumPct, lowPct int) Limits {
	of := func(pct int) int {
		if pct <= 0 {
			return 0
		}
		return max(1, executors*pct/100)
	}
	return Limits{High: of(highPct), Medium: of(mediumPct), Low: of(lowPct)}
}

// WithLimits caps the executors the less urgent priorities occupy (see
// Limits); executors popping with Pop must call Done after each item.
func WithLimits(l Limits) Option {
	return func(q *Queue) {
		q.limit[1], q.limit[2], q.limit[3] = l.High, l.Medium, l.Low
	}
}

// Option configures a Queue.
type Option func(*Queue)

// WithLane uses newLane for every priority instead of FIFO (the fairness
// hook).
func WithLane(newLane func(p sundialv1.Priority) Lane) Option {
	return func(q *Queue) {
		for i, p := range priorities {
			q.lanes[i] = newLane(p)
		}
	}
}

// WithDepthObserver reports each priority's depth after every change.
func WithDepthObserver(f func(p sundialv1.Priority, depth int)) Option {
	return func(q *Queue) { q.onDepth = f }
}

// WithClock sets the clock the idle account reads (IdleWhileDue); the real
// clock by default.
func WithClock(c clock.Clock) Option { return func(q *Queue) { q.clk = c } }

// New returns an empty queue.
func New(opts ...Option) *Queue {
	q := &Queue{wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), clk: clock.Real{}}
	for i := range q.lanes {
		q.lanes[i] = &FIFO{}
	}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Push adds a ready item.
func (q *Queue) Push(it *work.Item) {
	i := Rank(it.Priority)
	q.mu.Lock()
	q.lanes[i].Push(it)
	q.n++
	depth := q.lanes[i].Len()
	q.account()
	q.mu.Unlock()
	if q.onDepth != nil {
		q.onDepth(priorities[i], depth)
	}
	if i == 0 {
		notify(q.urgent)
	}
	notify(q.wake)
}

// notify leaves a token in c unless one is there.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// admits reports whether an item of rank i may start now: for i and every
// more urgent rank r but CRITICAL, the attempts of rank r and below stay
// within r's cap. Called with q.mu held.
func (q *Queue) admits(i int) bool {
	below := 0
	for r := len(priorities) - 1; r >= 1; r-- {
		below += q.running[r]
		if r <= i && q.limit[r] > 0 && below >= q.limit[r] {
			return false
		}
	}
	return true
}

// TryPop returns the most urgent ready item that may start (see Limits),
// or nil. The caller must call Done once the item's attempt is over.
//
// When the most urgent lane with items is at its cap, nothing is returned:
// every less urgent lane is under the same cap (caps nest), so strict
// priority is kept.
func (q *Queue) TryPop() *work.Item { return q.tryPop(false, false) }

// tryPop is TryPop for Pop: woke (the caller waited since its last try)
// takes it off the waiting count, and wait (it will wait if it gets
// nothing) puts it on, in the same hold of the lock.
func (q *Queue) tryPop(woke, wait bool) *work.Item {
	q.mu.Lock()
	if woke {
		q.waiting[1]--
	}
	for i, l := range q.lanes {
		if l.Len() == 0 {
			continue
		}
		if !q.admits(i) {
			break
		}
		if it := l.Pop(); it != nil {
			q.running[i]++
			q.n--
			q.popped.Add(1)
			q.signalEmpty()
			q.account()
			depth, more := l.Len(), q.n > 0
			q.mu.Unlock()
			if more {
				// Pass the wake token on, so another idle executor
				// picks up the rest.
				notify(q.wake)
			}
			if i == 0 && depth > 0 {
				notify(q.urgent)
			}
			if q.onDepth != nil {
				q.onDepth(priorities[i], depth)
			}
			return it
		}
	}
	if wait {
		q.waiting[1]++
	}
	if woke || wait {
		q.account()
	}
	q.mu.Unlock()
	return nil
}

// Done reports that the attempt of an item of priority p, taken with Pop or
// TryPop, is over: its executor is free for the priorities capped by
// Limits.
func (q *Queue) Done(p sundialv1.Priority) {
	i := Rank(p)
	q.mu.Lock()
	q.running[i]--
	more := q.n > 0
	if more {
		q.account()
	}
	q.mu.Unlock()
	if more && i > 0 {
		// A firing held back by its cap may start now.
		notify(q.wake)
	}
}

// Drained is the number of items ever taken (Pop, TryPop, PopCritical): its
// rate is how fast the executors drain the queue.
func (q *Queue) Drained() uint64 { return q.popped.Load() }

// Running is the number of items of priority p taken with Pop or TryPop
// and not yet Done.
func (q *Queue) Running(p sundialv1.Priority) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running[Rank(p)]
}

// Pop blocks until an item may start (the most urgent one, see TryPop) or
// ctx ends (nil).
func (q *Queue) Pop(ctx context.Context) *work.Item {
	woke := false
	for {
		if it := q.tryPop(woke, true); it != nil {
			return it
		}
		select {
		case <-q.wake:
			woke = true
		case <-ctx.Done():
			q.mu.Lock()
			q.waiting[1]--
			q.account()
			q.mu.Unlock()
			return nil
		}
	}
}

// PopCritical blocks until a CRITICAL item is ready or ctx ends (nil). It
// is what the executors reserved for CRITICAL firings run: however many
// lower-priority requests occupy the others, a CRITICAL firing finds one of
// them waiting. CRITICAL items count against no cap; Done them like the
// others.
func (q *Queue) PopCritical(ctx context.Context) *work.Item {
	woke := false
	for {
		q.mu.Lock()
		if woke {
			q.waiting[0]--
		}
		l := q.lanes[0]
		it := l.Pop()
		var depth, n int
		if it != nil {
			q.running[0]++
			q.n--
			q.popped.Add(1)
			q.signalEmpty()
			depth, n = l.Len(), q.n
		} else {
			q.waiting[0]++
		}
		q.account()
		q.mu.Unlock()
		if it != nil {
			if depth > 0 {
				notify(q.urgent)
			}
			if n > 0 {
				notify(q.wake)
			}
			if q.onDepth != nil {
				q.onDepth(priorities[0], depth)
			}
			return it
		}
		select {
		case <-q.urgent:
			woke = true
		case <-ctx.Done():
			q.mu.Lock()
			q.waiting[0]--
			q.account()
			q.mu.Unlock()
			return nil
		}
	}
}

// IdleWhileDue is the executor time, summed over executors, spent waiting
// in Pop or PopCritical while an item they could have started waited in
// the queue: the handoff from a Push to a woken executor, and any stall
// beyond it. Items held back by their priority's cap (Limits) are not
// counted: no executor may start them. The worker exports it, so "every
// executor busy whenever due firings wait" is measured, not sampled.
func (q *Queue) IdleWhileDue() time.Duration {
	q.mu.Lock()
	q.account()
	q.mu.Unlock()
	return time.Duration(q.idleNs.Load())
}

// account closes the interval the idle count held for and counts it anew
// after a change of the waiting executors, the items or the running
// attempts. Called with q.mu held; it reads the clock only while executors
// are idle with a startable item, which a queue that hands out what it
// receives at once almost never is.
func (q *Queue) account() {
	idle := q.idleNow()
	if idle == 0 && q.idle == 0 {
		return
	}
	now := q.clk.Now().UnixNano()
	if q.idle > 0 {
		q.idleNs.Add(int64(q.idle) * (now - q.since))
	}
	q.idle, q.since = idle, now
}

// idleNow is how many waiting executors could start an item now: the
// CRITICAL waiters take CRITICAL items, the others anything Pop would hand
// out one after another under the caps. Called with q.mu held.
func (q *Queue) idleNow() int {
	if q.n == 0 || q.waiting[0]+q.waiting[1] == 0 {
		return 0
	}
	crit := min(q.waiting[0], q.lanes[0].Len())
	return crit + min(q.waiting[1], q.lanes[0].Len()-crit+q.startableBelowCritical())
}

// startableBelowCritical is how many items of the capped lanes Pop would
// hand out one after another now, with no attempt ending: lane by lane in
// priority order, each up to the room its caps leave, stopping at the
// first lane whose caps are full (strict priority). Called with q.mu held.
func (q *Queue) startableBelowCritical() int {
	running := q.running
	total := 0
	for i := 1; i < len(q.lanes); i++ {
		k := q.lanes[i].Len()
		if k == 0 {
			continue
		}
		room := k
		below := 0
		for r := len(priorities) - 1; r >= 1; r-- {
			below += running[r]
			if r <= i && q.limit[r] > 0 {
				room = min(room, q.limit[r]-below)
			}
		}
		if room <= 0 {
			break
		}
		total += room
		running[i] += room
		if room < k {
			break
		}
	}
	return total
}

// Emptied returns a channel closed once no item waits: at once if none
// does now, else when the executors have taken the last one. It is how a
// stage that gives way to firing (the settlers at a herd's instant) learns
// the executors have caught up, without looking again and again.
func (q *Queue) Emptied() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return closed
	}
	if q.empty == nil {
		q.empty = make(chan struct{})
	}
	return q.empty
}

// signalEmpty closes the Emptied channel once the last item is taken.
// Called with q.mu held.
func (q *Queue) signalEmpty() {
	if q.n == 0 && q.empty != nil {
		close(q.empty)
		q.empty = nil
	}
}

// Len is the number of ready items across priorities.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// LenUpTo is the number of items waiting of the priority of rank r (see
// Rank) and the more urgent ones: what a firing of that priority waits
// behind.
func (q *Queue) LenUpTo(r int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for i := 0; i <= r && i < len(q.lanes); i++ {
		n += q.lanes[i].Len()
	}
	return n
}

// FIFO is a first-in-first-out lane: a ring buffer that grows by doubling
// and shrinks back when mostly empty, so a burst does not pin memory.
type FIFO struct {
	buf        []*work.Item
	head, size int
}

func (f *FIFO) Push(it *work.Item) {
	if f.size == len(f.buf) {
		f.resize(max(16, 2*len(f.buf)))
	}
	f.buf[(f.head+f.size)%len(f.buf)] = it
	f.size++
}

func (f *FIFO) Pop() *work.Item {
	if f.size == 0 {
		return nil
	}
	it := f.buf[f.head]
	f.buf[f.head] = nil
	f.head = (f.head + 1) % len(f.buf)
	f.size--
	if len(f.buf) > 64 && f.size < len(f.buf)/4 {
		f.resize(len(f.buf) / 2)
	}
	return it
}

func (f *FIFO) Len() int { return f.size }

func (f *FIFO) resize(n int) {
	nb := make([]*work.Item, n)
	for i := range f.size {
		nb[i] = f.buf[(f.head+i)%len(f.buf)]
	}
	f.buf, f.head = nb, 0
}
