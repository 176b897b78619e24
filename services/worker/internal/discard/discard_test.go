package discard

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/misfire"
	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/holder"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// owner is a partition that counts what it is told. Claim refuses items
// it has given up (gone).
type owner struct {
	mu       sync.Mutex
	finished map[*work.Item]int
	gone     map[*work.Item]bool
	released int
}

func newOwner() *owner { return &owner{finished: map[*work.Item]int{}, gone: map[*work.Item]bool{}} }

func (o *owner) Claim(it *work.Item) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone[it] || it.State != work.Held {
		return false
	}
	it.State = work.Executing
	return true
}

func (o *owner) Finish(it *work.Item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[it]++
	it.State = work.Finished
}

func (o *owner) Requeue(*work.Item) bool { return false }

func (o *owner) Release(it *work.Item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if it.State == work.Executing {
		it.State = work.Released
		it.Envelope, it.Firing = nil, nil // as a partition lets go of a released firing
		o.released++
	}
}

func (o *owner) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.finished)
}

// recorder keeps what it is handed and calls done only when released.
type recorder struct {
	mu   sync.Mutex
	recs []*sundialv1.ExecutionAttempt
	done []func()
	got  chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 100)} }

func (r *recorder) Final(_ context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool {
	if !held {
		panic("a skip is written without the fence check")
	}
	r.mu.Lock()
	r.recs = append(r.recs, a)
	r.done = append(r.done, done)
	r.mu.Unlock()
	r.got <- struct{}{}
	return true
}

func (r *recorder) release() {
	r.mu.Lock()
	done := r.done
	r.done = nil
	r.mu.Unlock()
	for _, d := range done {
		d()
	}
}

func item(o *owner, job string, version int64, fireAt time.Time) *work.Item {
	return &work.Item{Facts: work.Facts{JobID: job, JobVersion: version, Tenant: "acme", FireAt: fireAt.UnixNano(), Owner: o},
		Hold: work.Hold{HeapIndex: -1}, Owned: work.Owned{State: work.Held}}
}

func claimed(o *owner, job string, version int64, fireAt time.Time) *work.Item {
	it := item(o, job, version, fireAt)
	o.Claim(it)
	return it
}

func TestOneRecordPerJobAndReasonAndItemsFinishedOnlyAfterIt(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	s := NewSummarizer(rec, Config{WorkerID: "w1", Linger: 2 * time.Second}, clk, discardLog)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)

	// Job a, version 3 superseded by 4: 120 per-second slots. Job a's
	// version 2 (an older edit's leftovers) and job b are groups of their
	// own.
	for i := range 120 {
		s.Drop(claimed(o, "a", 3, t0.Add(time.Duration(119-i)*time.Second)), 4) // any order
	}
	s.Drop(claimed(o, "a", 2, t0.Add(time.Hour)), 4)
	s.Drop(claimed(o, "b", 7, t0.Add(time.Minute)), 9)
	s.Drop(claimed(o, "b", 7, t0.Add(2*time.Minute)), 9)
	require.Equal(t, 123, s.Pending())
	o.mu.Lock()
	require.Equal(t, 123, o.released, "each dropped firing is released at once, before its record")
	o.mu.Unlock()

	// The loop's timer is re-armed by its goroutine: move the clock in
	// steps until the three groups, lingered 2 s, are written.
	for n := 0; n < 3; {
		select {
		case <-rec.got:
			n++
		case <-time.After(5 * time.Millisecond):
			clk.Advance(250 * time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, clk.Now().Sub(t0), 2*time.Second, "written before the linger")
	require.Zero(t, s.Pending())
	require.Zero(t, o.count(), "nothing is finished before its record is written")

	byID := map[string]*sundialv1.ExecutionAttempt{}
	for _, a := range rec.recs {
		byID[a.GetJobId()+"/"+a.GetReason()[:3]] = a
		require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, a.GetStatus())
		require.Equal(t, int32(1), a.GetAttempt())
		require.Equal(t, "w1", a.GetWorker())
		require.Equal(t, "acme", a.GetTenant())
		require.Zero(t, a.GetFenceToken())
	}
	require.Len(t, rec.recs, 3, "one record per job and reason")
	a := byID["a/120"]
	require.NotNil(t, a)
	require.Equal(t, "120 slots due from 2026-11-28T12:00:00Z to 2026-11-28T12:01:59Z dropped: job version 3 superseded by 4 (the job was paused, updated or deleted)", a.GetReason())
	require.Equal(t, t0, a.GetScheduledTime().AsTime(), "recorded at the first dropped slot")
	require.Equal(t, int64(3), a.GetJobVersion())
	require.Equal(t, firing.DroppedID("a", 3, 4, t0.UnixNano()), a.GetExecutionId())
	require.NotNil(t, byID["b/2 s"])
	require.Contains(t, byID["b/2 s"].GetReason(), "job version 7 superseded by 9")

	rec.release()
	require.Equal(t, 123, o.count())
	for it, n := range o.finished {
		require.Equal(t, 1, n, "finished once: %s", it.JobID)
	}
}

// Late firings shed by their jobs' misfire policies make one record per
// job and version, after the shed linger (longer than a drop's), counting
// each kind; a drop in the same job stays a record of its own, and nothing
// is finished before its record is written.
func TestShedLateFiringsMakeOneRecordPerJobAfterTheShedLinger(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	s := NewSummarizer(rec, Config{WorkerID: "w1", Linger: time.Second, ShedLinger: 5 * time.Second}, clk, discardLog)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	once := &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, Grace: durationpb.New(time.Minute)}
	late := func(job string, version int64, at time.Time) *work.Item {
		it := claimed(o, job, version, at)
		it.Firing = &sundialv1.Firing{JobId: job, Misfire: once}
		return it
	}
	for i := range 4 {
		s.Shed(late("a", 3, t0.Add(time.Duration(i)*time.Second)), misfire.NotReplayed)
	}
	s.Shed(late("a", 3, t0.Add(-2*time.Minute)), misfire.Expired)
	s.Shed(late("a", 2, t0), misfire.NotReplayed)
	s.Drop(claimed(o, "a", 3, t0.Add(time.Hour)), 4)
	require.Equal(t, 7, s.Pending())

	for n := 0; n < 3; {
		select {
		case <-rec.got:
			n++
			if n == 1 {
				require.Less(t, clk.Now().Sub(t0), 5*time.Second, "the drop waits its own linger only")
			}
		case <-time.After(5 * time.Millisecond):
			clk.Advance(250 * time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, clk.Now().Sub(t0), 5*time.Second, "shed firings written before the shed linger")
	require.Zero(t, o.count(), "nothing is finished before its record is written")
	byID := map[string]*sundialv1.ExecutionAttempt{}
	for _, a := range rec.recs {
		byID[a.GetExecutionId()] = a
		require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, a.GetStatus())
	}
	a3 := byID[firing.ShedID("a", 3, t0.Add(-2*time.Minute).UnixNano())]
	require.NotNil(t, a3, "records: %v", rec.recs)
	require.Equal(t, "misfire: 5 slots from 2026-11-28T11:58:00Z to 2026-11-28T12:00:03Z reached the worker late and were skipped:"+
		" 1 older than the grace of 1m; 4 not replayed by policy RUN_ONCE", a3.GetReason())
	require.Equal(t, t0.Add(-2*time.Minute), a3.GetScheduledTime().AsTime(), "recorded at the first shed slot")
	require.Equal(t, int64(3), a3.GetJobVersion())
	require.Equal(t, "w1", a3.GetWorker())
	require.NotNil(t, byID[firing.ShedID("a", 2, t0.UnixNano())], "another version is another record")
	require.NotNil(t, byID[firing.DroppedID("a", 3, 4, t0.Add(time.Hour).UnixNano())], "a drop is a record of its own")
	require.NotEqual(t, firing.ShedID("a", 3, t0.UnixNano()), firing.DroppedID("a", 3, 0, t0.UnixNano()))

	rec.release()
	require.Equal(t, 7, o.count())
}

func TestALargeGroupIsWrittenWithoutLingering(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	s := NewSummarizer(rec, Config{Linger: time.Hour, MaxGroup: 100}, clk, discardLog)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	for i := range 100 {
		s.Drop(claimed(o, "a", 1, t0.Add(time.Duration(i)*time.Second)), 2)
	}
	<-rec.got
	require.Contains(t, rec.recs[0].GetReason(), "100 slots due from")
}

func TestSummaryIDIsStableAndApartFromExecutions(t *testing.T) {
	id := firing.DroppedID("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", 3, 4, t0.UnixNano())
	require.Equal(t, id, firing.DroppedID("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", 3, 4, t0.UnixNano()))
	require.NotEqual(t, id, firing.DroppedID("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", 3, 5, t0.UnixNano()))
	require.NotEqual(t, id, firing.DroppedID("0192f0c4-6a3e-7c1a-9b1e-3f2a1c0d9e8f", 3, 4, t0.UnixNano()+1))
}

func TestStoppedRecorderLeavesTheFiringsUnfinished(t *testing.T) {
	clk := clock.NewFake(t0)
	o := newOwner()
	s := NewSummarizer(stopped{}, Config{Linger: time.Second}, clk, discardLog)
	s.Drop(claimed(o, "a", 1, t0), 2)
	s.flush(context.Background()) // not lingered yet: kept
	require.Equal(t, 1, s.Pending())
	clk.Advance(time.Second)
	s.flush(context.Background())
	require.Zero(t, o.count(), "redelivered after a restart, never committed past unrecorded")
}

type stopped struct{ Recorder }

func (stopped) Final(context.Context, *sundialv1.ExecutionAttempt, bool, func()) bool { return false }

// The sweeper takes a changed job's older firings out of every holder in
// one pass and leaves the rest; announcements are coalesced.
func TestSweepDropsOlderVersionsOfChangedJobsOnly(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	s := NewSummarizer(rec, Config{Linger: time.Second}, clk, discardLog)
	prep := holder.New(clk, func(*work.Item) {})
	fire := holder.New(clk, func(*work.Item) {})
	w := NewSweeper([]Holder{prep, Claimed{fire}}, s, 0, clk, discardLog)

	var gone *work.Item
	for i := range 200 {
		at := t0.Add(time.Duration(i+1) * time.Second)
		prep.Add(item(o, "a", 1, at)) // a changes to 2: dropped
		kept := item(o, "a", 2, at)   // already the new version: kept
		o.Claim(kept)                 // the fire holder's are claimed
		fire.Add(kept)
		it := item(o, "b", 5, at) // b is not announced: kept
		prep.Add(it)
		if i == 0 {
			gone = item(o, "c", 1, at) // its partition went away
			o.gone[gone] = true
			prep.Add(gone)
		}
	}
	leased := item(o, "d", 1, t0.Add(time.Second)) // claimed and leased: dropped as it is
	o.Claim(leased)
	fire.Add(leased)
	w.Changed("a", 2)
	w.Changed("c", 3)
	w.Changed("d", 2)
	w.Changed("a", 2) // repeated: one sweep all the same
	require.Equal(t, 201, w.Sweep())
	require.Equal(t, 200, prep.Len())
	require.Equal(t, 200, fire.Len())
	require.Equal(t, 201, s.Pending())
	require.Zero(t, w.Sweep(), "nothing new announced")

	clk.Advance(time.Second)
	s.flush(context.Background())
	<-rec.got
	<-rec.got
	require.Len(t, rec.recs, 2)
	reasons := rec.recs[0].GetReason() + " | " + rec.recs[1].GetReason()
	require.Contains(t, reasons, "200 slots due from 2026-11-28T12:00:01Z to 2026-11-28T12:03:20Z dropped: job version 1 superseded by 2")
	rec.release()
	require.Equal(t, 201, o.count())
	require.Equal(t, 1, o.finished[leased])
	require.Zero(t, o.finished[gone], "not ours to finish")
}

// The loop sweeps once per window of announcements.
func TestSweeperLoopCoalescesAnnouncements(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	s := NewSummarizer(rec, Config{Linger: time.Second}, clk, discardLog)
	h := &countingHolder{Holder: holder.New(clk, func(*work.Item) {})}
	w := NewSweeper([]Holder{h}, s, 200*time.Millisecond, clk, discardLog)
	for j := range 3000 {
		h.Holder.Add(item(o, "job"+string(rune('A'+j%26))+time.Duration(j).String(), 1, t0.Add(time.Minute)))
	}
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	for j := range 3000 {
		w.Changed("job"+string(rune('A'+j%26))+time.Duration(j).String(), 2)
	}
	require.Eventually(t, func() bool { clk.Advance(50 * time.Millisecond); return s.Pending() == 3000 }, 5*time.Second, time.Millisecond)
	require.LessOrEqual(t, h.scans.Load(), int64(3), "3,000 announcements, a few scans")
	require.Zero(t, h.Holder.Len())
}

type countingHolder struct {
	*holder.Holder
	scans atomic.Int64
}

func (c *countingHolder) RemoveIf(drop func(*work.Item) bool) []*work.Item {
	out := c.Holder.RemoveIf(drop)
	c.scans.Add(1)
	return out
}

func TestConfigValidateNamesTheField(t *testing.T) {
	require.ErrorContains(t, Config{Linger: -1}.Validate(), "discard-linger")
	require.ErrorContains(t, Config{MaxGroup: -1}.Validate(), "discard-max-group")
}

// Once enough dropped firings are finished and none is pending, the
// memory they held is handed back, once per such batch.
func TestMemoryIsReturnedAfterALargeDrop(t *testing.T) {
	clk := clock.NewFake(t0)
	rec, o := newRecorder(), newOwner()
	returned := make(chan struct{}, 10)
	s := NewSummarizer(rec, Config{WorkerID: "w1", Linger: 2 * time.Second, ReturnAfter: 5,
		ReturnMemory: func() { returned <- struct{}{} }}, clk, discardLog)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)

	// step moves the clock in the loop's ticks for a while, or until a
	// record is handed in (the loop re-arms its timer itself).
	step := func(n int, wantRecord bool) {
		t.Helper()
		for range n {
			select {
			case <-rec.got:
				if wantRecord {
					return
				}
				t.Fatal("an unexpected record")
			case <-time.After(5 * time.Millisecond):
				clk.Advance(500 * time.Millisecond)
			}
		}
		if wantRecord {
			t.Fatal("no record within the steps")
		}
	}
	for i := range 3 {
		s.Drop(claimed(o, "a", 1, t0.Add(time.Duration(i)*time.Second)), 2)
	}
	step(100, true)
	rec.release()
	step(10, false)
	require.Empty(t, returned, "3 finished drops are below ReturnAfter")

	for i := range 4 {
		s.Drop(claimed(o, "b", 1, t0.Add(time.Duration(i)*time.Second)), 2)
	}
	step(100, true)
	step(10, false)
	require.Empty(t, returned, "not before the drops' record is written")
	rec.release()
	step(10, false)
	require.Len(t, returned, 1, "7 finished drops, none pending: returned once")
	step(10, false)
	require.Len(t, returned, 1, "returned again without new drops")

	// Shed late firings, however many, do not hand memory back.
	for i := range 20 {
		it := claimed(o, "c", 1, t0.Add(time.Duration(i)*time.Second))
		it.Firing = &sundialv1.Firing{JobId: "c"}
		s.Shed(it, misfire.NotReplayed)
	}
	step(100, true)
	rec.release()
	step(10, false)
	require.Len(t, returned, 1, "20 finished shed firings, none pending: memory kept")
}
