// Package lifecycle is the one contract every long-running piece of Sundial
// follows: the gRPC server, the prefetcher loop, the relay, the Kafka
// consumer, the executor pool and the admin HTTP server.
//
// A Service is started once with Start and stopped with Stop. Start returns
// when the service is running (or failed to start); Stop asks the service to
// drain, blocks until every goroutine it owns has returned, and is safe to
// call more than once, concurrently, or before Start. After Stop a service
// cannot be started again: build a new one.
//
// Most services embed a Runner, which owns exactly one background goroutine
// and implements the idempotency rules, so the service only writes its loop.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Service is a long-running component with one lifecycle.
type Service interface {
	// Start brings the service up. The context bounds start-up work only
	// (dialing, warming caches); the service's own lifetime ends with Stop.
	Start(ctx context.Context) error
	// Stop drains the service and returns once everything it owns has
	// stopped. Idempotent, and a no-op on a service that never started.
	Stop()
}

// ErrStopped is returned by Start on a service that was already stopped.
var ErrStopped = errors.New("lifecycle: service already stopped")

// ErrAlreadyStarted is returned by a second Start.
var ErrAlreadyStarted = errors.New("lifecycle: service already started")

// Runner owns one background goroutine running a loop function. The loop
// gets a context that is cancelled by Stop; Stop then waits for the loop to
// return. The loop's returned error (other than context.Canceled) is kept
// and reported by Err, and Done is closed when the loop has returned, so a
// supervisor can notice a component that died on its own.
type Runner struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

// Run starts loop in the runner's goroutine. It returns ErrAlreadyStarted
// or ErrStopped when the runner is not fresh.
func (r *Runner) Run(loop func(ctx context.Context) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return ErrStopped
	}
	if r.started {
		return ErrAlreadyStarted
	}
	r.started = true
	// The loop's lifetime is the service's, not the caller's start-up
	// context: only Stop ends it.
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		err := loop(ctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
		}
	}()
	return nil
}

// Stop cancels the loop's context and waits for the loop to return.
func (r *Runner) Stop() {
	r.mu.Lock()
	r.stopped = true
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Done is closed once the loop has returned; nil before Run.
func (r *Runner) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// Err is the loop's error once it has returned on its own, if any.
func (r *Runner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Watched is a Service whose work ends only when it is stopped: Done is
// closed when its loop has returned, and Err says why. A group reports a
// watched service that ends on its own (a serve loop that failed, a loop
// that returned an error), so the process can stop and be restarted rather
// than stay up with a dead part. A Runner's owner gets both by forwarding
// the Runner's.
type Watched interface {
	Service
	Done() <-chan struct{}
	Err() error
}

// Group starts services in order and stops them in reverse order, so a
// service is always stopped before the ones it depends on. While they run,
// Ended reports the first watched service that ended on its own.
type Group struct {
	mu       sync.Mutex
	services []Service
	started  []Service

	ended    chan error
	stopping chan struct{}
	watchers sync.WaitGroup
}

// Add appends services to the group; call before Start.
func (g *Group) Add(s ...Service) { g.services = append(g.services, s...) }

// Start starts every service in order. If one fails, the ones already
// started are stopped (in reverse) and the error is returned.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	for _, s := range g.services {
		if err := s.Start(ctx); err != nil {
			g.stopLocked()
			return err
		}
		g.started = append(g.started, s)
		if w, ok := s.(Watched); ok {
			g.watchers.Add(1)
			go g.watch(w) // owned by g: ends at Stop, or when w ends
		}
	}
	return nil
}

func (g *Group) init() {
	if g.ended == nil {
		g.ended = make(chan error, 1)
		g.stopping = make(chan struct{})
	}
}

// Ended receives the error of the first watched service that ended before
// Stop (one error; the others are left for the drain that follows).
func (g *Group) Ended() <-chan error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	return g.ended
}

func (g *Group) watch(w Watched) {
	defer g.watchers.Done()
	select {
	case <-w.Done():
	case <-g.stopping:
		return
	}
	select {
	case <-g.stopping:
		return // ended because the group is stopping
	default:
	}
	err := w.Err()
	if err == nil {
		err = errors.New("returned without an error")
	}
	select {
	case g.ended <- fmt.Errorf("lifecycle: %T ended on its own: %w", w, err):
	default: // another one was first
	}
}

// Stop stops the started services in reverse order.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopLocked()
}

func (g *Group) stopLocked() {
	g.init()
	select {
	case <-g.stopping:
	default:
		close(g.stopping)
	}
	g.watchers.Wait()
	for i := len(g.started) - 1; i >= 0; i-- {
		g.started[i].Stop()
	}
	g.started = nil
}
