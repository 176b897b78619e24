package prepare

import (
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"

	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Admission bounds the firings leased and waiting for an executor by what
// the executors drain within a window shorter than a lease: the stage
// leases no more while the ready queue holds more than the executors take
// in Window at the rate they were last seen to take firings.
//
// Why: a lease taken for a firing that then waits longer than its TTL in
// the ready queue runs out and must be taken again, at the instant, one
// firing at a time — and a worker that had fallen behind leased its whole
// backlog at once, so every firing of it ran out, the executors spent their
// time on Redis round trips instead of requests, and the further behind it
// was the less it fired. Admitted at the drain rate, a firing leased when
// due reaches an executor with most of its lease left, so the executors
// only send requests, whether the worker is on time or behind. The
// firings not admitted yet wait unleased in the stage (oldest first), which
// costs nothing but their memory.
//
// The drain rate is measured, not configured: whenever admission holds
// firings back, the ready queue is at least Floor long, so every executor
// its priority may use is busy and the rate seen is what they can do.
type Admission struct {
	cfg AdmissionConfig
	clk clock.Clock

	mu     sync.Mutex
	at     time.Time // last sample
	taken  uint64    // Drained at the last sample
	rate   float64   // firings per second, smoothed
	primed bool
}

// AdmissionConfig tunes an Admission.
type AdmissionConfig struct {
	// Waiting is the number of firings waiting for an executor now that a
	// firing of the priority of rank r waits behind (readyq.Queue.LenUpTo).
	Waiting func(r int) int
	// Drained is the number of firings ever taken by the executors.
	Drained func() uint64
	// Window is how long a firing leased now may wait for an executor:
	// under the part of the lease the executor requires to be left
	// (half of it), with a margin for the rate's error.
	Window time.Duration
	// Floor is the smallest number allowed to wait whatever the rate: at
	// least every executor's worth, so a rate measured while the executors
	// idled never starves them.
	Floor int
}

// sampleEvery is how often the drain rate is sampled; shorter samples are
// too noisy (a herd's chunk), longer ones follow a change too slowly.
const sampleEvery = 200 * time.Millisecond

// NewAdmission returns an admission rule; clk is the worker's clock.
func NewAdmission(cfg AdmissionConfig, clk clock.Clock) *Admission {
	if cfg.Window <= 0 {
		cfg.Window = 2 * time.Second
	}
	if cfg.Floor <= 0 {
		cfg.Floor = 512
	}
	return &Admission{cfg: cfg, clk: clk}
}

// Allow is how many more firings of the priority of rank r (readyq.Rank)
// may be leased now (0: none until the executors have taken some). Only
// the firings a firing of that priority would wait behind count — its own
// priority's and the more urgent ones — so a LOW backlog filling the ready
// queue never holds back the lease of a CRITICAL or HIGH firing.
func (a *Admission) Allow(r int) int {
	budget := a.Budget()
	return max(budget-a.cfg.Waiting(r), 0)
}

// Budget is how many firings may wait for an executor: the drain rate over
// Window, at least Floor.
func (a *Admission) Budget() int {
	now := a.clk.Now()
	taken := a.cfg.Drained()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.primed:
		a.at, a.taken, a.primed = now, taken, true
	case now.Sub(a.at) >= sampleEvery:
		r := float64(taken-a.taken) / now.Sub(a.at).Seconds()
		// Smoothed over about a second of samples: a GC pause or one slow
		// request does not shut admission, and a lasting change (a core
		// taken by another process) is followed within a couple of
		// seconds.
		a.rate += (r - a.rate) * 0.3
		a.at, a.taken = now, taken
	}
	return max(a.cfg.Floor, int(a.rate*a.cfg.Window.Seconds()))
}

// Rate is the drain rate last estimated, firings per second.
func (a *Admission) Rate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rate
}

// dueHeap is a min-heap of firings by instant, then by turns between
// tenants, then arrival here. Turns as in the holders
// (holder.WithTenantTurns): a firing takes the turn after those of its
// tenant and instant already waiting here. The prepare holder hands a
// herd over in turns already; these turns matter for what arrives here
// apart from it — a firing consumed late (a worker catching up after a
// rebalance) or sent back to be leased again — which would otherwise wait
// behind every waiting firing of another tenant due at the same instant.
type dueHeap struct {
	q     []dueEntry
	n     uint64 // arrivals so far
	turns map[dueTurn]uint32
}

type dueEntry struct {
	it   *work.Item
	seq  uint64
	turn uint32
}

type dueTurn struct {
	tenant string
	at     int64
}

func (h *dueHeap) len() int { return len(h.q) }

func (h *dueHeap) less(i, j int) bool {
	a, b := h.q[i], h.q[j]
	if a.it.FireAt != b.it.FireAt {
		return a.it.FireAt < b.it.FireAt
	}
	if a.turn != b.turn {
		return a.turn < b.turn
	}
	return a.seq < b.seq
}

func (h *dueHeap) push(it *work.Item) {
	h.n++
	if h.turns == nil {
		h.turns = map[dueTurn]uint32{}
	}
	k := dueTurn{it.Tenant, it.FireAt}
	turn := h.turns[k] + 1
	h.turns[k] = turn
	h.q = append(h.q, dueEntry{it, h.n, turn})
	q := h.q
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *dueHeap) pop() *work.Item {
	q := h.q
	n := len(q) - 1
	top := q[0].it
	q[0] = q[n]
	q[n] = dueEntry{}
	h.q = q[:n]
	k := dueTurn{top.Tenant, top.FireAt}
	if t := h.turns[k]; t > 1 {
		h.turns[k] = t - 1
	} else {
		delete(h.turns, k)
	}
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	// A drained heap gives its array back: a backlog of 100,000 does not
	// pin its memory afterwards.
	if n == 0 && cap(q) > 1024 {
		h.q, h.turns = nil, nil
	}
	return top
}
