package consumer

import (
	"sync"
	"time"
)

// pacer spreads catch-up firings over time at a rate, as the prefetcher
// meant them to arrive.
//
// The prefetcher releases a recovery's catch-ups at --catch-up-rate by
// giving them fire instants 1/rate apart, starting at the moment it staged
// them. They reach a worker a little later (the relay publishes, the
// worker fetches): by then the first of them are already due, and a
// holder releases every firing whose instant has passed at once — so the
// target saw the first second or two of a recovery in one burst (171
// within 1.1 s against 100/s). The pacer holds each arriving catch-up back
// by the lateness of the first one of its burst, which keeps the spacing
// the prefetcher gave them, and never releases two of them less than
// 1/rate apart on this worker. Catch-ups that arrive ahead of their
// instants, spaced by the prefetcher, are not delayed at all.
type pacer struct {
	interval int64 // ns between two catch-ups; 0: not paced

	mu sync.Mutex
	// shift is how late the first catch-up of the current burst arrived;
	// next is the earliest release of the next catch-up.
	shift, next int64
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return &pacer{}
	}
	return &pacer{interval: int64(float64(time.Second) / rate)}
}

// release returns when a catch-up due at fireAt, arriving at now (Unix ns,
// corrected clock), may be released.
func (p *pacer) release(fireAt, now int64) int64 {
	if p.interval == 0 {
		return fireAt
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now > p.next+int64(time.Second) {
		// Nothing paced for a while: a new burst.
		p.shift = 0
	}
	if p.shift == 0 && fireAt < now {
		p.shift = now - fireAt
	}
	at := max(fireAt+p.shift, p.next)
	p.next = at + p.interval
	return at
}
