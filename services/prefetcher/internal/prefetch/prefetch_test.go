package prefetch

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/rangeleader"
	"github.com/sundialhq/sundial/services/prefetcher/internal/stage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lead runs Work for one term as the coordinator would, in a goroutine the
// test owns; the returned func ends the term (with cause) and waits for its
// work, as the coordinator does before it gives a lock up.
func lead(t *testing.T, s *Service, term rangeleader.Term) (end func(cause error)) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Work(ctx, term)
	}()
	end = func(cause error) {
		cancel(cause)
		<-done
	}
	t.Cleanup(func() { end(rangeleader.ErrStopped) })
	return end
}

// one is a term of the single range of a one-range loop (--ranges 1).
func one(epoch int64) rangeleader.Term {
	return rangeleader.Term{Range: 0, Epoch: epoch, Lock: "/e/ranges/r0000"}
}

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

// newLoop is a one-range loop (--ranges 1: a single leader).
func newLoop(t *testing.T, st *scriptStager) (*Service, *clock.Fake, *Metrics, chan struct{}) {
	t.Helper()
	return newLoopWith(t, st, func(*Config) {})
}

// newLoopWith is newLoop with the config adjusted before the loop starts.
func newLoopWith(t *testing.T, st *scriptStager, adjust func(*Config), tasks ...TermTask) (*Service, *clock.Fake, *Metrics, chan struct{}) {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m := NewMetrics(prometheus.NewRegistry(), "/test-election")
	wake := make(chan struct{}, 1)
	cfg := Config{Election: "/e", NodeID: "n1", Window: 2 * time.Minute, Tick: time.Second, BatchSize: 2, MaxSlotsPerJob: 100}
	adjust(&cfg)
	s, err := New(cfg, 1, st, wake, slog.New(slog.NewTextHandler(io.Discard, nil)), clk, m, tasks...)
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	return s, clk, m, wake
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
	s, clk, m, _ := newLoop(t, st)
	lead(t, s, one(42))

	for range 3 {
		o := call(t, st)
		require.Equal(t, int64(42), o.Epoch)
		require.Equal(t, "/e/ranges/r0000", o.Election, "fenced by its range's row")
		require.Equal(t, &stage.Partitions{Lo: 0, Hi: 255}, o.Partitions, "one range is every partition")
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
	s, _, _, wake := newLoop(t, st)
	lead(t, s, one(1))
	call(t, st)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.subs) == 1
	}, 5*time.Second, time.Millisecond)
	wake <- struct{}{}
	call(t, st)
}

func TestFencedTermStopsStaging(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{{err: stage.ErrFenced}}}
	s, clk, m, _ := newLoop(t, st)
	end := lead(t, s, one(3))
	call(t, st)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Fenced) == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Leader) == 0 }, 5*time.Second, time.Millisecond)
	clk.Advance(time.Minute)
	noCall(t, st)

	// The coordinator ends the term and later hands out a new one.
	end(rangeleader.ErrLockLost)
	lead(t, s, one(4))
	require.Equal(t, int64(4), call(t, st).Epoch)
}

func TestEndedTermStopsTheLoopsWork(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	s, clk, m, _ := newLoop(t, st)
	end := lead(t, s, one(1))
	call(t, st)
	end(rangeleader.ErrConnectionLost)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Leader) == 0 }, 5*time.Second, time.Millisecond)
	clk.Advance(time.Minute)
	noCall(t, st)
}

func TestStaleTermIsIgnored(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10)}
	s, clk, m, _ := newLoop(t, st)
	ctx, end := context.WithCancelCause(context.Background())
	end(rangeleader.ErrConnectionLost)
	s.Work(ctx, one(1)) // returns at once
	clk.Advance(time.Minute)
	noCall(t, st)
	require.Equal(t, 0.0, testutil.ToFloat64(m.Leader))
}

func TestConfigValidateNamesFlags(t *testing.T) {
	err := Config{}.Validate()
	require.Error(t, err)
	for _, f := range []string{"election-path", "node-id", "window", "tick", "batch-size", "max-slots-per-job"} {
		require.ErrorContains(t, err, f+":")
	}
}

// The catch-up release cursor one batch returns is where the next batch,
// and the next pass, continue; a new term starts from what its range's row
// keeps (KeepCursor: the stager reads it), not from the old term's memory.
func TestCatchUpCursorCarriesAcrossBatchesAndPasses(t *testing.T) {
	c1 := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	c2 := c1.Add(5 * time.Second)
	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{
		{res: stage.Result{Claimed: 2, Staged: 2, CatchUp: 2, CatchUpCursor: c1}}, // full batch
		{res: stage.Result{Claimed: 1, Staged: 1, CatchUp: 1, CatchUpCursor: c2}},
		{res: stage.Result{Claimed: 0, CatchUpCursor: c2}},
	}}
	s, clk, _, _ := newLoop(t, st)
	end := lead(t, s, one(1))
	o := call(t, st)
	require.True(t, o.CatchUpCursor.IsZero())
	require.True(t, o.KeepCursor, "the cursor is kept in the range's row")
	require.Equal(t, c1, call(t, st).CatchUpCursor)
	require.Equal(t, c2, tickUntilCall(t, clk, st).CatchUpCursor)
	end(rangeleader.ErrConnectionLost)

	lead(t, s, one(2))
	o = call(t, st)
	for o.Epoch == 1 { // a tick of the old term may have raced its end
		o = call(t, st)
	}
	require.Equal(t, int64(2), o.Epoch)
	require.True(t, o.CatchUpCursor.IsZero(), "a new term takes the cursor from its range's row, not the old term's")
	require.True(t, o.KeepCursor)
}

// taskProbe reports when a term task starts and when it returns.
type taskProbe struct{ started, stopped chan int64 }

func (p taskProbe) RunTerm(ctx context.Context, term rangeleader.Term) {
	p.started <- term.Epoch
	<-ctx.Done()
	p.stopped <- term.Epoch
}

func recv(t *testing.T, c chan int64) int64 {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return 0
	}
}

// Term tasks run while range 0's term lasts and stop with it, or as soon
// as the term is fenced; the end of a term's work waits for them.
func TestTermTasksFollowTheTerm(t *testing.T) {
	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{{}, {err: stage.ErrFenced}}}
	probe := taskProbe{started: make(chan int64, 1), stopped: make(chan int64, 1)}
	s, _, _, _ := newLoopWith(t, st, func(*Config) {}, probe)

	end := lead(t, s, one(1))
	require.Equal(t, int64(1), recv(t, probe.started))
	call(t, st)
	end(rangeleader.ErrSessionExpired)
	require.Equal(t, int64(1), recv(t, probe.stopped))

	// Fenced in the middle of a term: the task stops before the term ends.
	end2 := lead(t, s, one(2))
	require.Equal(t, int64(2), recv(t, probe.started))
	call(t, st) // fenced
	require.Equal(t, int64(2), recv(t, probe.stopped))

	// And the term's work returns only once a running task has.
	end2(rangeleader.ErrLockLost)
	end3 := lead(t, s, one(3))
	require.Equal(t, int64(3), recv(t, probe.started))
	end3(rangeleader.ErrStopped)
	select {
	case e := <-probe.stopped:
		require.Equal(t, int64(3), e)
	default:
		t.Fatal("the term's work returned before the term task")
	}
}

func TestConfigValidateCatchUpAndSkipRecords(t *testing.T) {
	cfg := Config{Election: "/e", NodeID: "n1", Window: 2 * time.Minute, Tick: time.Second, BatchSize: 2, MaxSlotsPerJob: 100}
	require.NoError(t, cfg.Validate())
	bad := cfg
	bad.CatchUpRate = -1
	bad.MaxSkipRecords = -1
	err := bad.Validate()
	require.ErrorContains(t, err, "catch-up-rate:")
	require.ErrorContains(t, err, "skip-records-per-job:")
}

// The chunk reaches the stager with every pass's options; a negative one
// is refused by its flag's name.
func TestChunkIsPassedToEveryBatch(t *testing.T) {
	cfg := Config{Election: "/e", NodeID: "n1", Window: 2 * time.Minute, Tick: time.Second, BatchSize: 2, MaxSlotsPerJob: 100, Chunk: -time.Second}
	require.ErrorContains(t, cfg.Validate(), "chunk:")

	st := &scriptStager{calls: make(chan stage.Options, 10), script: []stageReply{{res: stage.Result{Claimed: 1, Staged: 31}}}}
	s, _, _, _ := newLoopWith(t, st, func(c *Config) { c.Chunk = 30 * time.Second })
	lead(t, s, one(1))
	o := call(t, st)
	require.Equal(t, 30*time.Second, o.Chunk)
	require.Equal(t, 2*time.Minute, o.Window)
}

// The leader gauge is labelled with its range group, so a dashboard counts
// leaders per group.
func TestLeaderGaugeIsPerElection(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "/sundial/elections/prefetcher")
	m.Leader.Set(1)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sundial_prefetcher_leader 1 while this prefetcher stages for at least one partition range it leads (and is not fenced).
# TYPE sundial_prefetcher_leader gauge
sundial_prefetcher_leader{election="/sundial/elections/prefetcher"} 1
`), "sundial_prefetcher_leader"))
}
