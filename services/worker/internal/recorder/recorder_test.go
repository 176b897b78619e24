package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type memLedger struct {
	mu   sync.Mutex
	rows []*sundialv1.ExecutionAttempt
	// failures: how many times to fail before succeeding, per execution.
	failures map[string]int
	err      error
	// held[i] says rows[i] came through RecordHeld.
	held []bool
	// gate, when set, holds every write until a value is received, after
	// announcing it on entered.
	gate    chan struct{}
	entered chan string
}

func (l *memLedger) Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return l.record(ctx, a, false)
}

func (l *memLedger) RecordHeld(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return l.record(ctx, a, true)
}

func (l *memLedger) record(_ context.Context, a *sundialv1.ExecutionAttempt, held bool) error {
	if l.gate != nil {
		l.entered <- a.GetExecutionId()
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures[a.GetExecutionId()] > 0 {
		l.failures[a.GetExecutionId()]--
		return errors.New("cassandra: timeout")
	}
	if l.err != nil {
		return l.err
	}
	l.rows = append(l.rows, a)
	l.held = append(l.held, held)
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func row(exec string, st sundialv1.ExecutionStatus) *sundialv1.ExecutionAttempt {
	return &sundialv1.ExecutionAttempt{ExecutionId: exec, JobId: "j", Attempt: 1, Status: st}
}

func TestOrderPerExecutionAndRetry(t *testing.T) {
	l := &memLedger{failures: map[string]int{"e3": 2}}
	results := map[string]int{}
	var mu sync.Mutex
	r := New(l, Config{Shards: 4}, quiet(), Metrics{Written: func(s string) { mu.Lock(); results[s]++; mu.Unlock() }})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		exec := fmt.Sprintf("e%d", i)
		r.Running(row(exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
		wg.Add(1)
		if !r.Final(context.Background(), row(exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), false, wg.Done) {
			t.Fatal("Final refused")
		}
	}
	wg.Wait() // every final record's done ran: written, including e3 after two failures
	r.Stop()
	seen := map[string]sundialv1.ExecutionStatus{}
	for _, a := range l.rows {
		prev, ok := seen[a.GetExecutionId()]
		if a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING && ok {
			t.Fatalf("%s: RUNNING written after %v", a.GetExecutionId(), prev)
		}
		seen[a.GetExecutionId()] = a.GetStatus()
	}
	for exec, st := range seen {
		if st != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
			t.Fatalf("%s ends %v", exec, st)
		}
	}
	// Each RUNNING record is written, or superseded by its outcome when
	// that arrived while it was still queued.
	if len(seen) != 20 || results["retry"] != 2 || results["ok"] < 20 || results["ok"]+results["superseded"] != 40 {
		t.Fatalf("seen %d executions, results %v", len(seen), results)
	}
}

func TestPermanentErrorsSettle(t *testing.T) {
	for _, err := range []error{ledger.ErrFenced, ledger.ErrInvalidAttempt} {
		l := &memLedger{err: fmt.Errorf("wrapped: %w", err)}
		r := New(l, Config{Shards: 1}, quiet(), Metrics{})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		r.Final(context.Background(), row("e", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED), false, func() { close(done) })
		<-done
		r.Stop()
	}
}

// A ledger that never answers: Stop gives up after the drain timeout and
// does not report the record as written (its firing stays unfinished).
func TestStopAbandonsAfterDrainTimeout(t *testing.T) {
	l := &memLedger{err: errors.New("down")}
	r := New(l, Config{Shards: 1, DrainTimeout: 1}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	called := false
	r.Final(context.Background(), row("e", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), false, func() { called = true })
	r.Stop()
	if called {
		t.Fatal("done called for a record never written")
	}
	if r.Final(context.Background(), row("e2", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), false, func() {}) {
		t.Fatal("Final accepted after Stop")
	}
	r.Running(row("e3", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)) // no panic on a closed recorder
}

func TestRunningNeverBlocks(t *testing.T) {
	l := &memLedger{}
	dropped := 0
	r := New(l, Config{Shards: 1, QueueSize: 2}, quiet(), Metrics{Written: func(s string) {
		if s == "dropped" {
			dropped++
		}
	}})
	// Not started: nothing drains, so the third RUNNING record is dropped.
	for range 3 {
		r.Running(row("e", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
	}
	if dropped != 1 {
		t.Fatalf("dropped %d, want 1", dropped)
	}
	r.Stop()
}

// A RUNNING record still queued when its outcome arrives is not written
// (the outcome writes the same row); one already taken by its shard is.
// Held records skip the fence check, others do not.
func TestOutcomeSupersedesQueuedRunning(t *testing.T) {
	l := &memLedger{gate: make(chan struct{}), entered: make(chan string)}
	results := map[string]int{}
	var mu sync.Mutex
	// One write at a time, so the order of the writes is the test's.
	r := New(l, Config{Shards: 1, InFlight: 1}, quiet(), Metrics{Written: func(s string) { mu.Lock(); results[s]++; mu.Unlock() }})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	// "a" RUNNING is taken by the shard, which then waits at the gate;
	// "b" RUNNING queues behind it, and b's outcome arrives before the
	// gate opens.
	r.Running(row("a", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
	if e := <-l.entered; e != "a" {
		t.Fatalf("first write %q", e)
	}
	r.Running(row("b", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
	var wg sync.WaitGroup
	wg.Add(2)
	// A RUNNING of another fence of "b" is a different row: not superseded.
	other := row("b", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING)
	other.FenceToken = 7
	r.Running(other)
	if !r.Final(context.Background(), row("b", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, wg.Done) ||
		!r.Final(context.Background(), row("a", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED), false, wg.Done) {
		t.Fatal("Final refused")
	}
	l.gate <- struct{}{} // a's RUNNING
	for range 3 {
		<-l.entered
		l.gate <- struct{}{}
	}
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []string
	for i, a := range l.rows {
		got = append(got, fmt.Sprintf("%s/%d %s held=%v", a.GetExecutionId(), a.GetFenceToken(), a.GetStatus(), l.held[i]))
	}
	want := []string{
		"a/0 EXECUTION_STATUS_RUNNING held=true",
		"b/7 EXECUTION_STATUS_RUNNING held=true",
		"b/0 EXECUTION_STATUS_SUCCEEDED held=true",
		"a/0 EXECUTION_STATUS_FAILED held=false",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("written:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	mu.Lock()
	defer mu.Unlock()
	if results["superseded"] != 1 || results["ok"] != 4 {
		t.Fatalf("results %v, want 1 superseded and 4 ok", results)
	}
	r.queuedMu.Lock()
	defer r.queuedMu.Unlock()
	if len(r.queued) != 0 {
		t.Fatalf("%d RUNNING records still tracked after their shard took them", len(r.queued))
	}
}

// A shard writes up to InFlight records at once, but never two of one
// execution: the second waits until the group it would have joined is
// written.
func TestShardWritesInFlightButOneExecutionAtATime(t *testing.T) {
	l := &memLedger{gate: make(chan struct{}), entered: make(chan string, 8)}
	r := New(l, Config{Shards: 1, InFlight: 3}, quiet(), Metrics{})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	// Hold the shard on a first write while the rest queue up behind it.
	var wg sync.WaitGroup
	final := func(exec string, attempt int32) {
		a := row(exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED)
		a.Attempt = attempt
		wg.Add(1)
		if !r.Final(context.Background(), a, true, wg.Done) {
			t.Fatal("Final refused")
		}
	}
	final("first", 1)
	if e := <-l.entered; e != "first" {
		t.Fatalf("first write %q", e)
	}
	final("x", 1)
	final("y", 1)
	final("x", 2) // same execution as the group's "x": next group
	final("z", 1)
	l.gate <- struct{}{} // "first"
	// The next group is x/1 and y/1, written together: both enter the
	// ledger before either is let go.
	got := map[string]bool{<-l.entered: true, <-l.entered: true}
	if !got["x"] || !got["y"] {
		t.Fatalf("second group %v, want x and y in flight together", got)
	}
	select {
	case e := <-l.entered:
		t.Fatalf("%q written while x/1 is in flight; x/2 must wait for its group", e)
	default:
	}
	l.gate <- struct{}{}
	l.gate <- struct{}{}
	// Then x/2 with z.
	got = map[string]bool{<-l.entered: true, <-l.entered: true}
	if !got["x"] || !got["z"] {
		t.Fatalf("third group %v, want x and z", got)
	}
	l.gate <- struct{}{}
	l.gate <- struct{}{}
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var order []int32
	for _, a := range l.rows {
		if a.GetExecutionId() == "x" {
			order = append(order, a.GetAttempt())
		}
	}
	if fmt.Sprint(order) != "[1 2]" {
		t.Fatalf("x's attempts written in order %v", order)
	}
}

// A RUNNING record is held back for RunningDelay: an attempt whose outcome
// comes sooner is recorded by the outcome alone, one still running after
// the delay shows as RUNNING first, and a recorder stopped meanwhile
// writes neither.
func TestRunningDelay(t *testing.T) {
	rows := func(l *memLedger) []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []string
		for _, a := range l.rows {
			out = append(out, a.GetExecutionId()+" "+a.GetStatus().String())
		}
		return out
	}
	t.Run("outcome first", func(t *testing.T) {
		l := &memLedger{}
		results := map[string]int{}
		var mu sync.Mutex
		r := New(l, Config{Shards: 1, RunningDelay: time.Hour}, quiet(), Metrics{Written: func(s string) { mu.Lock(); results[s]++; mu.Unlock() }})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.Running(row("fast", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
		done := make(chan struct{})
		r.Final(context.Background(), row("fast", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), true, func() { close(done) })
		<-done
		r.Stop()
		if got := fmt.Sprint(rows(l)); got != "[fast EXECUTION_STATUS_SUCCEEDED]" {
			t.Fatalf("written %s, want the outcome alone", got)
		}
		if results["superseded"] != 1 || len(r.queued) != 0 {
			t.Fatalf("results %v, %d RUNNING records still tracked", results, len(r.queued))
		}
	})
	t.Run("still running after the delay", func(t *testing.T) {
		l := &memLedger{}
		r := New(l, Config{Shards: 1, RunningDelay: time.Millisecond}, quiet(), Metrics{})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.Running(row("slow", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
		deadline := time.Now().Add(10 * time.Second)
		for len(rows(l)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("RUNNING never written after its delay")
			}
			time.Sleep(time.Millisecond)
		}
		done := make(chan struct{})
		r.Final(context.Background(), row("slow", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED), true, func() { close(done) })
		<-done
		r.Stop()
		if got := fmt.Sprint(rows(l)); got != "[slow EXECUTION_STATUS_RUNNING slow EXECUTION_STATUS_FAILED]" {
			t.Fatalf("written %s", got)
		}
	})
	t.Run("stopped while held back", func(t *testing.T) {
		l := &memLedger{}
		r := New(l, Config{Shards: 1, RunningDelay: time.Hour}, quiet(), Metrics{})
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		r.Running(row("cut", sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING))
		r.Stop()
		if got := rows(l); len(got) != 0 || len(r.queued) != 0 {
			t.Fatalf("written %v, %d still tracked", got, len(r.queued))
		}
	})
}
