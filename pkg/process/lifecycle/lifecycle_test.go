package lifecycle

import (
	"context"
	"errors"
	"strings"
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

// loopService is a watched service over a Runner whose loop is given.
type loopService struct {
	Runner
	loop func(ctx context.Context) error
}

func (l *loopService) Start(context.Context) error { return l.Run(l.loop) }

func TestGroupReportsAServiceThatEndsOnItsOwn(t *testing.T) {
	fail := make(chan struct{})
	dies := &loopService{loop: func(ctx context.Context) error {
		select {
		case <-fail:
			return errors.New("serve: listener closed")
		case <-ctx.Done():
			return nil
		}
	}}
	lives := &loopService{loop: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	var g Group
	g.Add(lives, dies)
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.Ended():
		t.Fatalf("Ended before anything ended: %v", err)
	default:
	}
	close(fail)
	err := <-g.Ended()
	if err == nil || !strings.Contains(err.Error(), "serve: listener closed") || !strings.Contains(err.Error(), "loopService") {
		t.Fatalf("Ended = %v, want the service's type and its error", err)
	}
	g.Stop()
	select {
	case <-lives.Done():
	default:
		t.Fatal("Stop left the other service running")
	}
}

func TestGroupStopIsNotAnEnd(t *testing.T) {
	var services []*loopService
	var g Group
	for range 3 {
		s := &loopService{loop: func(ctx context.Context) error { <-ctx.Done(); return nil }}
		services = append(services, s)
		g.Add(s)
	}
	defer func() {
		for i, s := range services {
			select {
			case <-s.Done():
			default:
				t.Errorf("service %d still running after Stop", i)
			}
		}
	}()
	// A plain Service (no Done) is started and stopped but not watched.
	plain := &countingService{}
	g.Add(plain)
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	select {
	case err := <-g.Ended():
		t.Fatalf("a stopped group reported an end: %v", err)
	default:
	}
	if plain.stops != 1 {
		t.Fatalf("plain service stopped %d times", plain.stops)
	}
}

func TestGroupReportsALoopThatReturnsNil(t *testing.T) {
	quits := &loopService{loop: func(context.Context) error { return nil }}
	var g Group
	g.Add(quits)
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if err := <-g.Ended(); err == nil || !strings.Contains(err.Error(), "without an error") {
		t.Fatalf("Ended = %v", err)
	}
}

type countingService struct{ stops int }

func (c *countingService) Start(context.Context) error { return nil }
func (c *countingService) Stop()                       { c.stops++ }
