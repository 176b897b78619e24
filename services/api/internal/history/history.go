// Package history gives the api its view of the execution ledger without
// making Cassandra a start-up dependency: jobs can be created, changed and
// triggered while the ledger is down, and history calls answer Unavailable
// until it is back. The session is opened on first use and reopened after a
// failed attempt, at most once per RetryEvery.
package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ErrUnavailable wraps the reason the ledger cannot be reached.
var ErrUnavailable = errors.New("history: ledger unavailable")

// Config says how to reach the ledger.
type Config struct {
	Hosts    []string
	Keyspace string
	// Session is every other connection setting (TLS, the authenticator,
	// timeouts), used for each attempt with Hosts as its hosts.
	Session  ledger.ConnectConfig
	Registry prometheus.Registerer
	Clock    clock.Clock
	// RetryEvery spaces reconnection attempts; 5 s by default.
	RetryEvery time.Duration
	// Connect opens the session; ledger.Connect by default (tests replace
	// it to count attempts or fail).
	Connect func(ledger.ConnectConfig) (ledger.Session, error)
}

// Lazy is a ledger reader that connects on first use. It implements the
// server's ExecutionReader and lifecycle.Service (Stop closes the session).
type Lazy struct {
	cfg Config

	mu        sync.Mutex
	session   ledger.Session
	reader    *ledger.Reader
	lastTry   time.Time
	lastErr   error
	closed    bool
	connectMu sync.Mutex // one dial at a time, outside mu
}

// NewLazy returns a reader that has not connected yet.
func NewLazy(cfg Config) (*Lazy, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("history: no Cassandra hosts")
	}
	if err := ledger.ValidKeyspace(cfg.Keyspace); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = 5 * time.Second
	}
	if cfg.Connect == nil {
		cfg.Connect = ledger.Connect
	}
	return &Lazy{cfg: cfg}, nil
}

func (l *Lazy) get() (*ledger.Reader, error) {
	l.mu.Lock()
	if l.reader != nil || l.closed {
		r := l.reader
		l.mu.Unlock()
		if r == nil {
			return nil, fmt.Errorf("%w: stopped", ErrUnavailable)
		}
		return r, nil
	}
	l.mu.Unlock()

	l.connectMu.Lock()
	defer l.connectMu.Unlock()
	l.mu.Lock()
	if l.reader != nil {
		r := l.reader
		l.mu.Unlock()
		return r, nil
	}
	now := l.cfg.Clock.Now()
	if !l.lastTry.IsZero() && now.Sub(l.lastTry) < l.cfg.RetryEvery {
		err := l.lastErr
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	l.lastTry = now
	l.mu.Unlock()

	cc := l.cfg.Session
	cc.Hosts = l.cfg.Hosts
	s, err := l.cfg.Connect(cc)

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.lastErr = err
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if l.closed {
		s.Close()
		return nil, fmt.Errorf("%w: stopped", ErrUnavailable)
	}
	if l.cfg.Registry != nil {
		s = ledger.Instrumented(s, l.cfg.Registry)
	}
	l.session = s
	l.reader = ledger.NewReader(s, l.cfg.Keyspace, ledger.WithClock(l.cfg.Clock))
	return l.reader, nil
}

// ListByJob reads a page of a job's attempts.
func (l *Lazy) ListByJob(ctx context.Context, jobID string, pageSize int, pageToken string) ([]*sundialv1.ExecutionAttempt, string, error) {
	r, err := l.get()
	if err != nil {
		return nil, "", err
	}
	return r.ListByJob(ctx, jobID, pageSize, pageToken)
}

// GetExecution reads every attempt of one execution.
func (l *Lazy) GetExecution(ctx context.Context, executionID string) ([]*sundialv1.ExecutionAttempt, error) {
	r, err := l.get()
	if err != nil {
		return nil, err
	}
	return r.GetExecution(ctx, executionID)
}

// ListByTenant reads a page of a tenant's attempts across its jobs.
func (l *Lazy) ListByTenant(ctx context.Context, q ledger.TenantQuery) ([]*sundialv1.ExecutionAttempt, string, error) {
	r, err := l.get()
	if err != nil {
		return nil, "", err
	}
	return r.ListByTenant(ctx, q)
}

// Start does nothing: the session opens on first use.
func (l *Lazy) Start(context.Context) error { return nil }

// Stop closes the session, if one was opened.
func (l *Lazy) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.session != nil {
		l.session.Close()
		l.session, l.reader = nil, nil
	}
}
