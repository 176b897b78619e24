package ledger

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/gocql/gocql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// RetryPolicy bounds the Retrying decorator.
type RetryPolicy struct {
	// Attempts is the total number of tries, the first included.
	Attempts int
	// Backoff is the wait before the second try; it doubles up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
	Clock      clock.Clock
}

// DefaultRetryPolicy suits a worker recording an attempt: a node restart or
// a GC pause is ridden out in well under a second, and a longer outage is the
// caller's to handle.
var DefaultRetryPolicy = RetryPolicy{Attempts: 4, Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Clock: clock.Real{}}

// Retrying retries idempotent writes that failed with a transient error
// (timeouts, unavailable replicas, lost connections). Ledger writes are
// idempotent by construction — fixed key, fixed write timestamp, same
// values — so a write that timed out after being applied is applied again as
// the same cells. Reads are not retried here: an Iter reports its error only
// at Close, after rows may have been consumed.
func Retrying(s Session, p RetryPolicy) Session {
	if p.Attempts < 1 {
		p.Attempts = 1
	}
	if p.Clock == nil {
		p.Clock = clock.Real{}
	}
	return retrying{Session: s, p: p}
}

type retrying struct {
	Session
	p RetryPolicy
}

func (r retrying) Exec(ctx context.Context, st Statement) error {
	return r.do(ctx, st.Idempotent, func() error { return r.Session.Exec(ctx, st) })
}

func (r retrying) ExecBatch(ctx context.Context, b Batch) error {
	return r.do(ctx, b.Idempotent, func() error { return r.Session.ExecBatch(ctx, b) })
}

func (r retrying) do(ctx context.Context, idempotent bool, f func() error) error {
	wait := r.p.Backoff
	for try := 1; ; try++ {
		err := f()
		if err == nil || !idempotent || try >= r.p.Attempts || !Transient(err) || ctx.Err() != nil {
			return err
		}
		t := r.p.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C():
		}
		wait = min(2*wait, r.p.MaxBackoff)
	}
}

// Transient reports whether err is worth retrying: the request may not have
// reached enough replicas, but nothing says it is wrong. A connection that
// broke under the request (a node killed or restarted: reset, broken pipe,
// closed mid-frame) is one: the driver sends the retry over another
// connection, to another replica when the node is gone.
func Transient(err error) bool {
	var (
		wt *gocql.RequestErrWriteTimeout
		rt *gocql.RequestErrReadTimeout
		un *gocql.RequestErrUnavailable
		re gocql.RequestError
	)
	switch {
	case errors.As(err, &wt), errors.As(err, &rt), errors.As(err, &un):
		return true
	case errors.Is(err, gocql.ErrTimeoutNoResponse), errors.Is(err, gocql.ErrConnectionClosed),
		errors.Is(err, gocql.ErrNoConnections), errors.Is(err, gocql.ErrTooManyTimeouts),
		errors.Is(err, gocql.ErrNoStreams):
		return true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.As(err, &re):
		return re.Code() == gocql.ErrCodeOverloaded || re.Code() == gocql.ErrCodeBootstrapping
	}
	return false
}

// Instrumented counts and times every request through s, by operation
// (exec, batch, read) and outcome (ok, error). It panics if reg holds a
// different collector under the same name.
func Instrumented(s Session, reg prometheus.Registerer) Session {
	m := &metrics{
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sundial_ledger_request_duration_seconds",
			Help:    "Duration of ledger requests to Cassandra, by operation and outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op", "outcome"}),
	}
	// Several sessions (a writer's and a reader's) may share a registry:
	// they share the series too.
	if err := reg.Register(m.dur); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
		m.dur = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	return instrumented{Session: s, m: m}
}

type metrics struct{ dur *prometheus.HistogramVec }

type instrumented struct {
	Session
	m *metrics
}

func (i instrumented) observe(op string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	i.m.dur.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
}

func (i instrumented) Exec(ctx context.Context, st Statement) error {
	start := time.Now()
	err := i.Session.Exec(ctx, st)
	i.observe("exec", start, err)
	return err
}

func (i instrumented) ExecBatch(ctx context.Context, b Batch) error {
	start := time.Now()
	err := i.Session.ExecBatch(ctx, b)
	i.observe("batch", start, err)
	return err
}

func (i instrumented) Iter(ctx context.Context, st Statement) Iter {
	// The query runs inside Iter (gocql executes it there): time it from
	// before the call to Close, or reads would show only their paging.
	start := time.Now()
	return &timedIter{Iter: i.Session.Iter(ctx, st), start: start, done: i.observe}
}

type timedIter struct {
	Iter
	start time.Time
	done  func(op string, start time.Time, err error)
}

func (t *timedIter) Close() error {
	err := t.Iter.Close()
	t.done("read", t.start, err)
	return err
}
