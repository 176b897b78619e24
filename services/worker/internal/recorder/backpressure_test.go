package recorder

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// autoClock is a fake clock whose timers fire at once, moving the clock by
// what they wait, so a throttle's waits take no real time — except timers
// of length linger (the shards'), which fire only when something else
// moves the clock: a shard's groups then fill to GroupSize from a backlog.
type autoClock struct {
	*clock.Fake
	linger time.Duration
}

func (a autoClock) NewTimer(d time.Duration) clock.Timer {
	t := a.Fake.NewTimer(d)
	if d != a.linger {
		a.Advance(d)
	}
	return t
}

// slowLedger is a groupLedger whose writes take took on the clock, as a
// Cassandra node in long GC pauses does; the biggest group it was given is
// kept.
type slowLedger struct {
	*groupLedger
	clk     *clock.Fake
	took    atomic.Int64 // time.Duration
	written atomic.Int64
	biggest atomic.Int64
}

func (l *slowLedger) RecordMany(ctx context.Context, recs []ledger.Rec) []error {
	l.clk.Advance(time.Duration(l.took.Load()))
	if int64(len(recs)) > l.biggest.Load() {
		l.biggest.Store(int64(len(recs)))
	}
	l.written.Add(int64(len(recs)))
	return l.groupLedger.RecordMany(ctx, recs)
}

func backpressureThrottle(t *testing.T, clk clock.Clock) *ledger.Throttle {
	t.Helper()
	th, err := ledger.NewThrottle(ledger.ThrottleConfig{
		Initial: 1000, Min: 20, Max: 5000, Burst: 100,
		Slow: 500 * time.Millisecond, Increase: 200, Decrease: 0.5, Interval: time.Second, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// A ledger that answers slowly is sent less and less: the throttle's rate
// falls to what it takes at a healthy latency, what is beyond that rate is
// spilled at once instead of queueing, and every record ends either in the
// ledger or spilled, its firing finished. When the ledger is fast again,
// the rate climbs back until the records all go to the ledger.
func TestGroupedFollowsASlowLedgerAndSpillsTheExcess(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	clk := autoClock{fc, 50 * time.Millisecond}
	l := &slowLedger{groupLedger: &groupLedger{}, clk: fc}
	l.took.Store(int64(2 * time.Second))
	th := backpressureThrottle(t, clk)
	var spilled atomic.Int64
	counts := map[string]int{}
	var countsMu sync.Mutex
	r := New(l, Config{Shards: 1, Linger: clk.linger, Quiet: clk.linger, GroupSize: 100, QueueSize: 4000, Clock: clk, SpillAfter: time.Second, Throttle: th,
		Spill: func(_ context.Context, as []*sundialv1.ExecutionAttempt) error {
			spilled.Add(int64(len(as)))
			return nil
		}}, quiet(), Metrics{Written: func(result string) { countsMu.Lock(); counts[result]++; countsMu.Unlock() }})
	defer r.Stop()

	// send hands in n records (a multiple of the group size, so every
	// group fills) and waits until each is written or spilled.
	var done sync.WaitGroup
	send := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			done.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ok := r.Final(ctx, slotted(fmt.Sprint(prefix, i), "job", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done)
			cancel()
			if !ok {
				t.Fatalf("Final of record %d blocked for 10 s: the queue did not drain", i)
			}
		}
	}

	// settle waits for every record handed in to be written or spilled,
	// moving the clock meanwhile so a group short of GroupSize is not
	// left waiting for its linger.
	settle := func() {
		t.Helper()
		finished := make(chan struct{})
		go func() { done.Wait(); close(finished) }()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case <-finished:
				return
			case <-deadline:
				t.Fatal("records neither written nor spilled after 20 s")
			case <-time.After(time.Millisecond):
				fc.Advance(10 * time.Millisecond)
			}
		}
	}

	// A backlog is queued when the recorder starts: full groups, one after
	// the other, each taking the ledger 2 s.
	send("slow", 3000)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	settle()
	slowRate := th.Rate()
	// How many cuts depends on how many slow writes ended apart (four at
	// once count once); what must hold is that the rate fell.
	if slowRate > 1000.0/2 {
		t.Fatalf("rate %v after 3,000 records to a ledger taking 2 s per write, want it cut from the initial 1,000/s", slowRate)
	}
	if spilled.Load() == 0 || l.written.Load() == 0 || spilled.Load()+l.written.Load() != 3000 {
		t.Fatalf("%d written, %d spilled: want both, 3,000 in all", l.written.Load(), spilled.Load())
	}
	if l.biggest.Load() > 100 {
		t.Fatalf("a write of %d records, beyond the group size", l.biggest.Load())
	}
	if th.InFlight() != 0 {
		t.Fatalf("%d records in flight with nothing being written", th.InFlight())
	}
	t.Logf("slow ledger: %d written, %d spilled, rate %.0f/s", l.written.Load(), spilled.Load(), slowRate)

	// Healthy again: rounds of 1,000 records until one is written whole.
	l.took.Store(0)
	rounds := 0
	for ; rounds < 30; rounds++ {
		before := spilled.Load()
		send(fmt.Sprint("fast", rounds, "-"), 1000)
		settle()
		if spilled.Load() == before {
			break
		}
	}
	if rounds == 30 {
		t.Fatalf("30 rounds after the ledger recovered, each still partly spilled (rate %.0f/s)", th.Rate())
	}
	if th.Rate() <= slowRate*2 {
		t.Fatalf("rate %v after the ledger recovered, want it climbing back from %v", th.Rate(), slowRate)
	}
	t.Logf("recovered ledger: a round of 1,000 written whole after %d partly spilled rounds, rate %.0f/s", rounds, th.Rate())
	countsMu.Lock()
	defer countsMu.Unlock()
	if counts["spilled"] != int(spilled.Load()) || counts["ok"] != int(l.written.Load()) {
		t.Fatalf("counted %v, want ok %d and spilled %d", counts, l.written.Load(), spilled.Load())
	}
}

// A ledger that is not connected yet (the worker started while Cassandra
// was down) is spilled around at the first failure, without waiting
// SpillAfter, and the throttle backs away from it.
func TestGroupedSpillsAtOnceWhileTheLedgerIsNotConnected(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	l := &unconnected{groupLedger: &groupLedger{}}
	th := backpressureThrottle(t, fc)
	spills := make(chan int, 10)
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, Quiet: time.Millisecond, GroupSize: 3, Clock: fc, SpillAfter: time.Hour, Throttle: th,
		Spill: func(_ context.Context, as []*sundialv1.ExecutionAttempt) error { spills <- len(as); return nil }}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var done sync.WaitGroup
	for i := range 3 {
		done.Add(1)
		if !r.Final(context.Background(), slotted(fmt.Sprint("u", i), "job", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
			t.Fatal("Final refused")
		}
	}
	select {
	case n := <-spills: // the clock never moved: not after SpillAfter
		if n != 3 {
			t.Fatalf("spilled %d records, want the group of 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never spilled")
	}
	done.Wait()
	if th.Rate() >= 1000 {
		t.Fatalf("rate %v after a failed write, want it cut", th.Rate())
	}
}

// unconnected fails every write as a ledger session that has not
// connected does.
type unconnected struct{ *groupLedger }

func (u *unconnected) RecordMany(_ context.Context, recs []ledger.Rec) []error {
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = fmt.Errorf("ledger: write: %w", ledger.ErrUnavailable)
	}
	return errs
}
