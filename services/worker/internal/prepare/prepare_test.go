package prepare

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
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	dmisfire "github.com/sundialhq/sundial/pkg/domain/misfire"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/misfire"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// owner claims what is not in refuse and records the transitions.
type owner struct {
	mu       sync.Mutex
	refuse   map[string]bool
	finished []string
	requeued []string
}

func (o *owner) Claim(it *work.Item) bool { return !o.refuse[exec(it)] }
func (o *owner) Finish(it *work.Item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished = append(o.finished, exec(it))
}
func (o *owner) Release(*work.Item) {}
func (o *owner) Requeue(it *work.Item) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requeued = append(o.requeued, exec(it))
	return true
}

func exec(it *work.Item) string { f, _ := firing.Decode(it.Envelope); return f.GetExecutionId() }

// leaser records each call's batch and answers from a script.
type leaser struct {
	mu       sync.Mutex
	calls    [][]lease.Acquisition
	answer   map[string]lease.Result
	err      error
	finished []lease.Finish
	// touched names the executions UntouchedMany says some delivery
	// touched (all others are untouched); asked records what it was asked.
	touched    map[string]bool
	asked      []string
	untouchErr error
}

func (l *leaser) UntouchedMany(_ context.Context, batch []lease.Execution) ([]bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range batch {
		l.asked = append(l.asked, e.ExecutionID)
	}
	if l.untouchErr != nil {
		return nil, l.untouchErr
	}
	out := make([]bool, len(batch))
	for i, e := range batch {
		out[i] = !l.touched[e.ExecutionID]
	}
	return out, nil
}

func (l *leaser) AcquireMany(_ context.Context, batch []lease.Acquisition) ([]lease.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, batch)
	if l.err != nil {
		return nil, l.err
	}
	out := make([]lease.Result, len(batch))
	for i, a := range batch {
		out[i] = lease.Result{Outcome: lease.Acquired, Fence: int64(100 + i)}
		if r, ok := l.answer[a.Execution.ExecutionID]; ok {
			out[i] = r
		}
	}
	return out, nil
}

func (l *leaser) FinishMany(_ context.Context, batch []lease.Finish) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished = append(l.finished, batch...)
	return nil
}

type routes struct {
	mu               sync.Mutex
	fire, now, again []*work.Item
	fired            chan struct{}
}

func newStage(t *testing.T, cfg Config, l Leaser, clk clock.Clock) (*Stage, *routes) {
	t.Helper()
	r := &routes{fired: make(chan struct{}, 1024)}
	add := func(dst *[]*work.Item, signal bool) func(*work.Item) {
		return func(it *work.Item) {
			r.mu.Lock()
			*dst = append(*dst, it)
			r.mu.Unlock()
			if signal {
				r.fired <- struct{}{}
			}
		}
	}
	// again holds as the prepare holder's AddAfter does.
	again := func(add func(*work.Item)) func(*work.Item, int64) {
		return func(it *work.Item, notBefore int64) {
			it.NotBefore = notBefore
			add(it)
		}
	}
	m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
	cfg.WorkerID = "w1"
	s := New(cfg, l, Routes{Fire: add(&r.fire, true), Now: add(&r.now, false), Again: again(add(&r.again, false))}, clk, m,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	return s, r
}

func item(t *testing.T, o work.Owner, id string, fireAt time.Time, overlap sundialv1.OverlapPolicy) *work.Item {
	t.Helper()
	b, err := firing.Encode(&sundialv1.Firing{ExecutionId: id, JobId: "job-" + id, Tenant: "acme", Attempt: 1, JobVersion: 3,
		ScheduledTime: timestamppb.New(fireAt), FireTime: timestamppb.New(fireAt), Overlap: overlap})
	if err != nil {
		t.Fatal(err)
	}
	return &work.Item{Facts: work.Facts{FireAt: fireAt.UnixNano(), Envelope: b, Owner: o,
		Overlap: overlap != sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED && overlap != sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW},
		Hold: work.Hold{HeapIndex: -1}}
}

// One batch is one lease call; each outcome goes its own way, and a lease
// taken ahead lasts the lease TTL past the firing's instant.
func TestOneCallPerBatchAndEachOutcomeRouted(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{
		"dup":   {Outcome: lease.AlreadyDone},
		"held":  {Outcome: lease.Held, HeldFor: 3 * time.Second},
		"stale": {Outcome: lease.Stale, CurrentVersion: 4},
	}}
	s, r := newStage(t, Config{LeaseTTL: 10 * time.Second}, l, clk)
	o := &owner{refuse: map[string]bool{"gone": true}}
	at := t0.Add(2 * time.Second)
	var batch []*work.Item
	for _, id := range []string{"a", "b", "dup", "held", "stale", "gone"} {
		batch = append(batch, item(t, o, id, at, 0))
	}
	s.Prepare(context.Background(), batch)

	if len(l.calls) != 1 || len(l.calls[0]) != 5 {
		t.Fatalf("lease calls %d of %v, want one call for the five claimed firings", len(l.calls), len(l.calls[0]))
	}
	for _, a := range l.calls[0] {
		if a.TTL != 12*time.Second {
			t.Fatalf("%s: TTL %s, want the 2s to its instant + the 10s lease TTL", a.Execution.ExecutionID, a.TTL)
		}
		if a.Execution.Version != 3 || a.Execution.Attempt != 1 || a.Holder == "" {
			t.Fatalf("acquisition %+v", a)
		}
	}
	if l.calls[0][0].Holder == l.calls[0][1].Holder {
		t.Fatal("two deliveries share a lease holder")
	}
	if len(r.fire) != 2 || exec(r.fire[0]) != "a" || r.fire[0].Lease.Fence != 100 || r.fire[0].Firing.GetExecutionId() != "a" ||
		r.fire[0].LeaseUntil != t0.Add(12*time.Second).UnixNano() {
		t.Fatalf("to the fire holder: %v", r.fire)
	}
	if len(r.now) != 1 || exec(r.now[0]) != "stale" || r.now[0].Lease.CurrentVersion != 4 {
		t.Fatalf("to an executor now: %v", r.now)
	}
	if len(r.again) != 1 || exec(r.again[0]) != "held" || r.again[0].NotBefore != t0.Add(3*time.Second+time.Second).UnixNano() ||
		r.again[0].LeaseHolder != l.calls[0][3].Holder {
		t.Fatalf("held again: %v (keeping its delivery's lease holder)", r.again)
	}
	if len(o.finished) != 1 || o.finished[0] != "dup" || len(o.requeued) != 1 || o.requeued[0] != "held" {
		t.Fatalf("finished %v requeued %v", o.finished, o.requeued)
	}
}

// Redis down: the whole batch waits RetryAfter and is prepared again.
func TestFailedCallHoldsTheBatchAgain(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}
	s, r := newStage(t, Config{RetryAfter: 300 * time.Millisecond}, l, clk)
	o := &owner{}
	s.Prepare(context.Background(), []*work.Item{item(t, o, "a", t0, 0), item(t, o, "b", t0, 0)})
	if len(r.fire) != 0 || len(r.again) != 2 || r.again[1].NotBefore != t0.Add(300*time.Millisecond).UnixNano() {
		t.Fatalf("fire %v again %v", r.fire, r.again)
	}
}

// Jobs with an overlap policy are prepared at their instant; the others
// the lead ahead.
func TestLeadSkipsOverlapJobs(t *testing.T) {
	s, _ := newStage(t, Config{Lead: 3 * time.Second}, &leaser{}, clock.NewFake(t0))
	o := &owner{}
	if d := s.Lead(item(t, o, "a", t0, sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW)); d != 3*time.Second {
		t.Fatalf("allow: lead %s", d)
	}
	// With a grain, prepare instants are rounded down to it: firings due
	// 10 ms and 90 ms into a grain are prepared together.
	g, _ := newStage(t, Config{Lead: 3 * time.Second, Grain: 100 * time.Millisecond}, &leaser{}, clock.NewFake(t0))
	for _, off := range []time.Duration{10 * time.Millisecond, 90 * time.Millisecond} {
		it := item(t, o, "j", t0.Add(off), 0)
		if at := time.Unix(0, it.FireAt).Add(-g.Lead(it)); !at.Equal(t0.Add(-3 * time.Second)) {
			t.Fatalf("due %s after t0: prepared at %s, want %s", off, at, t0.Add(-3*time.Second))
		}
	}
	if d := s.Lead(item(t, o, "b", t0, sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP)); d != 0 {
		t.Fatalf("skip: lead %s", d)
	}
}

// Started, the stage takes whatever was added in batches of at most Batch.
func TestStartedStageBatches(t *testing.T) {
	l := &leaser{}
	s, r := newStage(t, Config{Batch: 4}, l, clock.NewFake(t0))
	o := &owner{}
	for _, id := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"} {
		s.Add(item(t, o, id, t0, 0))
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for range 10 {
		<-r.fired
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if len(c) > 4 {
			t.Fatalf("a call of %d firings, want at most 4", len(c))
		}
	}
	if len(l.calls) < 3 {
		t.Fatalf("%d calls for 10 firings in batches of 4", len(l.calls))
	}
}

// A CRITICAL firing added behind a burst of MEDIUM ones is leased in the
// first batch.
func TestCriticalIsPreparedFirst(t *testing.T) {
	s, _ := newStage(t, Config{Batch: 4}, &leaser{}, clock.NewFake(t0))
	o := &owner{}
	for i := range 10 {
		it := item(t, o, fmt.Sprint("m", i), t0, 0)
		it.Priority = sundialv1.Priority_PRIORITY_MEDIUM
		s.Add(it)
	}
	crit := item(t, o, "crit", t0, 0)
	crit.Priority = sundialv1.Priority_PRIORITY_CRITICAL
	s.Add(crit)
	first := s.take(nil, [4]int{4, 4, 4, 4})
	if len(first) != 4 || exec(first[0]) != "crit" || exec(first[1]) != "m0" || exec(first[3]) != "m2" {
		var ids []string
		for _, it := range first {
			ids = append(ids, exec(it))
		}
		t.Fatalf("first batch %v, want crit then m0, m1, m2", ids)
	}
	n := len(first)
	for b := s.take(nil, [4]int{4, 4, 4, 4}); len(b) > 0; b = s.take(nil, [4]int{4, 4, 4, 4}) {
		n += len(b)
	}
	if n != 11 {
		t.Fatalf("%d firings taken, want 11", n)
	}
}

// A copy of an execution whose marker still waits for Redis (it finished
// here during an outage) is not leased: the lease script would find no
// marker and let it fire again. It is held to be looked at again.
func TestCopyOfAnUnmarkedExecutionIsNotLeased(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{}
	unmarked := map[string]bool{"fired-in-outage": true}
	s, r := newStage(t, Config{Unmarked: func(id string) bool { return unmarked[id] }}, l, clk)
	o := &owner{}
	at := t0.Add(2 * time.Second)
	s.Prepare(context.Background(), []*work.Item{item(t, o, "fired-in-outage", at, 0), item(t, o, "other", at, 0)})
	if len(l.calls) != 1 || len(l.calls[0]) != 1 || l.calls[0][0].Execution.ExecutionID != "other" {
		t.Fatalf("lease calls %v, want one for the other firing only", l.calls)
	}
	if len(r.again) != 1 || exec(r.again[0]) != "fired-in-outage" || r.again[0].NotBefore <= clk.Now().UnixNano() {
		t.Fatalf("held again: %v", r.again)
	}
}

// The firings of one grain, released together by the prepare holder, share
// lease calls: the holder hands the stage a chunk at a time, so the stage
// does not wake on the first firing and lease it alone.
func TestHeldGrainIsLeasedInFullBatches(t *testing.T) {
	const n = 600
	clk := clock.NewFake(t0)
	l := &leaser{}
	s, r := newStage(t, Config{Batch: 256, Lead: 1500 * time.Millisecond, Grain: 100 * time.Millisecond}, l, clk)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	armed := make(chan struct{}, 100)
	h := holder.New(clk, s.Add, holder.WithLead(s.Lead), holder.WithBatchSink(s.AddMany), holder.WithWaitHook(func() { armed <- struct{}{} }))
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	<-armed
	o := &owner{}
	for i := range n {
		// Spread over one grain: 10 s + 0..99 ms.
		h.Add(item(t, o, fmt.Sprint(i), t0.Add(10*time.Second+time.Duration(i%100)*time.Millisecond), 0))
	}
	clk.Set(t0.Add(8600 * time.Millisecond)) // the grain's prepare instant
	for range n {
		<-r.fired
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) > 3 {
		sizes := make([]int, len(l.calls))
		for i, c := range l.calls {
			sizes[i] = len(c)
		}
		t.Fatalf("%d lease calls %v for %d firings of one grain, want 3 (256+256+88)", len(l.calls), sizes, n)
	}
}

// A firing whose lease an earlier delivery took and never marked (it died
// before its marker was written) is not fired again when the ledger holds
// its outcome: it is marked done and dropped. One the ledger does not know
// fires; a first delivery is not looked up at all.
func TestAttemptRecordedByADeadDeliveryIsNotFiredAgain(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{
		"fired-then-died":  {Outcome: lease.Acquired, Fence: 5, Deliveries: 2},
		"died-before-fire": {Outcome: lease.Acquired, Fence: 6, Deliveries: 2},
		"first":            {Outcome: lease.Acquired, Fence: 7, Deliveries: 1},
	}}
	var asked []string
	var mu sync.Mutex
	recorded := func(_ context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, f.GetExecutionId())
		return sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, f.GetExecutionId() == "fired-then-died"
	}
	s, r := newStage(t, Config{Recorded: recorded}, l, clk)
	o := &owner{}
	at := t0.Add(time.Second)
	s.Prepare(context.Background(), []*work.Item{item(t, o, "fired-then-died", at, 0), item(t, o, "died-before-fire", at, 0), item(t, o, "first", at, 0)})
	fired := map[string]bool{}
	for _, it := range r.fire {
		fired[exec(it)] = true
	}
	if fired["fired-then-died"] || !fired["died-before-fire"] || !fired["first"] || len(r.fire) != 2 {
		t.Fatalf("fired %v: want the unrecorded and the first delivery only", fired)
	}
	if len(o.finished) != 1 || o.finished[0] != "fired-then-died" {
		t.Fatalf("finished %v", o.finished)
	}
	if len(l.finished) != 1 || l.finished[0].Execution.ExecutionID != "fired-then-died" || l.finished[0].Mark != lease.FinishDone {
		t.Fatalf("markers %v, want done for the recorded attempt", l.finished)
	}
	for _, id := range asked {
		if id == "first" {
			t.Fatal("the ledger was asked about a first delivery")
		}
	}
}

// Done markers live DoneTTL (an hour by default), not a week: a firing
// staged more than half of that ago, or a backfill's (a slot's own id, for
// a slot that may have run days ago), is asked of the ledger before it
// fires even on its first delivery. One the ledger has is marked and not
// fired; one it has not fires; a fresh firing is not asked about.
func TestFiringsOlderThanTheMarkersAreAskedOfTheLedger(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{}}
	ran := map[string]bool{"old-ran": true, "backfill-ran": true}
	var asked []string
	var mu sync.Mutex
	recorded := func(_ context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, f.GetExecutionId())
		return sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, ran[f.GetExecutionId()]
	}
	s, r := newStage(t, Config{Recorded: recorded, DoneTTL: time.Hour}, l, clk)
	o := &owner{}
	at := t0.Add(time.Second)
	mk := func(id string, staged time.Time, origin sundialv1.FiringOrigin) *work.Item {
		b, err := firing.Encode(&sundialv1.Firing{ExecutionId: id, JobId: "job-" + id, Tenant: "acme", Attempt: 1, JobVersion: 3,
			ScheduledTime: timestamppb.New(at), FireTime: timestamppb.New(at), StagedTime: timestamppb.New(staged), Origin: origin})
		if err != nil {
			t.Fatal(err)
		}
		l.answer[id] = lease.Result{Outcome: lease.Acquired, Fence: 9, Deliveries: 1}
		return &work.Item{Facts: work.Facts{FireAt: at.UnixNano(), Envelope: b, Owner: o}, Hold: work.Hold{HeapIndex: -1}}
	}
	sched := sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE
	s.Prepare(context.Background(), []*work.Item{
		mk("old-ran", t0.Add(-40*time.Minute), sched), mk("old-new", t0.Add(-40*time.Minute), sched),
		mk("backfill-ran", t0, sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL), mk("fresh", t0.Add(-time.Minute), sched),
	})
	fired := map[string]bool{}
	for _, it := range r.fire {
		fired[exec(it)] = true
	}
	if len(fired) != 2 || !fired["old-new"] || !fired["fresh"] {
		t.Fatalf("fired %v, want old-new and fresh only", fired)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"backfill-ran", "old-new", "old-ran"}) {
		t.Fatalf("the ledger was asked about %v, want the old and the backfill only", asked)
	}
	var marked []string
	for _, f := range l.finished {
		marked = append(marked, f.Execution.ExecutionID)
	}
	slices.Sort(marked)
	if !slices.Equal(marked, []string{"backfill-ran", "old-ran"}) {
		t.Fatalf("marked %v, want the two the ledger has", marked)
	}
}

// A firing this worker leased before, whose lease ran out while it waited
// here, is leased again without asking the ledger: the deliveries counted
// are its own, and it fired nothing. Counted once more than its own, it
// is asked about.
func TestOwnEarlierLeaseIsNotADeadDelivery(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{
		"ours-ran-out":    {Outcome: lease.Acquired, Fence: 5, Deliveries: 2},
		"another-took-it": {Outcome: lease.Acquired, Fence: 6, Deliveries: 3},
	}}
	var asked []string
	var mu sync.Mutex
	recorded := func(_ context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, f.GetExecutionId())
		return 0, false
	}
	s, r := newStage(t, Config{Recorded: recorded}, l, clk)
	o := &owner{}
	at := t0.Add(time.Second)
	ours, other := item(t, o, "ours-ran-out", at, 0), item(t, o, "another-took-it", at, 0)
	ours.Acquired, other.Acquired = 1, 1
	s.Prepare(context.Background(), []*work.Item{ours, other})
	if len(r.fire) != 2 {
		t.Fatalf("fired %d, want both (the ledger knows neither)", len(r.fire))
	}
	if len(asked) != 1 || asked[0] != "another-took-it" {
		t.Fatalf("the ledger was asked about %v, want only the one another delivery leased", asked)
	}
	if ours.Acquired != 2 || other.Acquired != 2 {
		t.Fatalf("own acquisitions %d and %d, want 2", ours.Acquired, other.Acquired)
	}
}

// A copy found done by its marker is looked up in the ledger CheckAfter
// later (the worker that finished it may still hold its record). One the
// ledger has is dropped; one it has not — that worker died between marker
// and record — gets a record written from the marker, and finishes once it
// is written; one the ledger could not answer for waits to be looked up
// again.
func TestCopyFoundDoneHasItsRecordInTheLedger(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{
		"recorded":    {Outcome: lease.AlreadyDone, Finished: lease.FinishedSucceeded},
		"lost-ok":     {Outcome: lease.AlreadyDone, Finished: lease.FinishedSucceeded},
		"lost-skip":   {Outcome: lease.AlreadyDone, Finished: lease.FinishedSkipped},
		"lost-failed": {Outcome: lease.AlreadyDone, Finished: lease.FinishedAttempt},
		"unknown":     {Outcome: lease.AlreadyDone, Finished: lease.FinishedSucceeded},
	}}
	var mu sync.Mutex
	var written []*sundialv1.ExecutionAttempt
	cfg := Config{
		CheckAfter: 5 * time.Second,
		HasRecord: func(_ context.Context, f *sundialv1.Firing) (bool, error) {
			switch f.GetExecutionId() {
			case "recorded":
				return true, nil
			case "unknown":
				return false, errors.New("cassandra: no hosts available")
			}
			return false, nil
		},
		RecordLost: func(a *sundialv1.ExecutionAttempt, done func()) bool {
			mu.Lock()
			written = append(written, a)
			mu.Unlock()
			done()
			return true
		},
	}
	s, r := newStage(t, cfg, l, clk)
	o := &owner{}
	at := t0.Add(time.Second)
	var items []*work.Item
	for _, id := range []string{"recorded", "lost-ok", "lost-skip", "lost-failed", "unknown"} {
		items = append(items, item(t, o, id, at, 0))
	}
	s.Prepare(context.Background(), items)
	if len(o.finished) != 0 || len(r.again) != 5 || len(written) != 0 {
		t.Fatalf("first sight: finished %v, %d held again, %d written; want every copy held to be looked up later", o.finished, len(r.again), len(written))
	}
	for _, it := range r.again {
		if it.NotBefore != t0.Add(5*time.Second).UnixNano() {
			t.Fatalf("held until %d, want CheckAfter from now", it.NotBefore)
		}
	}
	r.again = nil
	s.Prepare(context.Background(), items)
	got := map[string]*sundialv1.ExecutionAttempt{}
	for _, a := range written {
		got[a.GetExecutionId()] = a
	}
	want := map[string]sundialv1.ExecutionStatus{
		"lost-ok":     sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
		"lost-skip":   sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
		"lost-failed": sundialv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
	}
	if len(got) != len(want) {
		t.Fatalf("records written for %v, want %v", got, want)
	}
	for id, st := range want {
		a := got[id]
		if a.GetStatus() != st || a.GetFenceToken() != 0 || a.GetAttempt() != 1 || a.GetWorker() != "w1" || a.GetJobId() != "job-"+id ||
			!strings.Contains(a.GetReason(), "done marker") {
			t.Fatalf("record of %s: %v, want %s at fence 0 saying it came from the marker", id, a, st)
		}
	}
	finished := map[string]bool{}
	for _, id := range o.finished {
		finished[id] = true
	}
	if len(o.finished) != 4 || finished["unknown"] || !finished["recorded"] {
		t.Fatalf("finished %v: want all but the one the ledger could not answer for", o.finished)
	}
	if len(r.again) != 1 || exec(r.again[0]) != "unknown" {
		t.Fatalf("held again: %d, want the unanswered one", len(r.again))
	}
}

// A firing another delivery holds looks again when that holder's worker
// would be known dead (its liveness key's end), not when the lease taken
// ahead ends: a killed worker's successor fires its firings within about
// the liveness TTL.
func TestHeldByAnotherLooksAgainWhenItsWorkerWouldBeDead(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{
		"dead?": {Outcome: lease.Held, HeldFor: 6 * time.Second, HolderAliveFor: time.Second},
		"plain": {Outcome: lease.Held, HeldFor: 3 * time.Second},
	}}
	s, r := newStage(t, Config{LeaseTTL: 5 * time.Second}, l, clk)
	o := &owner{}
	s.Prepare(context.Background(), []*work.Item{item(t, o, "dead?", t0, 0), item(t, o, "plain", t0, 0)})
	if len(r.again) != 2 {
		t.Fatalf("held again: %d, want 2", len(r.again))
	}
	for _, it := range r.again {
		want := t0.Add(time.Second + heldAgainMargin)
		if exec(it) == "plain" {
			want = t0.Add(3*time.Second + 500*time.Millisecond)
		}
		if it.NotBefore != want.UnixNano() {
			t.Fatalf("%s looks again at %s, want %s", exec(it), time.Unix(0, it.NotBefore).UTC(), want)
		}
	}
}

// A firing of a job changed since it was staged is dropped unleased, and
// one prepared late that its job's misfire policy does not fire is shed
// with the judge's verdict, unleased, when no delivery ever touched it
// (one read, no lease; recorded in its job's summary). One a delivery
// touched (here: a copy of a finished execution) is leased as any other,
// so its lease call says what became of it — a duplicate, not a misfire —
// and is skipped with a record of its own only when it is not.
func TestChangedAndLateFiringsAreNotLeased(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{touched: map[string]bool{"late-done": true, "late-again": true}, answer: map[string]lease.Result{"late-done": {Outcome: lease.AlreadyDone}}}
	judged := map[string]int{}
	var dropped []string
	var skipped, shed []string
	r := &routes{fired: make(chan struct{}, 16)}
	m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
	s := New(Config{WorkerID: "w1",
		Changed: func(job string, v int64) (int64, bool) { return 9, job == "job-changed" },
		Late: func(f *sundialv1.Firing) misfire.Verdict {
			judged[f.GetExecutionId()]++
			if strings.HasPrefix(f.GetExecutionId(), "late") {
				return misfire.Verdict{Late: time.Minute, Kind: dmisfire.NotReplayed, Reason: "misfire SKIP: not replayed"}
			}
			return misfire.Verdict{Fire: true}
		},
	}, l, Routes{
		Fire:  func(it *work.Item) { r.fire = append(r.fire, it) },
		Drop:  func(it *work.Item, v int64) { dropped = append(dropped, fmt.Sprint(exec(it), "@", v)) },
		Skip:  func(it *work.Item, reason string) { skipped = append(skipped, exec(it)+": "+reason) },
		Shed:  func(it *work.Item, v misfire.Verdict) { shed = append(shed, exec(it)+": "+v.Kind.String()) },
		Now:   func(*work.Item) {},
		Again: func(*work.Item, int64) {},
	}, clk, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	o := &owner{}
	s.Prepare(context.Background(), []*work.Item{item(t, o, "changed", t0, 0), item(t, o, "late", t0, 0), item(t, o, "late-done", t0, 0), item(t, o, "late-again", t0, 0), item(t, o, "fine", t0, 0)})
	if len(dropped) != 1 || dropped[0] != "changed@9" {
		t.Fatalf("dropped %v", dropped)
	}
	if len(shed) != 1 || shed[0] != "late: policy" {
		t.Fatalf("shed %v, want the untouched late one, by policy", shed)
	}
	if len(skipped) != 1 || skipped[0] != "late-again: misfire SKIP: not replayed" {
		t.Fatalf("skipped %v, want the touched one its lease call found not done", skipped)
	}
	if got := strings.Join(l.asked, ","); got != "late,late-done,late-again" {
		t.Fatalf("asked whether untouched: %s, want the three late ones", got)
	}
	if judged["fine"] != 1 || judged["late"] != 1 || judged["late-done"] != 1 || judged["late-again"] != 2 {
		t.Fatalf("judged %v: want each once, and again only the touched one its lease call let through", judged)
	}
	var leased []string
	for _, c := range l.calls {
		for _, a := range c {
			leased = append(leased, a.Execution.ExecutionID)
		}
	}
	if got := strings.Join(leased, ","); got != "fine,late-done,late-again" {
		t.Fatalf("leased %s, want the fine one and the late one a delivery touched (a late copy of a done execution is a duplicate, not a misfire)", got)
	}
	if len(r.fire) != 1 || exec(r.fire[0]) != "fine" {
		t.Fatalf("to the fire holder: %v", r.fire)
	}
	if n := testutil.ToFloat64(m.Firings.WithLabelValues(firing.PriorityName(sundialv1.Priority_PRIORITY_UNSPECIFIED), "misfire_skipped", m.Tenant("acme"))); n != 2 {
		t.Fatalf("misfire_skipped counted %v, want 2", n)
	}
}

// A slot its job's overlap policy held behind a running execution is late
// by the job's own choice when it is prepared again: BUFFER_ALL asked for
// every slot to run once the running one ends. It is leased and fired, not
// judged a misfire, however late; one that never waited still is.
func TestSlotHeldBackByItsOverlapPolicyIsNotAMisfire(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{"queued": {Outcome: lease.Waiting, HeldFor: 5 * time.Second}}}
	var judged, skipped, shed []string
	r := &routes{fired: make(chan struct{}, 16)}
	m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
	s := New(Config{WorkerID: "w1", LeaseTTL: 5 * time.Second,
		Late: func(f *sundialv1.Firing) misfire.Verdict {
			judged = append(judged, f.GetExecutionId())
			if late := clk.Now().Sub(f.GetFireTime().AsTime()); late > 5*time.Second {
				return misfire.Verdict{Late: late, Kind: dmisfire.NotReplayed, Reason: "misfire RUN_ONCE: superseded"}
			}
			return misfire.Verdict{Fire: true}
		},
	}, l, Routes{
		Fire:  func(it *work.Item) { r.fire = append(r.fire, it) },
		Skip:  func(it *work.Item, reason string) { skipped = append(skipped, exec(it)) },
		Shed:  func(it *work.Item, _ misfire.Verdict) { shed = append(shed, exec(it)) },
		Now:   func(*work.Item) {},
		Again: func(it *work.Item, _ int64) { r.again = append(r.again, it) },
	}, clk, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	o := &owner{}
	queued := item(t, o, "queued", t0, sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL)
	s.Prepare(context.Background(), []*work.Item{queued})
	if len(r.again) != 1 || len(r.fire) != 0 {
		t.Fatalf("held again %d, fired %d: want the slot waiting behind the running one", len(r.again), len(r.fire))
	}

	// The running execution ends 20 s later; the slot is prepared again,
	// beside a slot of another job that reaches the stage as late.
	clk.Advance(20 * time.Second)
	l.answer = nil
	s.Prepare(context.Background(), []*work.Item{queued, item(t, o, "behind", t0, sundialv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ALL)})
	if len(r.fire) != 1 || exec(r.fire[0]) != "queued" {
		t.Fatalf("fired %v, want the slot that waited behind its job's execution", r.fire)
	}
	if got := strings.Join(judged, ","); got != "queued,behind" {
		t.Fatalf("judged %s, want the waiting slot judged once (on time, when it first came) and the late newcomer", got)
	}
	if len(skipped)+len(shed) != 1 || append(skipped, shed...)[0] != "behind" {
		t.Fatalf("skipped %v shed %v, want only the slot that reached the stage late without waiting", skipped, shed)
	}
}

// A firing a limit made wait (its tenant's quota, its host's rate) whose
// lease ran low meanwhile is leased again without being judged: it fires
// late rather than failing, whatever its job's misfire policy.
func TestFiringHeldBackByALimitIsNotAMisfire(t *testing.T) {
	clk := clock.NewFake(t0.Add(20 * time.Second))
	judged := 0
	var skipped []string
	r := &routes{fired: make(chan struct{}, 16)}
	m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
	s := New(Config{WorkerID: "w1", LeaseTTL: 5 * time.Second,
		Late: func(*sundialv1.Firing) misfire.Verdict {
			judged++
			return misfire.Verdict{Late: 20 * time.Second, Kind: dmisfire.NotReplayed, Reason: "misfire SKIP: not replayed"}
		},
	}, &leaser{}, Routes{
		Fire:  func(it *work.Item) { r.fire = append(r.fire, it) },
		Skip:  func(it *work.Item, _ string) { skipped = append(skipped, exec(it)) },
		Shed:  func(it *work.Item, _ misfire.Verdict) { skipped = append(skipped, exec(it)) },
		Now:   func(*work.Item) {},
		Again: func(*work.Item, int64) {},
	}, clk, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	limited := item(t, &owner{}, "limited", t0, 0)
	limited.LimitWaited = true
	s.Prepare(context.Background(), []*work.Item{limited})
	if judged != 0 || len(skipped) != 0 || len(r.fire) != 1 {
		t.Fatalf("judged %d, skipped %v, fired %d: want it leased and fired unjudged", judged, skipped, len(r.fire))
	}
}

// When Redis cannot say whether a late firing was touched, it is neither
// skipped nor leased: it waits to be judged again.
func TestLateFiringWaitsWhenRedisCannotSay(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{untouchErr: errors.New("redis: connection refused")}
	var skipped []string
	var again []*work.Item
	m := metrics.New(prometheus.NewRegistry(), metrics.DefaultMaxTenants)
	s := New(Config{WorkerID: "w1", RetryAfter: 250 * time.Millisecond,
		Late: func(*sundialv1.Firing) misfire.Verdict {
			return misfire.Verdict{Late: time.Minute, Kind: dmisfire.NotReplayed, Reason: "misfire SKIP: not replayed"}
		},
	}, l, Routes{
		Fire:  func(*work.Item) { t.Fatal("a late firing fired") },
		Skip:  func(it *work.Item, reason string) { skipped = append(skipped, exec(it)) },
		Shed:  func(it *work.Item, _ misfire.Verdict) { skipped = append(skipped, exec(it)) },
		Now:   func(*work.Item) {},
		Again: func(it *work.Item, _ int64) { again = append(again, it) },
	}, clk, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Prepare(context.Background(), []*work.Item{item(t, &owner{}, "late", t0, 0)})
	if len(skipped) != 0 || len(l.calls) != 0 {
		t.Fatalf("skipped %v, leased %v: want neither while Redis cannot say", skipped, l.calls)
	}
	if len(again) != 1 || exec(again[0]) != "late" {
		t.Fatalf("held again: %v, want the late firing", again)
	}
}

// The ledger is asked about a dead delivery's firings off the stage's
// loop: while it is slow to answer, the stage goes on leasing later
// firings (a worker taking over a dead one's partitions fired nothing for
// seconds while it verified them in line).
func TestSlowLedgerCheckDoesNotHoldBackLaterFirings(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{"suspect": {Outcome: lease.Acquired, Fence: 7, Deliveries: 2}}}
	release := make(chan struct{})
	asked := make(chan struct{}, 1)
	s, r := newStage(t, Config{Recorded: func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
		asked <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, false
	}}, l, clk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	defer s.Stop()
	o := &owner{}
	s.Add(item(t, o, "suspect", t0, 0))
	<-asked
	s.Add(item(t, o, "later", t0, 0))
	<-r.fired
	r.mu.Lock()
	first := exec(r.fire[0])
	r.mu.Unlock()
	if first != "later" {
		t.Fatalf("fired %s first, want the later firing while the ledger check waits", first)
	}
	close(release)
	<-r.fired
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fire) != 2 || exec(r.fire[1]) != "suspect" {
		t.Fatalf("fired %d, want the suspect too once the ledger answered", len(r.fire))
	}
}

// A dead delivery's firings wait for the ledger at most VerifyWithin: the
// ones it has not answered for by then fire (the target dedupes by
// Idempotency-Key), so a busy Cassandra does not make a takeover's
// firings seconds late.
func TestUnansweredLedgerCheckFiresWithinItsBound(t *testing.T) {
	clk := clock.NewFake(t0)
	l := &leaser{answer: map[string]lease.Result{}}
	var items []*work.Item
	o := &owner{}
	for i := range 100 {
		id := fmt.Sprint("suspect-", i)
		l.answer[id] = lease.Result{Outcome: lease.Acquired, Fence: 7, Deliveries: 2}
		items = append(items, item(t, o, id, t0, 0))
	}
	s, r := newStage(t, Config{VerifyWithin: 50 * time.Millisecond, Recorded: func(ctx context.Context, f *sundialv1.Firing) (sundialv1.ExecutionStatus, bool) {
		<-ctx.Done() // a ledger that does not answer
		return 0, false
	}}, l, clk)
	started := time.Now()
	s.Prepare(context.Background(), items)
	took := time.Since(started)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fire) != 100 {
		t.Fatalf("%d fired, want all 100 once the ledger's time was up", len(r.fire))
	}
	if took > time.Second {
		t.Fatalf("took %s for 100 unanswered checks bounded by 50 ms", took)
	}
}
