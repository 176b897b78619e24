// Package holder keeps firings in memory until their fire instant and then
// hands them to the ready queue.
//
// It is one min-heap ordered by (release instant, priority, arrival) and one
// timer set for the earliest entry, not a timer per firing: 100,000 held
// firings cost 100,000 heap entries (32 bytes each: the order and the item's
// address) plus the items themselves, and one goroutine. The clock is the worker's corrected clock (local time plus the
// estimated offset from the database clock), read afresh at every wake-up,
// so a change of the estimate takes effect at the next wake (Wake forces
// one).
package holder

import (
	"context"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"

	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Holder is a lifecycle.Service: its one goroutine moves due items to sink.
type Holder struct {
	clk  clock.Clock
	sink func(*work.Item)

	mu   sync.Mutex
	h    itemHeap
	seq  uint64
	wake chan struct{}

	onWait   func()
	lead     func(*work.Item) time.Duration
	sinkMany func([]*work.Item)
	released func(n int)
	// turns counts the held items of each tenant due at each instant
	// (WithTenantTurns): the next item of that tenant and instant takes
	// the next turn. Keys leave with their last item, so it holds no more
	// than the heap does.
	turns  map[turnKey]uint32
	runner lifecycle.Runner
}

type turnKey struct {
	tenant string
	due    int64
}

// Option configures a Holder.
type Option func(*Holder)

// WithWaitHook calls f each time the loop is about to wait (a test signal:
// with a fake clock, advance only after the holder has armed its timer).
func WithWaitHook(f func()) Option { return func(h *Holder) { h.onWait = f } }

// WithLead releases each item lead(it) before its fire instant instead of
// at it: the prepare stage's holder, which leases firings ahead.
func WithLead(lead func(*work.Item) time.Duration) Option { return func(h *Holder) { h.lead = lead } }

// WithBatchSink hands what is due to sinkMany a chunk at a time instead of
// to the sink one item at a time (the prepare stage, which leases a chunk
// in one call). sinkMany must not block or keep the slice.
func WithBatchSink(sinkMany func([]*work.Item)) Option {
	return func(h *Holder) { h.sinkMany = sinkMany }
}

// WithReleased calls f with the size of every chunk released (at most
// ReleaseChunk), before the chunk reaches the sink: the worker's GOMAXPROCS
// governor learns of a herd before it is fired. f must not block.
func WithReleased(f func(n int)) Option { return func(h *Holder) { h.released = f } }

// WithTenantTurns orders the items due at the same instant with the same
// priority by turns between tenants — each tenant's first, then each one's
// second, … — instead of by arrival alone. Both of the worker's holders
// take turns, so a herd of one tenant's thousands released a chunk at a
// time does not keep another tenant's firing of the same instant for the
// last chunk, neither in the prepare stage (which leases in the order it is
// given) nor in the ready queue (fair only among what it already holds).
func WithTenantTurns() Option { return func(h *Holder) { h.turns = map[turnKey]uint32{} } }

// New returns a holder that reads time from clk (the corrected clock) and
// passes due items to sink, which must not block.
func New(clk clock.Clock, sink func(*work.Item), opts ...Option) *Holder {
	h := &Holder{clk: clk, sink: sink, wake: make(chan struct{}, 1)}
	for _, o := range opts {
		o(h)
	}
	return h
}

// AddAfter holds it as Add does, and releases it no earlier than
// notBefore (Unix ns, corrected clock), whatever its instant. It is the one
// way a stage sends a firing back to wait again (another delivery holds
// its lease, Redis did not answer, a limit said wait) or paces it (a
// catch-up): only the holders write an item's Hold.
func (h *Holder) AddAfter(it *work.Item, notBefore int64) {
	it.NotBefore = notBefore
	h.Add(it)
}

// Add holds it until it.FireAt (less the lead, if any; never before
// it.NotBefore, which AddAfter set). Items due at the same instant are released most urgent
// priority first, then (WithTenantTurns) by turns between tenants, then in
// the order they were added.
func (h *Holder) Add(it *work.Item) {
	it.Due = it.FireAt
	if h.lead != nil {
		it.Due -= int64(h.lead(it))
	}
	it.Due = max(it.Due, it.NotBefore)
	h.mu.Lock()
	h.seq++
	it.Seq = h.seq
	if h.turns != nil {
		k := turnKey{it.Tenant, it.Due}
		n := h.turns[k] + 1
		h.turns[k] = n
		it.Turn = n
	}
	first := h.h.push(it) == 0
	h.mu.Unlock()
	if first {
		h.Wake()
	}
}

// Remove drops it if it is still held, reporting whether it was.
func (h *Holder) Remove(it *work.Item) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := it.HeapIndex
	if i < 0 || i >= len(h.h) || h.h[i].it != it {
		return false
	}
	h.h.remove(i)
	h.leave(it)
	return true
}

// RemoveIf drops every held item for which drop reports true and returns
// them, in no particular order; the caller owns them from then on. It is
// one pass over the heap and one re-heapify, O(n) under the lock whatever
// the number removed, so dropping the firings of thousands of changed jobs
// costs one scan, not one per job: batch the jobs into one predicate. drop
// runs under the holder's lock and must not block or call the holder. A
// heap left much smaller than its capacity is copied, so the memory of a
// large drop comes back.
func (h *Holder) RemoveIf(drop func(*work.Item) bool) []*work.Item {
	var out []*work.Item
	h.mu.Lock()
	kept := h.h[:0]
	for _, e := range h.h {
		if it := e.it; drop(it) {
			it.HeapIndex = -1
			h.leave(it)
			out = append(out, it)
			continue
		}
		kept = append(kept, e)
	}
	if len(out) == 0 {
		h.mu.Unlock()
		return nil
	}
	clear(h.h[len(kept):])
	if cap(kept) > 1024 && len(kept) < cap(kept)/4 {
		kept = append(itemHeap(nil), kept...)
	}
	h.h = kept
	h.h.init()
	h.mu.Unlock()
	// The earliest item may have gone: re-arm the timer for the new one.
	h.Wake()
	return out
}

// popLocked takes the earliest item out of the heap. Called with h.mu held
// and the heap not empty.
func (h *Holder) popLocked() *work.Item {
	it := h.h.pop()
	h.leave(it)
	return it
}

// leave gives back its turn when it leaves the heap. Called with h.mu held.
func (h *Holder) leave(it *work.Item) {
	if h.turns == nil {
		return
	}
	k := turnKey{it.Tenant, it.Due}
	if n := h.turns[k]; n > 1 {
		h.turns[k] = n - 1
	} else {
		delete(h.turns, k)
	}
}

// Len is the number of held items.
func (h *Holder) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.h)
}

// Wake makes the loop re-read the clock and re-arm its timer.
func (h *Holder) Wake() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Start runs the loop.
func (h *Holder) Start(context.Context) error { return h.runner.Run(h.loop) }

// Stop ends the loop; held items stay held (the consumer abandons them when
// it gives up their partitions).
func (h *Holder) Stop() { h.runner.Stop() }

func (h *Holder) loop(ctx context.Context) error {
	timer := h.clk.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	due := make([]*work.Item, 0, ReleaseChunk)
	for {
		now := h.clk.Now().UnixNano()
		wait := time.Duration(-1)
		// Release in chunks: a herd of 100,000 due together reaches the
		// sink a chunk at a time, most urgent priority first, instead of
		// after the whole herd has left the heap.
		for {
			h.mu.Lock()
			for len(due) < ReleaseChunk && len(h.h) > 0 && h.h[0].due <= now {
				due = append(due, h.popLocked())
			}
			more := len(due) == ReleaseChunk
			if !more && len(h.h) > 0 {
				wait = time.Duration(h.h[0].due - now)
			}
			h.mu.Unlock()
			for _, it := range due {
				it.Ready = now
			}
			if h.released != nil && len(due) > 0 {
				h.released(len(due))
			}
			if h.sinkMany != nil {
				h.sinkMany(due)
			} else {
				for _, it := range due {
					h.sink(it)
				}
			}
			clear(due)
			due = due[:0]
			if !more {
				break
			}
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		if h.onWait != nil {
			h.onWait()
		}
		select {
		case <-timer.C():
		case <-h.wake:
			timer.Stop()
		case <-ctx.Done():
			return nil
		}
	}
}

// ReleaseChunk is how many due items leave the heap per lock hold: the
// most one call of WithReleased's f is told of.
const ReleaseChunk = 256

// itemHeap is a binary min-heap of entries ordered by (release instant,
// priority, turn, arrival). Each entry carries its item's order inline, so
// sifting through 100,000 held firings compares within the heap's own
// array instead of reaching into items scattered over the heap memory;
// only the item's HeapIndex is written as it moves. Typed rather than
// container/heap, so a comparison is not an interface call.
type itemHeap []entry

type entry struct {
	due  int64
	seq  uint64
	turn uint32
	rank int32
	it   *work.Item
}

func (a *entry) less(b *entry) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.turn != b.turn {
		return a.turn < b.turn
	}
	return a.seq < b.seq
}

// push adds it, keyed by its Hold and priority as they are now, and
// returns the index it settled at (0: it is the earliest).
func (h *itemHeap) push(it *work.Item) int {
	*h = append(*h, entry{due: it.Due, seq: it.Seq, turn: it.Turn, rank: int32(readyq.Rank(it.Priority)), it: it})
	return h.up(len(*h) - 1)
}

// pop removes and returns the earliest item.
func (h *itemHeap) pop() *work.Item {
	return h.remove(0)
}

// remove removes and returns the item at index i.
func (h *itemHeap) remove(i int) *work.Item {
	old := *h
	n := len(old) - 1
	it := old[i].it
	if i != n {
		old[i] = old[n]
		old[i].it.HeapIndex = i
	}
	old[n] = entry{}
	*h = old[:n]
	if i != n {
		if j := h.down(i); j == i {
			h.up(i)
		}
	}
	it.HeapIndex = -1
	// Give memory back after a burst drained.
	if cap(*h) > 1024 && len(*h) < cap(*h)/4 {
		*h = append(itemHeap(nil), *h...)
	}
	return it
}

// init orders the whole array and sets every item's HeapIndex.
func (h itemHeap) init() {
	for i := range h {
		h[i].it.HeapIndex = i
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// up moves the entry at j towards the root while it is earlier than its
// parent, and returns where it stopped.
func (h itemHeap) up(j int) int {
	e := h[j]
	for j > 0 {
		p := (j - 1) / 2
		if !e.less(&h[p]) {
			break
		}
		h[j] = h[p]
		h[j].it.HeapIndex = j
		j = p
	}
	h[j] = e
	e.it.HeapIndex = j
	return j
}

// down moves the entry at i towards the leaves while a child is earlier,
// and returns where it stopped.
func (h itemHeap) down(i int) int {
	n := len(h)
	e := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].less(&h[c]) {
			c = r
		}
		if !h[c].less(&e) {
			break
		}
		h[i] = h[c]
		h[i].it.HeapIndex = i
		i = c
	}
	h[i] = e
	e.it.HeapIndex = i
	return i
}
