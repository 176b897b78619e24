package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type memLedger struct {
	mu   sync.Mutex
	rows []*sundialv1.ExecutionAttempt
	// failures: how many times to fail before succeeding, per execution.
	failures map[string]int
	err      error
}

func (l *memLedger) Record(_ context.Context, a *sundialv1.ExecutionAttempt) error {
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
		if !r.Final(context.Background(), row(exec, sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), wg.Done) {
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
	if len(seen) != 20 || results["retry"] != 2 || results["ok"] != 40 {
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
		r.Final(context.Background(), row("e", sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED), func() { close(done) })
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
	r.Final(context.Background(), row("e", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), func() { called = true })
	r.Stop()
	if called {
		t.Fatal("done called for a record never written")
	}
	if r.Final(context.Background(), row("e2", sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED), func() {}) {
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
