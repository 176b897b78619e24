package readyq

import (
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Fair is a lane that is fair across tenants: one FIFO per tenant with
// ready items, served round robin, one item per turn. A tenant with 100,000
// firings due at 00:00 and a tenant with one are served alternately, so the
// second waits for at most one item of every other tenant with work queued
// at its priority (its fair share), not for the first tenant's backlog.
//
// Within a tenant the order is FIFO. A tenant's FIFO is dropped when it
// empties, so the lane holds memory only for tenants with work queued.
// Push, Pop and Len are O(1) (amortized); the Queue's lock guards them.
type Fair struct {
	byTenant map[string]*FIFO
	// turn is the ring of tenants with queued items, in serving order.
	turn tenantRing
	n    int
}

// NewFair returns an empty fair lane.
func NewFair() *Fair { return &Fair{byTenant: map[string]*FIFO{}} }

// FairLanes is the WithLane constructor for a queue fair across tenants in
// every priority: New(WithLane(FairLanes)).
func FairLanes(sundialv1.Priority) Lane { return NewFair() }

func (f *Fair) Push(it *work.Item) {
	q := f.byTenant[it.Tenant]
	if q == nil {
		q = &FIFO{}
		f.byTenant[it.Tenant] = q
		f.turn.push(it.Tenant)
	}
	q.Push(it)
	f.n++
}

func (f *Fair) Pop() *work.Item {
	tenant, ok := f.turn.pop()
	if !ok {
		return nil
	}
	q := f.byTenant[tenant]
	it := q.Pop()
	f.n--
	if q.Len() == 0 {
		delete(f.byTenant, tenant)
	} else {
		// Served: to the back of the ring.
		f.turn.push(tenant)
	}
	return it
}

func (f *Fair) Len() int { return f.n }

// Tenants is the number of tenants with queued items.
func (f *Fair) Tenants() int { return len(f.byTenant) }

// tenantRing is a FIFO of tenant names (a ring buffer like FIFO's).
type tenantRing struct {
	buf        []string
	head, size int
}

func (r *tenantRing) push(s string) {
	if r.size == len(r.buf) {
		r.resize(max(16, 2*len(r.buf)))
	}
	r.buf[(r.head+r.size)%len(r.buf)] = s
	r.size++
}

func (r *tenantRing) pop() (string, bool) {
	if r.size == 0 {
		return "", false
	}
	s := r.buf[r.head]
	r.buf[r.head] = ""
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	if len(r.buf) > 64 && r.size < len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
	return s, true
}

func (r *tenantRing) resize(n int) {
	nb := make([]string, n)
	for i := range r.size {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}
