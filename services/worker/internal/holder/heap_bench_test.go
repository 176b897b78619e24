package holder

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// BenchmarkHeldChurn is the holder's work per firing at a steady 1,000/s
// with two minutes held: one item added at the far end of 120,000 held,
// spread over the window, and the earliest one released.
func BenchmarkHeldChurn(b *testing.B) {
	const held = 120_000
	window := int64(2 * time.Minute)
	rng := rand.New(rand.NewPCG(1, 2))
	h := New(clock.NewFake(time.Unix(0, 0)), func(*work.Item) {}, WithTenantTurns())
	// Items come from a pool allocated up front and taken in random
	// order, so neighbours in the heap are not neighbours in memory, as
	// in a worker whose held firings arrived over two minutes.
	pool := make([]*work.Item, held+b.N)
	for i := range pool {
		pool[i] = &work.Item{Facts: work.Facts{Tenant: "t"}}
	}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	next := 0
	add := func(due int64) {
		it := pool[next]
		next++
		it.FireAt = due
		h.Add(it)
	}
	for range held {
		add(rng.Int64N(window))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		add(window + int64(i)*int64(time.Millisecond) + rng.Int64N(int64(time.Second)))
		h.mu.Lock()
		h.popLocked()
		h.mu.Unlock()
	}
}
