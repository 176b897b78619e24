package prepare

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// The budget is the drain rate over the window, never under the floor, and
// follows a change of rate within a couple of seconds.
func TestAdmissionFollowsTheDrainRate(t *testing.T) {
	clk := clock.NewFake(t0)
	var drained atomic.Uint64
	waiting := 0
	a := NewAdmission(AdmissionConfig{Waiting: func(int) int { return waiting }, Drained: drained.Load, Window: 2 * time.Second, Floor: 100}, clk)
	if got := a.Allow(0); got != 100 {
		t.Fatalf("before any sample Allow = %d, want the floor 100", got)
	}
	// The executors take 1,000 firings a second for three seconds.
	for range 15 {
		clk.Advance(200 * time.Millisecond)
		drained.Add(200)
		a.Budget()
	}
	if b := a.Budget(); b < 1800 || b > 2000 {
		t.Fatalf("budget %d after 3 s at 1,000/s, want about 2,000 (1,000/s over 2 s)", b)
	}
	waiting = 1500
	if got, b := a.Allow(0), a.Budget(); got != b-1500 {
		t.Fatalf("Allow = %d with 1,500 waiting and a budget of %d", got, b)
	}
	waiting = 5000
	if got := a.Allow(0); got != 0 {
		t.Fatalf("Allow = %d with more waiting than the budget, want 0", got)
	}
	// A core taken away: the executors now take 250 a second.
	for range 15 {
		clk.Advance(200 * time.Millisecond)
		drained.Add(50)
		a.Budget()
	}
	if b := a.Budget(); b > 600 {
		t.Fatalf("budget %d 3 s after the rate fell to 250/s, want near 500", b)
	}
	// Idle executors never shut admission below the floor.
	for range 30 {
		clk.Advance(200 * time.Millisecond)
		a.Budget()
	}
	if b := a.Budget(); b != 100 {
		t.Fatalf("budget %d after the executors idled, want the floor 100", b)
	}
}

// A backlog is leased only as fast as the executors take it: the stage
// leases up to the budget, holds the rest unleased, and leases more as the
// ready queue drains — the oldest first, a firing sent back to be leased
// again before the later ones.
func TestBacklogIsLeasedAtTheDrainRate(t *testing.T) {
	clk := clock.NewFake(t0.Add(time.Minute)) // every firing below is late
	var drained atomic.Uint64
	var leased atomic.Int64
	waiting := func(int) int { return int(leased.Load()) - int(drained.Load()) }
	adm := NewAdmission(AdmissionConfig{Waiting: waiting, Drained: drained.Load, Window: 2 * time.Second, Floor: 300}, clk)
	l := &leaser{}
	s, r := newStage(t, Config{Batch: 100, Admission: adm}, &countingLeaser{leaser: l, n: &leased}, clk)
	o := &owner{}
	var items []*work.Item
	for i := range 1000 {
		it := item(t, o, fmt.Sprint("late-", i), t0.Add(time.Duration(i)*time.Millisecond), 0)
		items = append(items, it)
	}
	s.AddMany(items)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	defer s.Stop()
	waitFor(t, func() bool { return leased.Load() == 300 })
	time.Sleep(20 * time.Millisecond)
	if n := leased.Load(); n != 300 {
		t.Fatalf("%d leased with nothing drained, want the floor of 300", n)
	}
	if s.Waiting() != 700 {
		t.Fatalf("%d waiting unleased, want 700", s.Waiting())
	}
	// A firing whose lease ran out comes back: it goes before the 700.
	r.mu.Lock()
	back := r.fire[5]
	r.mu.Unlock()
	s.again(back, 0)
	s.AddMany([]*work.Item{back})
	// The executors take 200: 200 more may be leased, the returned one first.
	drained.Add(200)
	clk.Advance(admissionPoll)
	waitFor(t, func() bool { return leased.Load() == 500 })
	calls := l.snapshot()
	var after []string
	for _, c := range calls[3:] {
		for _, a := range c {
			after = append(after, a.Execution.ExecutionID)
		}
	}
	if after[0] != "late-5" || after[1] != "late-300" {
		t.Fatalf("leased after the drain: %v..., want late-5 (sent back) then late-300", after[:3])
	}
}

// countingLeaser counts the firings leased.
type countingLeaser struct {
	*leaser
	n *atomic.Int64
}

func (c *countingLeaser) AcquireMany(ctx context.Context, batch []lease.Acquisition) ([]lease.Result, error) {
	c.n.Add(int64(len(batch)))
	return c.leaser.AcquireMany(ctx, batch)
}

func (l *leaser) snapshot() [][]lease.Acquisition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]lease.Acquisition(nil), l.calls...)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A LOW backlog that fills the ready queue up to the budget holds back
// more LOW leases, never a CRITICAL or HIGH one: each priority counts only
// what it would wait behind.
func TestLowBacklogDoesNotHoldBackUrgentLeases(t *testing.T) {
	clk := clock.NewFake(t0.Add(time.Minute))
	waitingLow := 400 // LOW firings in the ready queue
	adm := NewAdmission(AdmissionConfig{Waiting: func(r int) int {
		if r == 3 {
			return waitingLow
		}
		return 0
	}, Drained: func() uint64 { return 0 }, Floor: 400}, clk)
	l := &leaser{}
	s, r := newStage(t, Config{Batch: 100, Admission: adm}, l, clk)
	o := &owner{}
	var items []*work.Item
	for i := range 50 {
		low := item(t, o, fmt.Sprint("low-", i), t0, 0)
		low.Priority = sundialv1.Priority_PRIORITY_LOW
		items = append(items, low)
	}
	crit := item(t, o, "crit", t0.Add(time.Second), 0)
	crit.Priority = sundialv1.Priority_PRIORITY_CRITICAL
	items = append(items, crit)
	s.AddMany(items)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	defer s.Stop()
	<-r.fired
	time.Sleep(20 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fire) != 1 || exec(r.fire[0]) != "crit" {
		t.Fatalf("leased %d (first %s), want the CRITICAL one alone while LOW's queue is at its budget", len(r.fire), exec(r.fire[0]))
	}
	if s.Waiting() != 50 {
		t.Fatalf("%d waiting, want the 50 LOW", s.Waiting())
	}
}

// What arrives apart from the prepare holder's turns (a firing consumed
// late, one sent back to be leased again) takes its tenant's turn among
// the firings waiting for the same instant, instead of waiting behind all
// of another tenant's: a herd's instant first, then turns, then arrival.
func TestWaitingFiringsAreTakenByTurnsBetweenTenants(t *testing.T) {
	o := &owner{}
	var h dueHeap
	add := func(id, tenant string, at time.Time) {
		it := item(t, o, id, at, 0)
		it.Tenant = tenant
		h.push(it)
	}
	for i := range 5 {
		add(fmt.Sprint("big-", i), "big", t0)
	}
	add("early", "big", t0.Add(-time.Second))
	add("small", "small", t0)
	add("small-2", "small", t0)
	var got []string
	for h.len() > 0 {
		got = append(got, exec(h.pop()))
	}
	want := []string{"early", "big-0", "small", "big-1", "small-2", "big-2", "big-3", "big-4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("taken in the order %v, want %v", got, want)
	}
	if len(h.turns) != 0 {
		t.Fatalf("%d turn counts left after the heap drained, want none", len(h.turns))
	}
	// A tenant's turn counts what of it still waits: after its first
	// ones were taken, a new one is not sent behind a turn it no longer has.
	add("big-a", "big", t0)
	add("big-b", "big", t0)
	h.pop()
	add("small-late", "small", t0)
	if got := exec(h.pop()); got != "small-late" {
		t.Fatalf("took %s, want small-late (turn 1) before big-b (turn 2)", got)
	}
}
