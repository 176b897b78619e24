package relay

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

// memOutbox is an in-memory outbox with the claim semantics of the real one
// (due rows oldest first, claimed rows invisible to other claims until the
// claim ends), so the loop can be tested against kfake without Postgres.
type memOutbox struct {
	clock clock.Clock
	// dueCalls and totalCalls count the depth gauges' reads.
	dueCalls, totalCalls int

	mu      sync.Mutex
	nextID  int64
	rows    map[int64]memRow
	locked  map[int64]bool
	claims  int
	deleted int
}

type memRow struct {
	outbox.Row
	publishAt time.Time
}

func newMemOutbox(c clock.Clock) *memOutbox {
	return &memOutbox{clock: c, rows: map[int64]memRow{}, locked: map[int64]bool{}}
}

// add stages a row publishable at publishAt.
func (m *memOutbox) add(r outbox.Row, publishAt time.Time) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	r.ID = m.nextID
	m.rows[r.ID] = memRow{Row: r, publishAt: publishAt}
	return r.ID
}

func (m *memOutbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

func (m *memOutbox) Claim(ctx context.Context, limit int) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims++
	now := m.clock.Now()
	var due []memRow
	for id, r := range m.rows {
		if !m.locked[id] && !r.publishAt.After(now) {
			due = append(due, r)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].publishAt.Equal(due[j].publishAt) {
			return due[i].publishAt.Before(due[j].publishAt)
		}
		return due[i].ID < due[j].ID
	})
	c := &memClaim{m: m, next: -1}
	for _, r := range due[:min(limit, len(due))] {
		m.locked[r.ID] = true
		row := r.Row
		row.Waited = now.Sub(r.publishAt)
		c.rows = append(c.rows, row)
	}
	if len(c.rows) < limit {
		for _, r := range m.rows {
			if d := r.publishAt.Sub(now); d > 0 && (c.next < 0 || d < c.next) {
				c.next = d
			}
		}
	}
	return c, nil
}

func (m *memOutbox) Due(context.Context) (outbox.Due, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dueCalls++
	var d outbox.Due
	now := m.clock.Now()
	for _, r := range m.rows {
		if !r.publishAt.After(now) {
			d.Rows++
			d.Oldest = max(d.Oldest, now.Sub(r.publishAt))
		}
	}
	return d, nil
}

func (m *memOutbox) Total(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.totalCalls++
	return int64(len(m.rows)), nil
}

type memClaim struct {
	m    *memOutbox
	rows []outbox.Row
	next time.Duration // -1: none
	done bool
}

func (c *memClaim) Rows() []outbox.Row { return c.rows }

func (c *memClaim) NextDue() (time.Duration, bool) { return c.next, c.next >= 0 }

func (c *memClaim) Complete(_ context.Context, ids []int64) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for _, id := range ids {
		delete(c.m.rows, id)
		c.m.deleted++
	}
	c.unlock()
	return nil
}

func (c *memClaim) Release(context.Context) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.unlock()
}

func (c *memClaim) unlock() {
	if c.done {
		return
	}
	c.done = true
	for _, r := range c.rows {
		delete(c.m.locked, r.ID)
	}
}

func (m *memOutbox) has(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.rows[id]
	return ok
}

func (m *memOutbox) deletedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleted
}

func (m *memOutbox) claimCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims
}

// depthCalls reports how often Due and Total were called.
func (m *memOutbox) depthCalls() (due, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dueCalls, m.totalCalls
}
