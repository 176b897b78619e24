package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder passes every connection accepted at an address on one side of
// a namespace to the same address on the other side. It runs from Start
// until Close; Cut (connections closed, new ones refused) or Stall (no
// byte passes, nothing is closed) and Resume end and restore it in between.
type Forwarder struct {
	Addr   string
	listen func() (net.Listener, error)
	dial   func(ctx context.Context) (net.Conn, error)

	mu     sync.Mutex
	ln     net.Listener          // nil while cut or closed
	conns  map[net.Conn]net.Conn // accepted → dialled (nil until dialled)
	closed bool
	stats  Stats
	wg     sync.WaitGroup // the accept loop and every connection's copies
	// open is closed while bytes may pass; Stall replaces it with an
	// open channel, Resume closes that. done is closed by Close, so a copy
	// held at a stall ends.
	open chan struct{}
	done chan struct{}
}

// Stats counts what a forwarder did.
type Stats struct {
	Accepted int // connections accepted
	Failed   int // accepted, but the other side could not be dialled
	Severed  int // connections Cut closed
	Cuts     int
	Stalled  int // connections open when a Stall began
	Stalls   int
}

// dialTimeout bounds the dial of the other side for one connection.
const dialTimeout = 5 * time.Second

// Into forwards addr inside the namespace to addr on the host: a process
// in the namespace reaches a host service at its usual address.
func (n *Namespace) Into(addr string) *Forwarder {
	return &Forwarder{Addr: addr,
		listen: func() (net.Listener, error) { return n.Listen(addr) },
		dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}
}

// OutOf forwards addr on the host to addr inside the namespace: the host
// reaches a server in the namespace (an admin port) at its usual address.
func (n *Namespace) OutOf(addr string) *Forwarder {
	return &Forwarder{Addr: addr,
		listen: func() (net.Listener, error) { return net.Listen("tcp", addr) },
		dial:   func(ctx context.Context) (net.Conn, error) { return n.Dial(ctx, addr) }}
}

// Start opens the listener and forwards until Cut or Close.
func (f *Forwarder) Start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return errors.New("netns: forwarder closed")
	case f.ln != nil:
		return nil
	}
	ln, err := f.listen()
	if err != nil {
		return err
	}
	if f.conns == nil {
		f.conns = map[net.Conn]net.Conn{}
		f.open = make(chan struct{})
		close(f.open)
		f.done = make(chan struct{})
	}
	f.ln = ln
	f.wg.Add(1)
	go f.accept(ln) // owned by f: ends when ln is closed (Cut, Close), which then waits for it
	return nil
}

// Resume is Start after a Cut, and lets bytes pass again after a Stall
// (what was held passes first, in order).
func (f *Forwarder) Resume() error {
	f.mu.Lock()
	select {
	case <-f.open:
	default:
		if f.open != nil {
			close(f.open)
		}
	}
	f.mu.Unlock()
	return f.Start()
}

// Stall is a partition that drops packets rather than refusing them: every
// connection stays open and new ones are accepted, but no byte passes
// either way until Resume. A client learns of it only from its own
// timeouts, as when a network drops a host's packets (TCP would retransmit
// what was sent meanwhile, and deliver it if the partition heals in time:
// Resume passes it on). It returns how many connections were open.
func (f *Forwarder) Stall() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil {
		return 0
	}
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default: // already stalled
	}
	f.stats.Stalls++
	f.stats.Stalled += len(f.conns)
	return len(f.conns)
}

// gate returns once bytes may pass, false when the forwarder closed first.
func (f *Forwarder) gate() bool {
	f.mu.Lock()
	open, done := f.open, f.done
	f.mu.Unlock()
	select {
	case <-open:
		return true
	case <-done:
		return false
	}
}

// Cut closes every forwarded connection and the listener, so new
// connections are refused (the port has no listener), until Resume. It
// returns how many connections it closed.
func (f *Forwarder) Cut() int {
	f.mu.Lock()
	n := f.stopLocked()
	f.stats.Cuts++
	f.stats.Severed += n
	f.mu.Unlock()
	return n
}

// Close ends the forwarder for good and waits for its goroutines.
func (f *Forwarder) Close() {
	f.mu.Lock()
	if !f.closed && f.done != nil {
		close(f.done)
	}
	f.closed = true
	f.stopLocked()
	f.mu.Unlock()
	f.wg.Wait()
}

// Stats is what the forwarder did so far.
func (f *Forwarder) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *Forwarder) stopLocked() int {
	if f.ln != nil {
		_ = f.ln.Close()
		f.ln = nil
	}
	n := len(f.conns)
	for c, up := range f.conns {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
	}
	clear(f.conns)
	return n
}

func (f *Forwarder) accept(ln net.Listener) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by Cut or Close
		}
		if !f.track(ln, c) {
			_ = c.Close()
			return
		}
		f.wg.Add(1)
		go f.pipe(c) // owned by f: ends when either side closes; Cut and Close close both
	}
}

// track registers c unless ln was closed meanwhile (a Cut between Accept
// and here must not let c through).
func (f *Forwarder) track(ln net.Listener, c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != ln {
		return false
	}
	f.conns[c] = nil
	f.stats.Accepted++
	return true
}

func (f *Forwarder) pipe(c net.Conn) {
	defer f.wg.Done()
	if !f.gate() { // a connection made during a stall waits for its end, as a SYN is retried
		_ = c.Close()
		f.forget(c)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := f.dial(ctx)
	cancel()
	f.mu.Lock()
	_, live := f.conns[c]
	switch {
	case err != nil:
		f.stats.Failed++
	case live:
		f.conns[c] = up
	}
	f.mu.Unlock()
	if err != nil || !live {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		f.forget(c)
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, gated{src, f})
		done <- struct{}{}
	}
	go cp(up, c) // owned by pipe, which waits for both copies below
	go cp(c, up)
	<-done
	// One side ended: end the other too, as the protocols forwarded here
	// (Redis, Kafka, Postgres, CQL, HTTP) never half-close.
	_ = c.Close()
	_ = up.Close()
	<-done
	f.forget(c)
}

// gated is a connection's read side that holds what it read at a stall
// until Resume: the bytes were taken off the socket (as a dropped packet's
// sender has sent it) but reach nobody until the partition heals.
type gated struct {
	r io.Reader
	f *Forwarder
}

func (g gated) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if n > 0 && !g.f.gate() {
		return 0, net.ErrClosed
	}
	return n, err
}

func (f *Forwarder) forget(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}
