package ledger

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// okSession answers every request; closed counts Close calls.
type okSession struct {
	Session
	closed atomic.Int32
}

func (s *okSession) ExecBatch(context.Context, Batch) error     { return nil }
func (s *okSession) Iter(context.Context, Statement) Iter       { return failedIter{nil} }
func (s *okSession) Exec(context.Context, Statement) error      { return nil }
func (s *okSession) AwaitSchemaAgreement(context.Context) error { return nil }
func (s *okSession) Close()                                     { s.closed.Add(1) }

// Before Cassandra answers, a LazySession fails every request at once with
// ErrUnavailable and is not ready; it keeps dialling every RetryEvery,
// prepares the session it gets, and serves through it from then on.
func TestLazySessionStartsWithoutCassandraAndConnectsLater(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	real := &okSession{}
	var dials, prepared atomic.Int32
	l, err := NewLazySession(LazyConfig{
		Connect: ConnectConfig{Hosts: []string{"127.0.0.1:1"}},
		Dial: func(ConnectConfig) (Session, error) {
			if dials.Add(1) < 3 {
				return nil, errors.New("connection refused")
			}
			return real, nil
		},
		Prepare:    func(context.Context, Session) error { prepared.Add(1); return nil },
		RetryEvery: 5 * time.Second, Clock: fc,
	})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	ctx := context.Background()

	require.Eventually(t, func() bool { return dials.Load() == 1 }, 5*time.Second, time.Millisecond)
	err = l.ExecBatch(ctx, Batch{})
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "connection refused")
	require.ErrorIs(t, l.Iter(ctx, Statement{}).Close(), ErrUnavailable)
	require.ErrorIs(t, l.Ready(ctx), ErrUnavailable)

	// Two more tries, one per RetryEvery: the third dial answers.
	require.Eventually(t, func() bool {
		fc.Advance(time.Second)
		return l.Ready(ctx) == nil
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, int32(3), dials.Load())
	require.Equal(t, int32(1), prepared.Load())
	require.NoError(t, l.ExecBatch(ctx, Batch{}))

	l.Stop()
	l.Close() // idempotent
	require.Equal(t, int32(1), real.closed.Load())
	require.ErrorIs(t, l.Exec(ctx, Statement{}), ErrUnavailable)
}

// A session whose preparation fails is closed and dialled again.
func TestLazySessionRedialsWhenPrepareFails(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	first, second := &okSession{}, &okSession{}
	var n atomic.Int32
	l, err := NewLazySession(LazyConfig{
		Connect: ConnectConfig{Hosts: []string{"h"}},
		Dial: func(ConnectConfig) (Session, error) {
			if n.Add(1) == 1 {
				return first, nil
			}
			return second, nil
		},
		Prepare: func(_ context.Context, s Session) error {
			if s == first {
				return errors.New("keyspace: timed out")
			}
			return nil
		},
		Clock: fc,
	})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	defer l.Stop()
	require.Eventually(t, func() bool {
		fc.Advance(time.Second)
		return l.Ready(context.Background()) == nil
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, int32(1), first.closed.Load())
	require.Equal(t, int32(0), second.closed.Load())
}

func TestLazySessionNeedsHosts(t *testing.T) {
	_, err := NewLazySession(LazyConfig{})
	require.ErrorContains(t, err, "Connect.Hosts")
}
