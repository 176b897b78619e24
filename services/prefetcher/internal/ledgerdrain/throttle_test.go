package ledgerdrain

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

// groupLedger records the size of each RecordMany call and fails them all
// with fail.
type groupLedger struct {
	GroupLedger
	mu    sync.Mutex
	calls []int
	fail  error
}

func (g *groupLedger) RecordMany(_ context.Context, recs []ledger.Rec) []error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, len(recs))
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = g.fail
	}
	return errs
}

func throttled(t *testing.T, tc ledger.ThrottleConfig) (*Drainer, *ledger.Throttle) {
	t.Helper()
	th, err := ledger.NewThrottle(tc)
	require.NoError(t, err)
	d, err := New(Config{Interval: time.Second, BatchSize: 500, Concurrency: 16, BatchTimeout: 10 * time.Second, Throttle: th},
		nil, nil, slog.New(slog.DiscardHandler), clock.Real{}, NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	return d, th
}

func pendingRows(n int) []ledgerpending.Pending {
	rows := make([]ledgerpending.Pending, n)
	for i := range rows {
		rows[i].ID = int64(i)
	}
	return rows
}

// A batch is written in turns no larger than the throttle's burst, at the
// throttle's rate: 150 rows at 200 a second with a burst of 50 take at
// least half a second.
func TestDrainWritesAtTheThrottlesRate(t *testing.T) {
	d, _ := throttled(t, ledger.ThrottleConfig{Initial: 200, Min: 200, Max: 200, Burst: 50, Slow: time.Second, Increase: 1, Decrease: 0.5, Interval: time.Second})
	l := &groupLedger{}
	t0 := time.Now()
	dropped, err := d.writeMany(context.Background(), l, pendingRows(150))
	require.NoError(t, err)
	require.Zero(t, dropped)
	require.GreaterOrEqual(t, time.Since(t0), 450*time.Millisecond, "150 rows at 200/s beyond a burst of 50")
	require.Equal(t, []int{50, 50, 50}, l.calls)
}

// A failing ledger cuts the rate (and the next claim with it), and the
// batch stops at the first failed turn, to be retried whole.
func TestDrainBacksOffAFailingLedger(t *testing.T) {
	d, th := throttled(t, ledger.ThrottleConfig{Initial: 1000, Min: 10, Max: 1000, Burst: 100, Slow: time.Second, Increase: 1, Decrease: 0.5, Interval: time.Second})
	require.Equal(t, 500, d.claimSize(), "1000/s for half of 10 s: the whole batch size")
	l := &groupLedger{fail: errors.New("WriteTimeout")}
	_, err := d.writeMany(context.Background(), l, pendingRows(300))
	require.ErrorContains(t, err, "WriteTimeout")
	require.Equal(t, []int{100}, l.calls, "no turn after the failed one")
	require.Equal(t, 500.0, th.Rate(), "halved")
	require.Zero(t, th.InFlight())

	// A refusal of the record itself is not the ledger failing.
	l.fail = ledger.ErrInvalidAttempt
	dropped, err := d.writeMany(context.Background(), l, pendingRows(100))
	require.NoError(t, err)
	require.Equal(t, 100, dropped)
	require.Equal(t, 500.0, th.Rate())
}

// The claim shrinks to what the throttle lets through in half of the
// batch timeout, so a slow ledger makes small batches, not rolled-back
// ones.
func TestDrainClaimsWhatTheThrottleAllows(t *testing.T) {
	d, _ := throttled(t, ledger.ThrottleConfig{Initial: 20, Min: 10, Max: 1000, Burst: 100, Slow: time.Second, Increase: 1, Decrease: 0.5, Interval: time.Second})
	require.Equal(t, 100, d.claimSize(), "20/s for 5 s")
}
