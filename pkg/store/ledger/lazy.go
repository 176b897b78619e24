package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// ErrUnavailable is wrapped by every request a LazySession gets before
// Cassandra has answered: the caller should put its records elsewhere
// (ledger_pending) or answer "unavailable", not wait.
var ErrUnavailable = errors.New("ledger: cassandra not connected yet")

// LazyConfig says how a LazySession reaches Cassandra.
type LazyConfig struct {
	// Connect is every connection setting.
	Connect ConnectConfig
	// Dial opens a session; Connect (the function) when nil.
	Dial func(ConnectConfig) (Session, error)
	// Prepare runs on each new session before it serves anything (creating
	// the keyspace, say); when it fails the session is closed and the next
	// attempt dials again.
	Prepare func(ctx context.Context, s Session) error
	// Wrap decorates the session once it is open (retries, metrics).
	Wrap func(Session) Session
	// RetryEvery spaces the connection attempts; 5 s when zero.
	RetryEvery time.Duration
	// Clock spaces the attempts; the real clock when nil.
	Clock  clock.Clock
	Logger *slog.Logger
}

// LazySession is a Session that connects in the background, so a service
// that writes or reads the ledger starts while Cassandra is down: until the
// first connection succeeds every request fails at once with
// ErrUnavailable, and Ready says why. Once connected it keeps the session:
// gocql reconnects to the nodes by itself, and a node that goes away later
// shows as failing requests, not as a new dial.
//
// It is a lifecycle.Service: Start starts the connecting goroutine and
// returns at once; Stop ends it and closes the session.
type LazySession struct {
	cfg    LazyConfig
	runner lifecycle.Runner

	mu      sync.RWMutex
	s       Session
	lastErr error
	closed  bool
}

// NewLazySession returns a session that connects once started.
func NewLazySession(cfg LazyConfig) (*LazySession, error) {
	if len(cfg.Connect.Hosts) == 0 {
		return nil, errors.New("ledger: lazy session: Connect.Hosts: no Cassandra hosts")
	}
	if cfg.Dial == nil {
		cfg.Dial = Connect
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &LazySession{cfg: cfg, lastErr: errors.New("not tried yet")}, nil
}

// Start starts connecting; it does not wait for Cassandra.
func (l *LazySession) Start(context.Context) error { return l.runner.Run(l.connect) }

// Stop ends the connecting and closes the session.
func (l *LazySession) Stop() {
	l.runner.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.s != nil {
		l.s.Close()
		l.s = nil
	}
}

// connect tries until a session is open and prepared, logging the first
// failure and every change, not each retry.
func (l *LazySession) connect(ctx context.Context) error {
	warned := false
	for {
		err := l.try(ctx)
		if err == nil {
			if warned {
				l.cfg.Logger.Info("cassandra answers: ledger connected", "hosts", l.cfg.Connect.Hosts)
			}
			return nil
		}
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		if !warned {
			l.cfg.Logger.Warn("cassandra not reachable; starting without the ledger and retrying in the background", "hosts", l.cfg.Connect.Hosts, "err", err, "retry_every", l.cfg.RetryEvery)
			warned = true
		}
		t := l.cfg.Clock.NewTimer(l.cfg.RetryEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

func (l *LazySession) try(ctx context.Context) error {
	s, err := l.cfg.Dial(l.cfg.Connect)
	if err != nil {
		return err
	}
	if l.cfg.Wrap != nil {
		s = l.cfg.Wrap(s)
	}
	if l.cfg.Prepare != nil {
		if err := l.cfg.Prepare(ctx, s); err != nil {
			s.Close()
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		s.Close()
		return nil
	}
	l.s = s
	return nil
}

func (l *LazySession) session() (Session, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.s == nil {
		return nil, fmt.Errorf("%w (%v): %w", ErrUnavailable, l.cfg.Connect.Hosts, l.lastErr)
	}
	return l.s, nil
}

// Ready is nil once a session is open and the node answers a query.
func (l *LazySession) Ready(ctx context.Context) error {
	s, err := l.session()
	if err != nil {
		return err
	}
	it := s.Iter(ctx, Statement{CQL: "SELECT release_version FROM system.local", Idempotent: true})
	var v string
	it.Scan(&v)
	return it.Close()
}

// Exec runs st, or fails with ErrUnavailable before the first connection.
func (l *LazySession) Exec(ctx context.Context, st Statement) error {
	s, err := l.session()
	if err != nil {
		return err
	}
	return s.Exec(ctx, st)
}

// ExecBatch runs b, or fails with ErrUnavailable before the first
// connection.
func (l *LazySession) ExecBatch(ctx context.Context, b Batch) error {
	s, err := l.session()
	if err != nil {
		return err
	}
	return s.ExecBatch(ctx, b)
}

// Iter runs st; before the first connection its Close reports
// ErrUnavailable.
func (l *LazySession) Iter(ctx context.Context, st Statement) Iter {
	s, err := l.session()
	if err != nil {
		return failedIter{err}
	}
	return s.Iter(ctx, st)
}

// AwaitSchemaAgreement waits on the open session, or fails with
// ErrUnavailable.
func (l *LazySession) AwaitSchemaAgreement(ctx context.Context) error {
	s, err := l.session()
	if err != nil {
		return err
	}
	return s.AwaitSchemaAgreement(ctx)
}

// Close is Stop: the session is the LazySession's to close.
func (l *LazySession) Close() { l.Stop() }

type failedIter struct{ err error }

func (failedIter) Scan(...any) bool { return false }
func (f failedIter) Close() error   { return f.err }
