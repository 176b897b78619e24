//go:build integration

package rangeleader

import (
	"errors"
	"net"
	"sync"
	"time"
)

// faultDialer dials real ZooKeeper connections and can cut them, the way a
// network would, for one candidate only:
//
//   - Partition closes every connection and refuses new ones: the client
//     sees the connection drop at once (like a RST) and cannot reconnect.
//   - Blackhole keeps connections open but silently discards everything
//     both ways and ignores the client's read deadlines, so the client never
//     notices: only the elector's own trust window can end the term.
//
// Heal ends either fault (closing blackholed connections so the client
// reconnects). The server hears nothing during a fault, so the session
// expires on its own clock exactly as after a real partition.
type faultDialer struct {
	mu          sync.Mutex
	partitioned bool
	blackholed  bool
	conns       []*faultConn
}

var errPartitioned = errors.New("faultdial: partitioned")

func (d *faultDialer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.partitioned || d.blackholed {
		return nil, errPartitioned
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, d: d, closed: make(chan struct{})}
	d.conns = append(d.conns, fc)
	return fc, nil
}

func (d *faultDialer) Partition() {
	d.mu.Lock()
	d.partitioned = true
	conns := d.conns
	d.conns = nil
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (d *faultDialer) Blackhole() {
	d.mu.Lock()
	d.blackholed = true
	d.mu.Unlock()
}

func (d *faultDialer) Heal() {
	d.mu.Lock()
	wasBlackholed := d.blackholed
	d.partitioned, d.blackholed = false, false
	conns := d.conns
	if wasBlackholed {
		d.conns = nil
	}
	d.mu.Unlock()
	if wasBlackholed {
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

func (d *faultDialer) isBlackholed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.blackholed
}

type faultConn struct {
	net.Conn
	d         *faultDialer
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *faultConn) Read(b []byte) (int, error) {
	for {
		if c.d.isBlackholed() {
			// Hold the reader until the connection is closed (Heal or
			// shutdown), whatever deadline the client set.
			<-c.closed
			return 0, net.ErrClosed
		}
		n, err := c.Conn.Read(b)
		if c.d.isBlackholed() {
			continue // the bytes were "lost on the wire"
		}
		return n, err
	}
}

func (c *faultConn) Write(b []byte) (int, error) {
	if c.d.isBlackholed() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
