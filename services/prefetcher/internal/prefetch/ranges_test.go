package prefetch

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

// taskRecorder is a term task that records the terms it ran for.
type taskRecorder struct {
	mu    sync.Mutex
	terms []int64
}

func (r *taskRecorder) RunTerm(ctx context.Context, term rangeleader.Term) {
	r.mu.Lock()
	r.terms = append(r.terms, term.Epoch)
	r.mu.Unlock()
	<-ctx.Done()
}

func newRanges(t *testing.T, st *scriptStager, tasks ...TermTask) (*Service, chan struct{}, *Metrics) {
	t.Helper()
	wake := make(chan struct{}, 1)
	m := NewMetrics(prometheus.NewRegistry(), "/e")
	r, err := New(Config{Election: "/e", NodeID: "n1", Window: 2 * time.Minute, Tick: time.Second, BatchSize: 2, MaxSlotsPerJob: 100, CatchUpRate: 160},
		16, st, wake, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), m, tasks...)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r, wake, m
}

// runRange runs Work for a range as the coordinator would, in a goroutine
// the test owns; the returned func ends the term and waits.
func runRange(r *Service, term rangeleader.Term) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Work(ctx, term) })
	return func() { cancel(); wg.Wait() }
}

// A range's term stages only its partitions, fenced by its lock's row,
// with its share of the catch-up rate and a cursor kept in that row.
func TestRangeTermStagesItsPartitionsUnderItsOwnFence(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	r, _, _ := newRanges(t, st)
	stop := runRange(r, rangeleader.Term{Range: 3, Epoch: 77, Lock: "/e/ranges/r0003"})
	defer stop()
	o := call(t, st)
	require.Equal(t, &stage.Partitions{Lo: 48, Hi: 63}, o.Partitions)
	require.Equal(t, "/e/ranges/r0003", o.Election)
	require.Equal(t, int64(77), o.Epoch)
	require.True(t, o.KeepCursor)
	require.Equal(t, 10.0, o.CatchUpRate, "160/s over 16 ranges")
}

// A job notification wakes every range this process leads.
func TestNotificationWakesEveryRange(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	r, wake, _ := newRanges(t, st)
	defer runRange(r, rangeleader.Term{Range: 0, Epoch: 1, Lock: "/e/ranges/r0000"})()
	defer runRange(r, rangeleader.Term{Range: 9, Epoch: 2, Lock: "/e/ranges/r0009"})()
	seen := map[string]int{}
	for range 2 { // each term stages at once
		seen[call(t, st).Election]++
	}
	// Both are subscribed once each has staged; notify and expect both
	// again (the fake clock never ticks).
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.subs) == 2
	}, 5*time.Second, time.Millisecond)
	wake <- struct{}{}
	for range 2 {
		seen[call(t, st).Election]++
	}
	require.Equal(t, map[string]int{"/e/ranges/r0000": 2, "/e/ranges/r0009": 2}, seen)
}

// The term tasks (retention) run with range 0's term only.
func TestTermTasksRunWithRangeZeroOnly(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	rec := &taskRecorder{}
	r, _, m := newRanges(t, st, rec)
	stop5 := runRange(r, rangeleader.Term{Range: 5, Epoch: 5, Lock: "/e/ranges/r0005"})
	call(t, st)
	stop0 := runRange(r, rangeleader.Term{Range: 0, Epoch: 9, Lock: "/e/ranges/r0000"})
	call(t, st)
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.terms) == 1
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Leader), "staging for two ranges")
	stop0()
	require.Equal(t, 1.0, testutil.ToFloat64(m.Leader), "still staging for range 5")
	stop5()
	require.Equal(t, 0.0, testutil.ToFloat64(m.Leader))
	require.Equal(t, []int64{9}, rec.terms)
	m.ObserveRanges(2)
	require.Equal(t, 2.0, testutil.ToFloat64(m.RangesLed))
	m.ObserveRanges(0)
	require.Equal(t, 0.0, testutil.ToFloat64(m.RangesLed))
}

func TestNewRefusesAnUnevenSplit(t *testing.T) {
	for _, n := range []int{0, 3, 512} {
		_, err := New(Config{}, n, nil, nil, nil, nil, nil)
		require.ErrorContains(t, err, "ranges", n)
	}
}
