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

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/pkg/domain/firing"
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

// New returns an empty queue.
func New(opts ...Option) *Queue {
	q := &Queue{wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
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
func (q *Queue) TryPop() *work.Item {
	q.mu.Lock()
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
	for {
		if it := q.TryPop(); it != nil {
			return it
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
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
	for {
		q.mu.Lock()
		l := q.lanes[0]
		it := l.Pop()
		var depth, n int
		if it != nil {
			q.running[0]++
			q.n--
			q.popped.Add(1)
			q.signalEmpty()
			depth, n = l.Len(), q.n
		}
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
		case <-ctx.Done():
			return nil
		}
	}
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
