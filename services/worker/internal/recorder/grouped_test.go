package recorder

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// groupLedger is a memLedger that also writes groups, recording each
// RecordMany call's size. While down is set every group fails whole.
type groupLedger struct {
	memLedger
	down   atomic.Bool
	calls  chan int
	failed atomic.Int64
}

func (l *groupLedger) RecordMany(ctx context.Context, recs []ledger.Rec) []error {
	if l.calls != nil {
		l.calls <- len(recs)
	}
	errs := make([]error, len(recs))
	if l.down.Load() {
		l.failed.Add(1)
		for i := range errs {
			errs[i] = errors.New("cassandra: unavailable")
		}
		return errs
	}
	for i, rc := range recs {
		if rc.Attempt.GetExecutionId() == "bad" {
			errs[i] = fmt.Errorf("%w: test", ledger.ErrInvalidAttempt)
			continue
		}
		errs[i] = l.record(ctx, rc.Attempt, rc.Held)
	}
	return errs
}

func slotted(exec, job string, st sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
	a := row(exec, st)
	a.JobId = job
	a.ScheduledTime = timestamppb.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	return a
}

// A shard of a GroupLedger writes what arrived within Linger as one
// RecordMany, or sooner once GroupSize records are queued.
func TestGroupedLingerAndSize(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	l := &groupLedger{calls: make(chan int, 10)}
	r := New(l, Config{Shards: 1, Linger: 5 * time.Millisecond, GroupSize: 4, Clock: fc}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var done sync.WaitGroup
	final := func(exec string) {
		done.Add(1)
		if !r.Final(context.Background(), slotted(exec, "job-"+exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
			t.Fatal("Final refused")
		}
	}
	// Four records fill a group: written without the clock moving.
	for i := range 4 {
		final(fmt.Sprint("a", i))
	}
	if n := <-l.calls; n != 4 {
		t.Fatalf("first group of %d records, want 4", n)
	}
	done.Wait()
	// Two records wait for the linger.
	final("b0")
	final("b1")
	select {
	case n := <-l.calls:
		t.Fatalf("group of %d written before the linger", n)
	default:
	}
	// The shard's timer may not exist yet (its goroutine may not have run
	// on a loaded machine): keep moving the clock, yielding, until the
	// group is written.
	deadline := time.Now().Add(10 * time.Second)
	for len(l.calls) == 0 {
		fc.Advance(time.Millisecond)
		runtime.Gosched()
		if time.Now().After(deadline) {
			t.Fatal("linger never ended")
		}
	}
	if n := <-l.calls; n != 2 {
		t.Fatalf("lingered group of %d records, want 2", n)
	}
	done.Wait()
}

// Under load with the ledger down, nothing is lost: the shards retry,
// their queues fill, Final blocks (back-pressure), and once the ledger is
// back every final record is written and settled exactly once. A record the
// ledger refuses as invalid is settled without retry.
func TestGroupedNothingLostWhileLedgerDown(t *testing.T) {
	l := &groupLedger{}
	l.down.Store(true)
	var results sync.Map
	r := New(l, Config{Shards: 4, QueueSize: 16, GroupSize: 50, Linger: time.Millisecond}, quiet(), Metrics{Written: func(s string) {
		v, _ := results.LoadOrStore(s, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	const producers, each = 8, 250
	var settled [producers * each]atomic.Int32
	var wg sync.WaitGroup
	var blocked atomic.Bool
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := p*each + i
				a := slotted(fmt.Sprint("e", n), fmt.Sprint("job", n%300), sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED)
				// The queues hold 4×16 records: Final must block.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				ok := r.Final(ctx, a, true, func() { settled[n].Add(1) })
				cancel()
				if !ok {
					blocked.Store(true)
					if !r.Final(context.Background(), a, true, func() { settled[n].Add(1) }) {
						t.Error("Final refused by a running recorder")
						return
					}
				}
			}
		}()
	}
	// Let the failures pile up before the ledger comes back.
	for l.failed.Load() < 8 || !blocked.Load() {
		runtimeGosched()
	}
	l.down.Store(false)
	r.Final(context.Background(), slotted("bad", "job-x", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED), true, func() {})
	wg.Wait()
	r.Stop()
	for n := range settled {
		if c := settled[n].Load(); c != 1 {
			t.Fatalf("record %d settled %d times", n, c)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.rows) != producers*each {
		t.Fatalf("%d rows written, want %d", len(l.rows), producers*each)
	}
	get := func(s string) int64 {
		v, ok := results.Load(s)
		if !ok {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	if get("ok") != producers*each || get("invalid") != 1 || get("retry") == 0 {
		t.Fatalf("results ok=%d invalid=%d retry=%d", get("ok"), get("invalid"), get("retry"))
	}
}

func runtimeGosched() { runtime.Gosched() }

// A steady stream keeps a group open for the whole Linger; once records
// stop coming for Quiet, the group is written at once (a herd's records
// just after the herd, not at the next one's instant).
func TestGroupedQuietEndsAGroupEarly(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	l := &groupLedger{calls: make(chan int, 10)}
	r := New(l, Config{Shards: 1, Linger: 2 * time.Second, Quiet: 100 * time.Millisecond, GroupSize: 1000, Clock: fc}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var done sync.WaitGroup
	// taken waits until the shard has taken everything queued (and, a
	// moment later, re-armed its timers).
	taken := func() {
		for len(r.shards[0]) > 0 {
			runtime.Gosched()
		}
		time.Sleep(2 * time.Millisecond)
	}
	const n = 30
	for i := range n {
		done.Add(1)
		if !r.Final(context.Background(), slotted(fmt.Sprint("s", i), "job", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
			t.Fatal("Final refused")
		}
		taken()
		fc.Advance(40 * time.Millisecond) // 1.2 s in all: less than Linger, never Quiet
		select {
		case got := <-l.calls:
			t.Fatalf("a group of %d written %s into a steady stream", got, fc.Now().Sub(t0))
		default:
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(l.calls) == 0 {
		fc.Advance(10 * time.Millisecond)
		taken()
		if time.Now().After(deadline) {
			t.Fatal("the group was never written")
		}
	}
	if got, at := <-l.calls, fc.Now().Sub(t0); got != n || at >= 2*time.Second {
		t.Fatalf("group of %d written at %s, want all %d once the stream went quiet (before the 2 s linger)", got, at, n)
	}
	done.Wait()
}

// While the ledger keeps failing, a group is retried for SpillAfter and
// then spilled whole; the spilled records count as written (their firings
// finish) and nothing is written to the ledger twice or lost.
func TestGroupedSpillsAfterFailingForSpillAfter(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	l := &groupLedger{}
	l.down.Store(true)
	var mu sync.Mutex
	var spilled []string
	var spilledAt time.Time
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, GroupSize: 10, Clock: fc, SpillAfter: 5 * time.Second,
		Spill: func(_ context.Context, as []*sundialv1.ExecutionAttempt) error {
			mu.Lock()
			defer mu.Unlock()
			for _, a := range as {
				spilled = append(spilled, a.GetExecutionId())
			}
			spilledAt = fc.Now()
			return nil
		}}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	var done sync.WaitGroup
	for i := range 3 {
		done.Add(1)
		if !r.Final(context.Background(), slotted(fmt.Sprint("x", i), "job", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
			t.Fatal("Final refused")
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	deadline := time.Now().Add(10 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-finished:
			waiting = false
		default:
			fc.Advance(100 * time.Millisecond)
			time.Sleep(time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatal("the records were never spilled")
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spilled) != 3 {
		t.Fatalf("spilled %v, want the 3 records once", spilled)
	}
	if l.failed.Load() < 2 || spilledAt.Sub(t0) < 5*time.Second {
		t.Fatalf("spilled at %s after %d failed writes, want only after 5 s of failing", spilledAt.Sub(t0), l.failed.Load())
	}
	l.mu.Lock()
	n := len(l.memLedger.rows)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d records written to the ledger that was down", n)
	}
}

// Once a group has been spilled, the next group that fails is spilled at
// its first failure (the ledger is down: waiting SpillAfter per group
// would fill the queues); a write that succeeds ends that.
func TestGroupedSpillsAtOnceWhileTheLedgerStaysDown(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	l := &groupLedger{}
	l.down.Store(true)
	spills := make(chan time.Time, 10)
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, GroupSize: 10, Clock: fc, SpillAfter: 5 * time.Second,
		Spill: func(context.Context, []*sundialv1.ExecutionAttempt) error { spills <- fc.Now(); return nil }}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	final := func(exec string) {
		if !r.Final(context.Background(), slotted(exec, "job", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, func() {}) {
			t.Fatal("Final refused")
		}
	}
	await := func() time.Time {
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case at := <-spills:
				return at
			default:
			}
			fc.Advance(100 * time.Millisecond)
			time.Sleep(time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatal("never spilled")
			}
		}
	}
	final("a")
	first := await()
	if first.Sub(t0) < 5*time.Second {
		t.Fatalf("first spill after %s of failing, want 5 s", first.Sub(t0))
	}
	final("b")
	// The second group: one failed write, then spilled, with the clock
	// still (Final hands it over at once; the shard's linger is 1 ms).
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case at := <-spills:
			if at.Sub(first) > time.Second {
				t.Fatalf("second spill %s after the first, want at its first failure", at.Sub(first))
			}
			return
		default:
		}
		fc.Advance(time.Millisecond)
		time.Sleep(time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatal("the second group was never spilled")
		}
	}
}
