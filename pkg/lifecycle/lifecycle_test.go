package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunnerStopCancelsAndWaits(t *testing.T) {
	var r Runner
	exited := false
	if err := r.Run(func(ctx context.Context) error {
		<-ctx.Done()
		exited = true
		return ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if !exited {
		t.Fatal("Stop returned before the loop exited")
	}
	if r.Err() != nil {
		t.Fatalf("cancellation reported as error: %v", r.Err())
	}
	r.Stop() // idempotent
}

func TestRunnerRules(t *testing.T) {
	var r Runner
	r.Stop() // before start: no-op
	if err := r.Run(func(context.Context) error { return nil }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Run after Stop = %v, want ErrStopped", err)
	}

	var r2 Runner
	loop := func(ctx context.Context) error { <-ctx.Done(); return nil }
	if err := r2.Run(loop); err != nil {
		t.Fatal(err)
	}
	if err := r2.Run(loop); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Run = %v, want ErrAlreadyStarted", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); r2.Stop() }()
	}
	wg.Wait()
}

func TestRunnerReportsLoopFailure(t *testing.T) {
	var r Runner
	boom := errors.New("boom")
	if err := r.Run(func(context.Context) error { return boom }); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if !errors.Is(r.Err(), boom) {
		t.Fatalf("Err = %v, want boom", r.Err())
	}
	r.Stop()
}

type recorder struct {
	name   string
	log    *[]string
	failOn bool
}

func (s recorder) Start(context.Context) error {
	if s.failOn {
		return errors.New(s.name + " failed")
	}
	*s.log = append(*s.log, "start "+s.name)
	return nil
}
func (s recorder) Stop() { *s.log = append(*s.log, "stop "+s.name) }

func TestGroupOrder(t *testing.T) {
	var log []string
	var g Group
	g.Add(recorder{"a", &log, false}, recorder{"b", &log, false})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	want := []string{"start a", "start b", "stop b", "stop a"}
	if len(log) != len(want) {
		t.Fatalf("log = %v", log)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("log = %v, want %v", log, want)
		}
	}
}

func TestGroupUnwindsOnFailedStart(t *testing.T) {
	var log []string
	var g Group
	g.Add(recorder{"a", &log, false}, recorder{"b", &log, false}, recorder{"c", &log, true})
	if err := g.Start(context.Background()); err == nil {
		t.Fatal("start succeeded")
	}
	want := []string{"start a", "start b", "stop b", "stop a"}
	if len(log) != len(want) {
		t.Fatalf("log = %v, want %v", log, want)
	}
	for i := range want {
		if log[i] != want[i] {
			t.Fatalf("log = %v, want %v", log, want)
		}
	}
	g.Stop() // nothing left to stop
	if len(log) != len(want) {
		t.Fatalf("Stop after failed start stopped again: %v", log)
	}
}
