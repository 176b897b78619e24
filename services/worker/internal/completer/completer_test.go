package completer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	"github.com/sundialhq/sundial/pkg/process/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// queue is a Store over a count of queued rows; fail makes the next calls
// fail.
type queue struct {
	mu     sync.Mutex
	rows   int
	calls  int
	fail   int
	limits []int
}

func (q *queue) CompleteQueued(_ context.Context, limit int) (jobcompletion.Taken, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls++
	q.limits = append(q.limits, limit)
	if q.fail > 0 {
		q.fail--
		return jobcompletion.Taken{}, errors.New("postgres down")
	}
	n := min(limit, q.rows)
	q.rows -= n
	t := jobcompletion.Taken{Rows: n}
	if n > 0 {
		t.Waited = time.Duration(q.rows+n) * time.Millisecond // the deeper the queue, the longer its oldest waited
	}
	for range n {
		t.Outcomes = append(t.Outcomes, "succeeded")
	}
	return t, nil
}

func (q *queue) add(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rows += n
}

func (q *queue) left() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rows
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func start(t *testing.T, cfg Config, q *queue, completed *int) *Completer {
	t.Helper()
	var mu sync.Mutex
	c := New(cfg, q, Metrics{Completed: func(o string) {
		mu.Lock()
		defer mu.Unlock()
		if o != "succeeded" {
			t.Errorf("outcome %q", o)
		}
		*completed++
	}}, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// A job queued on a quiet platform is completed at once on the wake, not
// at the next look (an hour away here); each completion is counted with
// its outcome.
func TestWakeCompletesAtOnce(t *testing.T) {
	q := &queue{}
	var completed int
	c := start(t, Config{Rate: 100, Batch: 50, Interval: time.Hour}, q, &completed)
	eventually(t, "the first look at an empty queue", func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.calls == 1 })
	for i := range 3 {
		q.add(1)
		c.Wake()
		eventually(t, "the queued job completed", func() bool { return q.left() == 0 })
		q.mu.Lock()
		calls := q.calls
		q.mu.Unlock()
		if calls != 2+i {
			t.Fatalf("after wake %d: %d statements, want %d", i+1, calls, 2+i)
		}
	}
	c.Stop()
	if completed != 3 {
		t.Fatalf("%d completions counted, want 3", completed)
	}
}

// A burst's queue is taken a batch at a time, no faster than the rate: 1,000
// rows at 2,000 a second in batches of 100 take at least (1,000 − the first
// batch's burst of 100) / 2,000 s = 450 ms.
func TestQueueIsCompletedAtThePace(t *testing.T) {
	q := &queue{rows: 1000}
	var (
		completed int
		waited    []time.Duration
	)
	begin := time.Now()
	c := New(Config{Rate: 2000, Batch: 100, Interval: time.Hour}, q, Metrics{
		Completed: func(string) { completed++ },
		Waited:    func(d time.Duration) { waited = append(waited, d) },
	}, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	eventually(t, "the queue drained", func() bool { return q.left() == 0 })
	took := time.Since(begin)
	c.Stop()
	if took < 400*time.Millisecond {
		t.Fatalf("1,000 rows completed in %s, faster than 2,000 a second", took)
	}
	for i, l := range q.limits {
		if l != 100 {
			t.Fatalf("statement %d took up to %d rows, want the batch of 100", i, l)
		}
	}
	if completed != 1000 {
		t.Fatalf("%d completions counted, want 1000", completed)
	}
	// Each statement reports its oldest row's wait: 1 s for the first
	// here (the whole queue deep), less as it drains.
	if len(waited) != len(q.limits) || waited[0] != time.Second || waited[len(waited)-1] >= waited[0] {
		t.Fatalf("waits reported %v for %d statements", waited, len(q.limits))
	}
}

// A failed statement leaves the rows queued and ends the round; the next
// look takes them.
func TestFailedStatementIsTriedAtTheNextLook(t *testing.T) {
	q := &queue{rows: 5, fail: 1}
	var failed sync.WaitGroup
	failed.Add(1)
	var completed int
	c := New(Config{Rate: 100, Batch: 50, Interval: 20 * time.Millisecond}, q, Metrics{
		Completed: func(string) { completed++ },
		Failed:    failed.Done,
	}, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	failed.Wait()
	eventually(t, "the rows completed after the failure", func() bool { return q.left() == 0 })
	c.Stop()
	if completed != 5 || q.calls < 2 {
		t.Fatalf("%d completed in %d statements, want 5 after the failed one", completed, q.calls)
	}
}
