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
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/clock"
	"github.com/sundialhq/sundial/pkg/leader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type termChan chan leader.Term

func (c termChan) Terms() <-chan leader.Term { return c }

// scriptStager returns scripted results and reports every call.
type scriptStager struct {
	mu     sync.Mutex
	script []stageReply
	calls  chan stage.Options
}

type stageReply struct {
	res stage.Result
	err error
}

func (s *scriptStager) StageBatch(ctx context.Context, o stage.Options) (stage.Result, error) {
	s.mu.Lock()
	var r stageReply
	if len(s.script) > 0 {
		r, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()
	s.calls <- o
	return r.res, r.err
}

func newLoop(t *testing.T, st *scriptStager) (*Service, termChan, *clock.Fake, *Metrics, chan struct{}) {
	t.Helper()
	terms := make(termChan, 1)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m := NewMetrics(prometheus.NewRegistry())
	wake := make(chan struct{}, 1)
	cfg := Config{Election: "/e", NodeID: "n1", Window: 2 * time.Minute, Tick: time.Second, BatchSize: 2, MaxSlotsPerJob: 100}
	s, err := New(cfg, terms, st, wake, slog.New(slog.NewTextHandler(io.Discard, nil)), clk, m)
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return s, terms, clk, m, wake
}

func call(t *testing.T, st *scriptStager) stage.Options {
	t.Helper()
	select {
	case o := <-st.calls:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no staging call")
		return stage.Options{}
	}
}

// tickUntilCall moves the fake clock a tick at a time until the loop
// stages (the loop resets its timer asynchronously, so one Advance could
// land before the reset).
func tickUntilCall(t *testing.T, clk *clock.Fake, st *scriptStager) stage.Options {
	t.Helper()
	var o stage.Options
	require.Eventually(t, func() bool {
		clk.Advance(time.Second)
		select {
		case o = <-st.calls:
			return true
		default:
			return false
		}
	}, 10*time.Second, time.Millisecond)
	return o
}

func noCall(t *testing.T, st *scriptStager) {
	t.Helper()
	select {
	case o := <-st.calls:
		t.Fatalf("unexpected staging call %+v", o)
	default:
	}
}

func TestNewTermStagesAtOnceAndDrainsFullBatches(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{
		{res: stage.Result{Claimed: 2, Staged: 5}}, // full batch: go again
		{res: stage.Result{Claimed: 2, Staged: 3}}, // full again
		{res: stage.Result{Claimed: 1, Staged: 1}}, // the end
	}}
	_, terms, clk, m, _ := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	defer end(nil)
	terms <- leader.Term{Epoch: 42, Ctx: ctx}

	for range 3 {
		o := call(t, st)
		require.Equal(t, int64(42), o.Epoch)
		require.Equal(t, "/e", o.Election)
		require.Equal(t, "n1", o.Leader)
		require.Equal(t, 2, o.Limit)
	}
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Leader) == 1 }, 5*time.Second, time.Millisecond)
	noCall(t, st)

	// The next pass waits for the tick.
	tickUntilCall(t, clk, st)
	require.Equal(t, 9.0, testutil.ToFloat64(m.SlotsStaged.WithLabelValues("on_time")))
	require.Equal(t, 42.0, testutil.ToFloat64(m.Epoch))
}

func TestWakeUpRunsAPassBeforeTheTick(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	_, terms, _, _, wake := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	defer end(nil)
	terms <- leader.Term{Epoch: 1, Ctx: ctx}
	call(t, st)
	wake <- struct{}{}
	call(t, st)
}

func TestFencedTermStopsStaging(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{{err: stage.ErrFenced}}}
	_, terms, clk, m, _ := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	terms <- leader.Term{Epoch: 3, Ctx: ctx}
	call(t, st)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Fenced) == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 0.0, testutil.ToFloat64(m.Leader))
	clk.Advance(time.Minute)
	noCall(t, st)

	// The elector ends the term and later hands out a new one.
	end(leader.ErrNodeLost)
	ctx2, end2 := context.WithCancelCause(context.Background())
	defer end2(nil)
	terms <- leader.Term{Epoch: 4, Ctx: ctx2}
	require.Equal(t, int64(4), call(t, st).Epoch)
}

func TestEndedTermStopsTheLoopsWork(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	_, terms, clk, m, _ := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	terms <- leader.Term{Epoch: 1, Ctx: ctx}
	call(t, st)
	end(leader.ErrConnectionLost)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Leader) == 0 }, 5*time.Second, time.Millisecond)
	clk.Advance(time.Minute)
	noCall(t, st)
}

func TestStaleTermIsIgnored(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	_, terms, clk, _, _ := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	end(leader.ErrConnectionLost)
	terms <- leader.Term{Epoch: 1, Ctx: ctx}
	clk.Advance(time.Minute)
	noCall(t, st)
}

func TestConfigValidateNamesFlags(t *testing.T) {
	err := Config{}.Validate()
	require.Error(t, err)
	for _, f := range []string{"election-path", "node-id", "window", "tick", "batch-size", "max-slots-per-job"} {
		require.ErrorContains(t, err, f+":")
	}
}
