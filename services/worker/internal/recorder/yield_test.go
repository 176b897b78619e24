package recorder

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// dueFirings plays the ready queue's Emptied: open while firings are due,
// closed once they have gone out.
type dueFirings struct {
	mu sync.Mutex
	ch chan struct{}
}

func busy() *dueFirings { return &dueFirings{ch: make(chan struct{})} }

func (d *dueFirings) Emptied() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *dueFirings) goneOut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.ch)
}

// handIn gives the recorder n final records and returns the group that
// waits for their writes.
func handIn(t *testing.T, r *Recorder, prefix string, n int) *sync.WaitGroup {
	t.Helper()
	var done sync.WaitGroup
	for i := range n {
		done.Add(1)
		exec := fmt.Sprint(prefix, i)
		if !r.Final(context.Background(), slotted(exec, "job-"+exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
			t.Fatal("Final refused")
		}
	}
	return &done
}

func waitDone(t *testing.T, done *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { done.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s: records not written within %s", what, within)
	}
}

// While due firings wait for an executor, the records of those already
// fired are not written: the cores go to the requests first. Once the
// firings have gone out, the records are written.
func TestRecordsWaitWhileFiringsAreDue(t *testing.T) {
	due := busy()
	l := &groupLedger{calls: make(chan int, 100)}
	r := New(l, Config{Shards: 1, Linger: 5 * time.Millisecond, Quiet: time.Millisecond, GroupSize: 100, QueueSize: 1000,
		Emptied: due.Emptied, MaxYield: time.Minute}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	done := handIn(t, r, "a", 10)
	select {
	case n := <-l.calls:
		t.Fatalf("a group of %d records was written while firings were due", n)
	case <-time.After(300 * time.Millisecond):
	}
	due.goneOut()
	waitDone(t, done, 5*time.Second, "after the firings went out")
	if got := l.count(); got != 10 {
		t.Fatalf("%d rows written, want 10", got)
	}
}

// A record is held back at most MaxYield, however long firings keep
// waiting.
func TestRecordsHeldBackAtMostMaxYield(t *testing.T) {
	due := busy()
	var held atomic.Int64
	l := &groupLedger{}
	r := New(l, Config{Shards: 1, Linger: 5 * time.Millisecond, GroupSize: 100, QueueSize: 1000,
		Emptied: due.Emptied, MaxYield: 50 * time.Millisecond}, quiet(), Metrics{Yielded: func(d time.Duration) { held.Add(int64(d)) }})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	waitDone(t, handIn(t, r, "a", 5), 5*time.Second, "with firings due throughout")
	if held.Load() == 0 {
		t.Fatal("the group was not held back at all")
	}
}

// Records are never held back into a full queue: once a shard's queue is
// half full its records go, so Final never blocks the executors on their
// account. Only what is less than half the queue (and the group being
// gathered) stays held back while the firings keep waiting.
func TestHeldRecordsGoOnceTheQueueIsHalfFull(t *testing.T) {
	const queue, group, n = 8, 2, 40
	due := busy()
	l := &groupLedger{}
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, GroupSize: group, QueueSize: queue,
		Emptied: due.Emptied, MaxYield: time.Hour}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	handed := make(chan bool, 1)
	var done sync.WaitGroup
	go func() {
		for i := range n {
			done.Add(1)
			exec := fmt.Sprint("a", i)
			if !r.Final(context.Background(), slotted(exec, "job-"+exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, done.Done) {
				handed <- false
				return
			}
		}
		handed <- true
	}()
	select {
	case ok := <-handed:
		if !ok {
			t.Fatal("Final refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Final blocked: records were held back into a full queue")
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.count() < n-queue/2-group && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.count(); got < n-queue/2-group {
		t.Fatalf("%d of %d records written with the queue at half, want at least %d", got, n, n-queue/2-group)
	}
	due.goneOut()
	waitDone(t, &done, 5*time.Second, "after the firings went out")
}

// countingSpill counts the records spilled.
type countingSpill struct{ n atomic.Int64 }

func (c *countingSpill) spill(_ context.Context, as []*sundialv1.ExecutionAttempt) error {
	c.n.Add(int64(len(as)))
	return nil
}

// pausedLedger is a groupLedger whose writes each take pause.
type pausedLedger struct {
	*groupLedger
	pause time.Duration
}

func (l *pausedLedger) RecordMany(ctx context.Context, recs []ledger.Rec) []error {
	time.Sleep(l.pause)
	return l.groupLedger.RecordMany(ctx, recs)
}

// What a shard held back while firings were due is written when they have
// gone out, every group waiting for a write slot: a healthy ledger that
// takes a moment per group does not make the backlog the shard chose to
// keep look like a failing one, so nothing is spilled to Postgres.
func TestHeldBackRecordsAreWrittenNotSpilled(t *testing.T) {
	due := busy()
	sp := &countingSpill{}
	l := &pausedLedger{groupLedger: &groupLedger{}, pause: 20 * time.Millisecond}
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, GroupSize: 5, QueueSize: 1000, GroupsInFlight: 1,
		Spill: sp.spill, Emptied: due.Emptied, MaxYield: time.Minute}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	done := handIn(t, r, "a", 100)
	time.Sleep(100 * time.Millisecond)
	due.goneOut()
	waitDone(t, done, 10*time.Second, "after the firings went out")
	if n := sp.n.Load(); n != 0 {
		t.Fatalf("%d records spilled, want 0: the ledger was healthy", n)
	}
	if got := l.count(); got != 100 {
		t.Fatalf("%d rows written, want 100", got)
	}
}

func (l *memLedger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.rows)
}

// A record's wait is counted from when it was handed in, not from when its
// shard took it: records queued behind a held-back group are not held
// back again for a whole MaxYield, so under a lasting backlog a record
// waits about MaxYield, not one MaxYield per group ahead of it.
func TestHeldBackWaitCountsFromHandIn(t *testing.T) {
	const maxYield = 500 * time.Millisecond
	due := busy()
	l := &groupLedger{calls: make(chan int, 100)}
	r := New(l, Config{Shards: 1, Linger: time.Millisecond, GroupSize: 2, QueueSize: 1000,
		Emptied: due.Emptied, MaxYield: maxYield}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	start := time.Now()
	// Ten groups' worth, all handed in at once: one MaxYield should see
	// them all written, not ten.
	waitDone(t, handIn(t, r, "a", 20), 10*time.Second, "with firings due throughout")
	if took := time.Since(start); took > 3*maxYield {
		t.Fatalf("20 records in groups of 2 took %s to be written, want about one MaxYield (%s)", took, maxYield)
	}
}
