package fire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/readyq"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/services/worker/internal/target"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// owner records the item's transitions; every item is claimable.
type owner struct {
	mu       sync.Mutex
	finished []string
	requeued []string
	events   chan string
}

func newOwner() *owner { return &owner{events: make(chan string, 100)} }

func id(it *work.Item) string { f, _ := firing.Decode(it.Envelope); return f.GetExecutionId() }

func (o *owner) Claim(*work.Item) bool { return true }
func (o *owner) Finish(it *work.Item) {
	o.mu.Lock()
	o.finished = append(o.finished, id(it))
	o.mu.Unlock()
	o.events <- "finish " + id(it)
}
func (o *owner) Release(*work.Item) {}
func (o *owner) Requeue(it *work.Item) bool {
	o.mu.Lock()
	o.requeued = append(o.requeued, id(it))
	o.mu.Unlock()
	return true
}

// fakeLeaser answers the prepare stage's lease calls from a script by
// execution id and records the markers written.
type fakeLeaser struct {
	mu       sync.Mutex
	acquire  map[string]lease.Result
	err      map[string]error
	renewErr error
	renews   int
	// renewCalls counts RenewMany calls; renews their entries.
	renewCalls int
	acquires   int
	marks      []string
	// finishCalls counts FinishMany calls.
	finishCalls int
}

func (l *fakeLeaser) AcquireMany(_ context.Context, batch []lease.Acquisition) ([]lease.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquires += len(batch)
	out := make([]lease.Result, len(batch))
	for i, a := range batch {
		if err := l.err[a.Execution.ExecutionID]; err != nil {
			return nil, err
		}
		out[i] = lease.Result{Outcome: lease.Acquired, Fence: 99}
		if r, ok := l.acquire[a.Execution.ExecutionID]; ok {
			out[i] = r
		}
	}
	return out, nil
}

// UntouchedMany: no delivery touched any (no test here judges late firings).
func (l *fakeLeaser) UntouchedMany(_ context.Context, batch []lease.Execution) ([]bool, error) {
	out := make([]bool, len(batch))
	for i := range out {
		out[i] = true
	}
	return out, nil
}
func (l *fakeLeaser) RenewMany(_ context.Context, batch []lease.Renewal) ([]error, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renews += len(batch)
	l.renewCalls++
	out := make([]error, len(batch))
	for i := range out {
		out[i] = l.renewErr
	}
	return out, nil
}
func (l *fakeLeaser) FinishMany(_ context.Context, batch []lease.Finish) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finishCalls++
	for _, f := range batch {
		switch f.Mark {
		case lease.FinishDone:
			l.marks = append(l.marks, "done "+f.Execution.ExecutionID)
		case lease.FinishAttempt:
			l.marks = append(l.marks, "attempt "+f.Execution.ExecutionID)
		case lease.FinishRetryPending:
			l.marks = append(l.marks, "retry "+f.Execution.ExecutionID+" keep "+f.KeepRunning.String())
		case lease.FinishCancelled:
			l.marks = append(l.marks, "cancelled "+f.Execution.ExecutionID)
		}
	}
	return nil
}
func (l *fakeLeaser) Release(_ context.Context, ex lease.Execution, _ string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks = append(l.marks, "release "+ex.ExecutionID)
	return true, nil
}

type fakeTarget struct {
	fire func(ctx context.Context, req target.Request) target.Result
}

func (t fakeTarget) Fire(ctx context.Context, req target.Request) target.Result {
	return t.fire(ctx, req)
}

type memRecorder struct {
	mu      sync.Mutex
	running []*sundialv1.ExecutionAttempt
	final   []*sundialv1.ExecutionAttempt
	// held: what Final was told, by execution.
	held map[string]bool
}

func (r *memRecorder) Running(a *sundialv1.ExecutionAttempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = append(r.running, a)
}
func (r *memRecorder) Final(_ context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool {
	r.mu.Lock()
	r.final = append(r.final, a)
	if r.held == nil {
		r.held = map[string]bool{}
	}
	r.held[a.GetExecutionId()] = held
	r.mu.Unlock()
	done()
	return true
}
func (r *memRecorder) finalOf(exec string) *sundialv1.ExecutionAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.final {
		if a.GetExecutionId() == exec {
			return a
		}
	}
	return nil
}

type heldList struct {
	mu     sync.Mutex
	items  []*work.Item
	events chan string
	// event names what an AddAfter is in events ("held" when empty).
	event string
}

func (h *heldList) AddAfter(it *work.Item, notBefore int64) {
	it.NotBefore = notBefore
	h.mu.Lock()
	h.items = append(h.items, it)
	h.mu.Unlock()
	ev := h.event
	if ev == "" {
		ev = "held"
	}
	h.events <- ev + " " + id(it)
}

type rig struct {
	fire   *Stage
	settle *settle.Stage
	deps   rigDeps
	cfg    rigConfig
	stage  *prepare.Stage
	clk    *clock.Fake
	q      *readyq.Queue
	own    *owner
	leaser *fakeLeaser
	rec    *memRecorder
	held   *heldList
	// leaseAgain is the fire stage's prepare holder: firings whose lease
	// ran low go back through it.
	leaseAgain *heldList
	m          *metrics.Metrics
	logger     *slog.Logger
	target     target.Target
}

// rigDeps are the two stages' replaceable parts a test sets before start.
type rigDeps struct {
	Settler  settle.Consequences
	Notifier settle.Notifier
	Marks    settle.Marker
	Recorder interface {
		Recorder
		settle.Recorder
	}
	Limiter  Limiter
	Versions Versions
	Tracer   trace.Tracer
}

// rigConfig is the two stages' settings a test may change before start.
type rigConfig struct {
	Executors, CriticalExecutors int
	Settlers, SettleBatch        int
	SettleLinger                 time.Duration
	// Emptied, MaxYield and SettleQueue (Queue) are settle.StageConfig's.
	Emptied     func() <-chan struct{}
	MaxYield    time.Duration
	SettleQueue int
}

func newRig(t *testing.T, executors int, fire func(ctx context.Context, req target.Request) target.Result) *rig {
	t.Helper()
	return newWatchingRig(t, executors, fire)
}

// newWatchingRig is newRig with per-job series for the watched jobs. The
// stages are built by start, so a test can set more of r.deps first.
func newWatchingRig(t *testing.T, executors int, fire func(ctx context.Context, req target.Request) target.Result, watched ...string) *rig {
	t.Helper()
	return newQueueRig(t, readyq.New(), executors, fire, watched...)
}

// newQueueRig is newWatchingRig with the ready queue q (its admission
// limits).
func newQueueRig(t *testing.T, q *readyq.Queue, executors int, fire func(ctx context.Context, req target.Request) target.Result, watched ...string) *rig {
	t.Helper()
	r := &rig{q: q, own: newOwner(), leaser: &fakeLeaser{acquire: map[string]lease.Result{}, err: map[string]error{}}, rec: &memRecorder{}}
	r.held = &heldList{events: r.own.events}
	r.leaseAgain = &heldList{events: r.own.events, event: "lease again"}
	r.m = metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants, watched...)
	r.clk = clock.NewFake(t0.Add(3 * time.Millisecond))
	r.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r.stage = prepare.New(prepare.Config{WorkerID: "w1", LeaseTTL: time.Minute}, r.leaser,
		prepare.Routes{Fire: r.q.Push, Now: r.q.Push, Again: r.held.AddAfter}, r.clk, r.m, r.logger)
	r.cfg = rigConfig{Executors: executors}
	r.deps = rigDeps{Recorder: r.rec}
	r.target = fakeTarget{fire}
	return r
}

// start builds and starts the settle stage, then the fire stage.
func (r *rig) start(t *testing.T) {
	t.Helper()
	r.settle = settle.NewStage(settle.StageConfig{Settlers: r.cfg.Settlers, Batch: r.cfg.SettleBatch, Linger: r.cfg.SettleLinger, WorkerID: "w1",
		RunningGrace: 3 * time.Minute, Emptied: r.cfg.Emptied, MaxYield: r.cfg.MaxYield, Queue: r.cfg.SettleQueue},
		settle.StageDeps{Leaser: r.leaser, Recorder: r.deps.Recorder, Settler: r.deps.Settler, Notifier: r.deps.Notifier, Marks: r.deps.Marks,
			Target: r.target, Tracer: r.deps.Tracer, Clock: r.clk, Metrics: r.m, Logger: r.logger})
	d := Deps{Queue: r.q, Holder: r.held, Prepare: r.leaseAgain, Settle: r.settle, Leaser: r.leaser, Target: r.target, Recorder: r.deps.Recorder,
		Limiter: r.deps.Limiter, Versions: r.deps.Versions, Tracer: r.deps.Tracer, Clock: r.clk, Metrics: r.m, Logger: r.logger}
	r.fire = New(Config{Executors: r.cfg.Executors, CriticalExecutors: r.cfg.CriticalExecutors, WorkerID: "w1", LeaseTTL: time.Minute}, d)
	if err := r.settle.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.fire.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
}

// stop stops the fire stage, then the settle stage, as the worker does.
func (r *rig) stop() {
	r.fire.Stop()
	r.settle.Stop()
}

// enqueue runs it through the prepare stage, which leases it (from the
// fake's script) and hands it to the ready queue.
func (r *rig) enqueue(it *work.Item) { r.stage.Prepare(context.Background(), []*work.Item{it}) }

func (r *rig) push(t *testing.T, exec string, p sundialv1.Priority) {
	t.Helper()
	r.pushJob(t, exec, "job", p)
}

func (r *rig) pushJob(t *testing.T, exec, job string, p sundialv1.Priority) {
	t.Helper()
	b, err := firing.Encode(&sundialv1.Firing{
		ExecutionId: exec, JobId: job, Tenant: "acme", Attempt: 1, JobVersion: 4, Priority: p,
		ScheduledTime: timestamppb.New(t0), FireTime: timestamppb.New(t0), CatchUp: true,
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.enqueue(&work.Item{Facts: work.Facts{FireAt: t0.UnixNano(), Priority: firing.Normalize(p), Envelope: b, Owner: r.own}, Hold: work.Hold{Ready: t0.UnixNano(), HeapIndex: -1}})
}

func ok(context.Context, target.Request) target.Result {
	return target.Result{OK: true, HTTPStatus: 200, Excerpt: "fine"}
}

func TestSucceededAttempt(t *testing.T) {
	var got target.Request
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { got = req; return ok(ctx, req) })
	r.start(t)
	r.push(t, "e1", sundialv1.Priority_PRIORITY_HIGH)
	if ev := <-r.own.events; ev != "finish e1" {
		t.Fatalf("event %q", ev)
	}
	if got.Fence != 99 || got.Firing.GetExecutionId() != "e1" {
		t.Fatalf("target got %+v", got)
	}
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED || a.GetFenceToken() != 99 || a.GetWorker() != "w1" ||
		a.GetHttpStatus() != 200 || a.GetResponseExcerpt() != "fine" || !a.GetCatchUp() || a.GetJobVersion() != 4 ||
		a.GetLateness().AsDuration() != 3*time.Millisecond || a.GetTenant() != "acme" || a.GetError() != "" {
		t.Fatalf("final record %v", a)
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if len(r.rec.running) != 1 || r.rec.running[0].GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_RUNNING {
		t.Fatalf("running records %v", r.rec.running)
	}
	if !r.rec.held["e1"] {
		t.Fatal("an attempt that kept its lease and wrote its marker was not recorded as held")
	}
	if len(r.leaser.marks) != 1 || r.leaser.marks[0] != "done e1" {
		t.Fatalf("marks %v", r.leaser.marks)
	}
	if n := testutil.ToFloat64(r.m.Firings.WithLabelValues("high", "succeeded", "acme")); n != 1 {
		t.Fatalf("succeeded count %v", n)
	}
}

func TestFailedAttemptMarksOnlyTheAttempt(t *testing.T) {
	r := newRig(t, 1, func(context.Context, target.Request) target.Result {
		return target.Result{HTTPStatus: 500, Excerpt: "boom", Err: errors.New("status 500")}
	})
	r.start(t)
	r.push(t, "e1", 0)
	<-r.own.events
	a := r.rec.finalOf("e1")
	if a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED || a.GetHttpStatus() != 500 || a.GetError() == "" {
		t.Fatalf("final %v", a)
	}
	if r.leaser.marks[0] != "attempt e1" {
		t.Fatalf("marks %v", r.leaser.marks)
	}
}

func TestSkips(t *testing.T) {
	calls := 0
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result { calls++; return ok(ctx, req) })
	r.leaser.acquire["done"] = lease.Result{Outcome: lease.AlreadyDone}
	r.leaser.acquire["stale"] = lease.Result{Outcome: lease.Stale, CurrentVersion: 5}
	r.leaser.acquire["held"] = lease.Result{Outcome: lease.Held, HeldFor: 2 * time.Second}
	r.leaser.err["redis-down"] = errors.New("dial tcp: refused")
	r.start(t)
	for _, e := range []string{"done", "stale", "held", "redis-down"} {
		r.push(t, e, 0)
		<-r.own.events
	}
	if calls != 0 {
		t.Fatalf("target called %d times for skipped firings", calls)
	}
	if a := r.rec.finalOf("stale"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED || a.GetReason() == "" {
		t.Fatalf("stale record %v", a)
	}
	r.rec.mu.Lock()
	staleHeld := r.rec.held["stale"]
	r.rec.mu.Unlock()
	if !staleHeld {
		t.Fatal("a stale skip was handed in for a fence check (a read per skipped firing)")
	}
	if r.rec.finalOf("done") != nil || r.rec.finalOf("held") != nil {
		t.Fatal("duplicate or held firings must record nothing")
	}
	r.own.mu.Lock()
	defer r.own.mu.Unlock()
	r.held.mu.Lock()
	defer r.held.mu.Unlock()
	if len(r.own.finished) != 2 || len(r.own.requeued) != 2 {
		t.Fatalf("finished %v requeued %v", r.own.finished, r.own.requeued)
	}
	// Held: looked at again after the other lease ends (+ a margin).
	for _, it := range r.held.items {
		if id(it) == "held" && it.NotBefore != t0.Add(3*time.Millisecond+2*time.Second+6*time.Second).UnixNano() {
			t.Fatalf("held firing re-held until %v", time.Unix(0, it.NotBefore))
		}
	}
	if testutil.ToFloat64(r.m.LeaseConflicts) != 1 {
		t.Fatal("lease conflict not counted")
	}
}

// A renewal that finds another holder cancels the call: FENCED, and no done
// marker (the new holder writes its own).
func TestFencedDuringAttempt(t *testing.T) {
	started := make(chan struct{})
	r := newRig(t, 1, func(ctx context.Context, _ target.Request) target.Result {
		close(started)
		<-ctx.Done()
		return target.Result{Err: ctx.Err()}
	})
	r.leaser.renewErr = lease.ErrFenced
	clk := r.clk
	r.start(t)
	r.push(t, "e1", 0)
	<-started
	// The renewal timer was armed before the call started.
	clk.Advance(20 * time.Second)
	<-r.own.events
	if a := r.rec.finalOf("e1"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_FENCED {
		t.Fatalf("final %v", a)
	}
	if len(r.leaser.marks) != 0 {
		t.Fatalf("marks %v written by a fenced attempt", r.leaser.marks)
	}
	if r.rec.held["e1"] {
		t.Fatal("a fenced attempt's record was handed in as held (it must be fence-checked)")
	}
}

// A renewal that fails without naming another holder (Redis unreachable)
// lets the attempt finish, but its record is not handed in as held: the
// lease may have lapsed and been taken, so the ledger checks its fence.
func TestRenewalFailureIsNotHeld(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		close(started)
		<-release
		return ok(ctx, req)
	})
	r.leaser.renewErr = errors.New("dial tcp: connection refused")
	clk := r.clk
	r.start(t)
	r.push(t, "e1", 0)
	<-started
	clk.Advance(20 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.leaser.mu.Lock()
		n := r.leaser.renews
		r.leaser.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no renewal attempted")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-r.own.events
	if a := r.rec.finalOf("e1"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		t.Fatalf("final %v", a)
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if r.rec.held["e1"] {
		t.Fatal("an attempt whose renewal failed was recorded as held")
	}
}

// With one executor busy, queued firings run by priority: CRITICAL pushed
// last runs before the LOW ones pushed first.
func TestPriorityOrderThroughThePool(t *testing.T) {
	var order []string // appended by the single executor only
	block := make(chan struct{})
	entered := make(chan struct{})
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		order = append(order, req.Firing.GetExecutionId())
		if len(order) == 1 {
			close(entered)
			<-block
		}
		return ok(ctx, req)
	})
	r.start(t)
	r.push(t, "busy", sundialv1.Priority_PRIORITY_LOW)
	<-entered // the executor is inside the first call
	r.push(t, "low1", sundialv1.Priority_PRIORITY_LOW)
	r.push(t, "low2", sundialv1.Priority_PRIORITY_LOW)
	r.push(t, "crit", sundialv1.Priority_PRIORITY_CRITICAL)
	close(block)
	for range 4 {
		<-r.own.events
	}
	want := []string{"busy", "crit", "low1", "low2"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

// With every executor inside a request that hangs, a CRITICAL firing still
// fires at once on an executor reserved for CRITICAL; a HIGH one waits.
func TestCriticalFiresWhileEveryExecutorIsBusy(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan string, 10)
	r := newRig(t, 2, func(ctx context.Context, req target.Request) target.Result {
		entered <- req.Firing.GetExecutionId()
		if req.Firing.GetPriority() != sundialv1.Priority_PRIORITY_CRITICAL {
			<-block
		}
		return ok(ctx, req)
	})
	r.cfg.CriticalExecutors = 1
	r.start(t)
	defer close(block)
	r.push(t, "busy1", sundialv1.Priority_PRIORITY_LOW)
	r.push(t, "busy2", sundialv1.Priority_PRIORITY_MEDIUM)
	got := map[string]bool{<-entered: true, <-entered: true}
	if !got["busy1"] || !got["busy2"] {
		t.Fatalf("the two executors took %v", got)
	}
	r.push(t, "high", sundialv1.Priority_PRIORITY_HIGH)
	r.push(t, "crit", sundialv1.Priority_PRIORITY_CRITICAL)
	select {
	case id := <-entered:
		if id != "crit" {
			t.Fatalf("fired %s while every executor was busy, want crit", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the CRITICAL firing did not fire while every executor was busy")
	}
	if ev := <-r.own.events; ev != "finish crit" {
		t.Fatalf("event %q, want crit finished", ev)
	}
	select {
	case id := <-entered:
		t.Fatalf("%s fired on the executor reserved for CRITICAL", id)
	default:
	}
}

// Slow LOW attempts occupy every executor LOW may use (half the pool);
// the LOW firings behind them wait in the queue, and a HIGH and then a
// CRITICAL firing start at once on the executors LOW may not take —
// without any executor reserved for CRITICAL alone. Each executor freed
// by a LOW attempt goes to the next LOW firing.
func TestHighAndCriticalStartWhileSlowLowFillsItsShare(t *testing.T) {
	const executors = 4
	block := make(chan struct{})
	entered := make(chan string, 20)
	fire := func(ctx context.Context, req target.Request) target.Result {
		entered <- req.Firing.GetExecutionId()
		if req.Firing.GetPriority() == sundialv1.Priority_PRIORITY_LOW {
			<-block // a target that answers in 10 s, as far as the pool can tell
		}
		return ok(ctx, req)
	}
	// --executors 4 with the default shares: LOW 2, MEDIUM and LOW 3,
	// HIGH and below 3; CRITICAL all 4.
	q := readyq.New(readyq.WithLimits(readyq.LimitsOf(executors, 90, 80, 50)))
	r := newQueueRig(t, q, executors, fire)
	r.start(t)
	released := false
	defer func() {
		if !released {
			close(block)
		}
	}()
	for i := range 6 {
		r.push(t, fmt.Sprintf("low%d", i), sundialv1.Priority_PRIORITY_LOW)
	}
	lows := map[string]bool{<-entered: true, <-entered: true}
	if !lows["low0"] || !lows["low1"] {
		t.Fatalf("the first two executors took %v, want low0 and low1", lows)
	}
	waitFor := func(want string) {
		t.Helper()
		select {
		case id := <-entered:
			if id != want {
				t.Fatalf("%s started, want %s (LOW holds every executor it may use)", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not start while LOW attempts held their share of the pool", want)
		}
	}
	r.push(t, "high", sundialv1.Priority_PRIORITY_HIGH)
	waitFor("high")
	r.push(t, "crit", sundialv1.Priority_PRIORITY_CRITICAL)
	waitFor("crit")
	for _, want := range []string{"finish high", "finish crit"} {
		if ev := <-r.own.events; ev != "finish high" && ev != "finish crit" {
			t.Fatalf("event %q, want %s", ev, want)
		}
	}
	if n, left := r.q.Running(sundialv1.Priority_PRIORITY_LOW), r.q.Len(); n != 2 || left != 4 {
		t.Fatalf("%d LOW attempts running and %d firings queued, want 2 and the other 4 LOW waiting for their share", n, left)
	}
	// The slow target answers: the queued LOW firings take the executors
	// LOW's finished attempts free, and all six are done.
	close(block)
	released = true
	finished := 0
	for finished < 6 {
		if ev := <-r.own.events; strings.HasPrefix(ev, "finish low") {
			finished++
		}
	}
	if n := r.q.Len(); n != 0 {
		t.Fatalf("%d firings left in the queue", n)
	}
}

// A watched job's firings and lateness get series labelled by its id,
// every outcome at zero from the start; an unwatched job's get none.
func TestPerJobSeriesForWatchedJobsOnly(t *testing.T) {
	const watched, unwatched = "0192a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b", "0192a3b4-c5d6-7e8f-9a0b-000000000000"
	r := newWatchingRig(t, 1, ok, watched)
	if n, got := testutil.CollectAndCount(r.m.JobFirings), jobSeries(t, r.m.JobFirings); n != len(metrics.Outcomes) || len(got) != 1 || got[watched] != 0 {
		t.Fatalf("before any firing: %d series %v, want the %d outcomes of %s at zero", n, got, len(metrics.Outcomes), watched)
	}
	if n := testutil.CollectAndCount(r.m.JobLateness); n != 1 {
		t.Fatalf("before any firing: %d lateness series, want the watched job's", n)
	}
	r.leaser.acquire["dup"] = lease.Result{Outcome: lease.AlreadyDone}
	r.start(t)
	for _, f := range []struct{ exec, job string }{{"e1", watched}, {"dup", watched}, {"e2", unwatched}} {
		r.pushJob(t, f.exec, f.job, sundialv1.Priority_PRIORITY_HIGH)
		if ev := <-r.own.events; ev != "finish "+f.exec {
			t.Fatalf("event %q", ev)
		}
	}
	firings := jobSeries(t, r.m.JobFirings)
	if n := testutil.CollectAndCount(r.m.JobFirings); n != len(metrics.Outcomes) || len(firings) != 1 || firings[watched] != 2 {
		t.Fatalf("%d job firing series %v: want only %s's, 2 firings", n, firings, watched)
	}
	for outcome, want := range map[string]float64{"succeeded": 1, "duplicate": 1, "dead": 0} {
		if got := testutil.ToFloat64(r.m.JobFirings.WithLabelValues(watched, outcome)); got != want {
			t.Errorf("%s firings of the watched job = %v, want %v", outcome, got, want)
		}
	}
	// Lateness at the target: the attempt only (a duplicate never starts),
	// 3 ms after its fire instant.
	lateness := jobSeries(t, r.m.JobLateness)
	if len(lateness) != 1 || lateness[watched] != 1 {
		t.Fatalf("job lateness series %v: want one observation, of %s", lateness, watched)
	}
	// The platform-wide series still count every job.
	if n := testutil.ToFloat64(r.m.Firings.WithLabelValues("high", "succeeded", "acme")); n != 2 {
		t.Fatalf("succeeded firings across jobs = %v", n)
	}
}

// jobSeries gathers c and sums its samples (counter values, histogram
// observation counts) by job_id; a series at zero still appears.
func jobSeries(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var job string
			for _, l := range m.GetLabel() {
				if l.GetName() == "job_id" {
					job = l.GetValue()
				}
			}
			switch {
			case m.GetHistogram() != nil:
				out[job] += float64(m.GetHistogram().GetSampleCount())
			default:
				out[job] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Attempts that end within the settle linger share one marker call, even
// with several settlers idle: one gathers at a time.
func TestAttemptsEndingTogetherShareAMarkerCall(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, 3, func(ctx context.Context, req target.Request) target.Result {
		<-release
		return ok(ctx, req)
	})
	r.cfg.Settlers, r.cfg.SettleBatch, r.cfg.SettleLinger = 4, 3, time.Hour
	r.start(t)
	for _, e := range []string{"e1", "e2", "e3"} {
		r.push(t, e, 0)
	}
	close(release)
	for range 3 {
		<-r.own.events
	}
	r.leaser.mu.Lock()
	defer r.leaser.mu.Unlock()
	if r.leaser.finishCalls != 1 || len(r.leaser.marks) != 3 {
		t.Fatalf("%d marker calls for %v, want one for the three", r.leaser.finishCalls, r.leaser.marks)
	}
}

// While due firings wait for an executor, a finished attempt is settled
// after them: its marker call waits until the ready queue is empty, or
// for MaxYield at most.
func TestSettlingYieldsToWaitingFirings(t *testing.T) {
	firing := &emptySignal{}
	fired := make(chan struct{}, 2)
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		fired <- struct{}{}
		return ok(ctx, req)
	})
	r.cfg.Emptied, r.cfg.MaxYield = firing.Emptied, time.Second
	r.start(t)
	finishCalls := func() int {
		r.leaser.mu.Lock()
		defer r.leaser.mu.Unlock()
		return r.leaser.finishCalls
	}

	// Firings wait: the attempt is made, its settling waits for them
	// (without the yield it is settled at once: no timer stands between).
	firing.Store(true)
	r.push(t, "e1", 0)
	<-fired
	time.Sleep(100 * time.Millisecond)
	if n := finishCalls(); n != 0 {
		t.Fatalf("%d marker calls while firings waited, want 0", n)
	}
	// They went out: the next look settles it.
	firing.Store(false)
	advanceUntil(t, r, "finish e1")

	// Firings wait longer than MaxYield: settled at MaxYield anyway.
	firing.Store(true)
	r.push(t, "e2", 0)
	<-fired
	time.Sleep(100 * time.Millisecond)
	if n := finishCalls(); n != 1 {
		t.Fatalf("%d marker calls before MaxYield, want 1", n)
	}
	start := r.clk.Now()
	advanceUntil(t, r, "finish e2")
	if waited := r.clk.Now().Sub(start); waited < time.Second-10*time.Millisecond {
		t.Fatalf("settled after %v of yielding, want MaxYield (1s)", waited)
	}
}

// emptySignal stands for the ready queue's Emptied: Store(true) says
// firings wait, Store(false) that the executors took the last one.
type emptySignal struct {
	mu    sync.Mutex
	empty chan struct{} // nil while nothing waits
}

func (e *emptySignal) Store(waiting bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case waiting && e.empty == nil:
		e.empty = make(chan struct{})
	case !waiting && e.empty != nil:
		close(e.empty)
		e.empty = nil
	}
}

func (e *emptySignal) Emptied() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.empty == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return e.empty
}

// advanceUntil moves the fake clock 2 ms at a time until the owner reports
// want.
func advanceUntil(t *testing.T, r *rig, want string) {
	t.Helper()
	for range 2000 {
		r.clk.Advance(2 * time.Millisecond)
		select {
		case ev := <-r.own.events:
			if ev != want {
				t.Fatalf("event %q, want %q", ev, want)
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
	t.Fatalf("no %q after 4 s of the fake clock", want)
}

// outageMarks is settle.Marks with Redis down: nothing is written until the
// test says Redis is back.
type outageMarks struct {
	mu      sync.Mutex
	waiting [][]lease.Finish
	written []func()
}

func (m *outageMarks) Write(_ context.Context, marks []lease.Finish, written func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiting = append(m.waiting, marks)
	m.written = append(m.written, written)
	return false
}

func (m *outageMarks) back() {
	m.mu.Lock()
	fs := m.written
	m.written = nil
	m.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// signalRecorder tells the test each final record handed in.
type signalRecorder struct {
	*memRecorder
	recorded chan string
}

func (s signalRecorder) Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool {
	ok := s.memRecorder.Final(ctx, a, held, done)
	s.recorded <- a.GetExecutionId()
	return ok
}

// With Redis down after the leases were taken, attempts go on: each is
// recorded, its markers wait, and its firing finishes (its offset may be
// committed past) only once they are written.
func TestMarkersWaitingForRedisHoldTheFiringUnfinished(t *testing.T) {
	r := newRig(t, 2, ok)
	marks := &outageMarks{}
	r.deps.Marks = marks
	rec := signalRecorder{r.rec, make(chan string, 2)}
	r.deps.Recorder = rec
	r.start(t)
	r.push(t, "e1", sundialv1.Priority_PRIORITY_HIGH)
	r.push(t, "e2", sundialv1.Priority_PRIORITY_HIGH)
	<-rec.recorded
	<-rec.recorded
	select {
	case ev := <-r.own.events:
		t.Fatalf("%s before the markers were written", ev)
	default:
	}
	r.rec.mu.Lock()
	held := r.rec.held["e1"]
	r.rec.mu.Unlock()
	if held {
		t.Fatal("recorded as held (marker written under the lease) while the marker waits")
	}
	marks.mu.Lock()
	n := 0
	for _, g := range marks.waiting {
		n += len(g)
	}
	marks.mu.Unlock()
	if n != 2 || len(r.leaser.marks) != 0 {
		t.Fatalf("%d markers waiting, %v written, want 2 waiting", n, r.leaser.marks)
	}
	marks.back()
	got := map[string]bool{<-r.own.events: true, <-r.own.events: true}
	if !got["finish e1"] || !got["finish e2"] {
		t.Fatalf("after the markers were written: %v", got)
	}
}

// leasedItem is a firing of execution exec leased ahead by this worker
// (holder w1/1, fence 7, one acquisition) whose lease runs until until.
func leasedItem(t *testing.T, r *rig, exec string, until time.Time) *work.Item {
	t.Helper()
	f := &sundialv1.Firing{ExecutionId: exec, JobId: "job", Tenant: "acme", Attempt: 1, JobVersion: 4, Priority: sundialv1.Priority_PRIORITY_HIGH,
		ScheduledTime: timestamppb.New(t0), FireTime: timestamppb.New(t0),
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://x"}}}}
	b, err := firing.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return &work.Item{
		Facts: work.Facts{FireAt: t0.UnixNano(), Priority: f.GetPriority(), Envelope: b, Owner: r.own},
		Hold:  work.Hold{Ready: t0.UnixNano(), HeapIndex: -1},
		Prepared: work.Prepared{Firing: f, Lease: lease.Result{Outcome: lease.Acquired, Fence: 7, Deliveries: 1},
			LeaseHolder: "w1/1", Acquired: 1, LeaseUntil: until.UnixNano()},
	}
}

// A firing that waited in the ready queue or behind a limit until less
// than half its lease was left, or until it ran out, is not renewed or
// leased again by the executor, one Redis call per firing: it goes back to
// the prepare stage, which takes it again in a batch. Nothing reaches
// Redis or the target from the executor.
func TestShortLeaseGoesBackToThePrepareStage(t *testing.T) {
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		t.Errorf("fired %s", req.Firing.GetExecutionId())
		return ok(ctx, req)
	})
	r.leaser.acquire["e1"] = lease.Result{Outcome: lease.Acquired, Fence: 12}
	r.start(t)
	for _, c := range []struct {
		exec string
		left time.Duration
	}{{"e1", 2 * time.Second}, {"e2", -time.Second}} {
		// The rig's lease TTL is a minute: 2 s left is under half; -1 s has
		// run out.
		r.q.Push(leasedItem(t, r, c.exec, r.clk.Now().Add(c.left)))
		if ev := <-r.own.events; ev != "lease again "+c.exec {
			t.Fatalf("%s: event %q, want it back in the prepare holder", c.exec, ev)
		}
	}
	// Given back to its owner first (held again, not executing), and due
	// at once: the prepare stage takes it in its next batch.
	r.own.mu.Lock()
	requeued := slices.Clone(r.own.requeued)
	r.own.mu.Unlock()
	if !slices.Equal(requeued, []string{"e1", "e2"}) {
		t.Fatalf("requeued %v, want [e1 e2]", requeued)
	}
	r.leaseAgain.mu.Lock()
	for _, it := range r.leaseAgain.items {
		if it.NotBefore != r.clk.Now().UnixNano() {
			t.Errorf("%s held until %v, want now (%v)", id(it), time.Unix(0, it.NotBefore), r.clk.Now())
		}
	}
	r.leaseAgain.mu.Unlock()
	r.leaser.mu.Lock()
	defer r.leaser.mu.Unlock()
	if r.leaser.renews != 0 || len(r.leaser.marks) != 0 || r.leaser.acquires != 0 {
		t.Fatalf("the executor called Redis: %d renewals, %d acquisitions, %v", r.leaser.renews, r.leaser.acquires, r.leaser.marks)
	}
}

// Attempts that outlast a third of their lease together — a backlog
// whose settling lags — are renewed together: one RenewMany call for all
// that are due at a tick, not one call each.
func TestDueRenewalsShareOneCall(t *testing.T) {
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	r := newRig(t, n, func(ctx context.Context, req target.Request) target.Result {
		started.Done()
		<-release
		return ok(ctx, req)
	})
	r.start(t)
	for i := range n {
		r.pushJob(t, fmt.Sprintf("e%d", i), fmt.Sprintf("job-%d", i), 0)
	}
	started.Wait()
	counts := func() (renews, calls int) {
		r.leaser.mu.Lock()
		defer r.leaser.mu.Unlock()
		return r.leaser.renews, r.leaser.renewCalls
	}
	// The TTL is a minute: all eight are due 20 s after they started.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if renews, _ := counts(); renews >= n {
			break
		}
		if time.Now().After(deadline) {
			renews, calls := counts()
			t.Fatalf("%d renewals in %d calls, want %d", renews, calls, n)
		}
		r.clk.Advance(10 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if renews, calls := counts(); renews != n || calls != 1 {
		t.Fatalf("%d renewals in %d calls, want %d in one", renews, calls, n)
	}
	close(release)
	for range n {
		<-r.own.events
	}
}

// A long attempt's lease is renewed every third of the TTL while it runs
// and settles; once settled it is renewed no more.
func TestLongAttemptIsRenewedUntilSettled(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	r := newRig(t, 1, func(ctx context.Context, req target.Request) target.Result {
		close(started)
		<-release
		return ok(ctx, req)
	})
	r.start(t)
	r.push(t, "e1", 0)
	<-started
	renews := func() int {
		r.leaser.mu.Lock()
		defer r.leaser.mu.Unlock()
		return r.leaser.renews
	}
	// The TTL is a minute: renewals are due 20 s apart, looked for every
	// 10 s.
	for want := 1; want <= 3; want++ {
		deadline := time.Now().Add(10 * time.Second)
		for renews() < want {
			r.clk.Advance(10 * time.Second)
			time.Sleep(time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatalf("%d renewals, want %d", renews(), want)
			}
		}
	}
	close(release)
	if ev := <-r.own.events; ev != "finish e1" {
		t.Fatalf("event %q", ev)
	}
	n := renews()
	for range 5 {
		r.clk.Advance(20 * time.Second)
		time.Sleep(time.Millisecond)
	}
	if got := renews(); got != n {
		t.Fatalf("%d renewals after the attempt settled", got-n)
	}
	if a := r.rec.finalOf("e1"); a.GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
		t.Fatalf("final %v", a)
	}
}

// Settling yields to waiting firings only while its queue is less than
// half full: once finished attempts pile up, they are settled at once
// instead of holding their leases (which then need renewing) while the
// executors wait for room.
func TestSettlingStopsYieldingPastHalfItsQueue(t *testing.T) {
	const n = 8
	firing := &emptySignal{}
	firing.Store(true) // due firings wait throughout
	fired := make(chan struct{}, n)
	r := newRig(t, n, func(ctx context.Context, req target.Request) target.Result {
		fired <- struct{}{}
		return ok(ctx, req)
	})
	// An hour's yield, one attempt a settler's turn, a queue of four.
	r.cfg.Emptied, r.cfg.MaxYield = firing.Emptied, time.Hour
	r.cfg.Settlers, r.cfg.SettleBatch, r.cfg.SettleQueue = 1, 1, 4
	r.start(t)
	for i := range n {
		r.pushJob(t, fmt.Sprintf("e%d", i), fmt.Sprintf("job-%d", i), 0)
	}
	for range n {
		<-fired
	}
	// Within a minute of the fake clock, far less than the yield, all but
	// the two that leave the queue less than half full are settled.
	settled := 0
	for range 3000 {
		if settled >= n-2 {
			break
		}
		r.clk.Advance(20 * time.Millisecond)
		select {
		case ev := <-r.own.events:
			if !strings.HasPrefix(ev, "finish ") {
				t.Fatalf("event %q", ev)
			}
			settled++
		case <-time.After(time.Millisecond):
		}
	}
	if settled < n-2 {
		t.Fatalf("%d of %d attempts settled while firings waited, want at least %d", settled, n, n-2)
	}
	// The firings went out: the rest are settled too.
	firing.Store(false)
	for settled < n {
		r.clk.Advance(20 * time.Millisecond)
		select {
		case ev := <-r.own.events:
			if !strings.HasPrefix(ev, "finish ") {
				t.Fatalf("event %q", ev)
			}
			settled++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d settled after the firings went out", settled, n)
		}
	}
}
