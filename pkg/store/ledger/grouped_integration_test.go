//go:build integration

package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// counting counts the batches and queries that reach Cassandra.
type counting struct {
	ledger.Session
	mu      sync.Mutex
	batches []int // statements per batch
	queries atomic.Int64
}

func (c *counting) ExecBatch(ctx context.Context, b ledger.Batch) error {
	c.mu.Lock()
	c.batches = append(c.batches, len(b.Statements))
	c.mu.Unlock()
	return c.Session.ExecBatch(ctx, b)
}

func (c *counting) Iter(ctx context.Context, st ledger.Statement) ledger.Iter {
	c.queries.Add(1)
	return c.Session.Iter(ctx, st)
}

// failIndex fails every batch of the execution index while down is set.
type failIndex struct {
	ledger.Session
	down atomic.Bool
}

func (f *failIndex) ExecBatch(ctx context.Context, b ledger.Batch) error {
	if f.down.Load() && strings.Contains(b.Statements[0].CQL, ledger.TableIndex) {
		return errors.New("injected: coordinator timeout")
	}
	return f.Session.ExecBatch(ctx, b)
}

// A herd of 600 jobs due in the same second is written in about one batch
// per partition (Buckets of them for the records, as many for the index),
// every record lands, each job's history is one query and each execution
// is found by id.
func TestRecordManyGroupsByPartition(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	c := &counting{Session: s}
	w := ledger.NewWriter(c, ks)
	// Noon of today: the reader starts its walk at the day of now plus an
	// hour, so slots and a reader clock in a day's last hour would read
	// tomorrow's empty partition first (two queries, from 23:00 UTC on).
	sched := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
	const herd = 600
	jobs := make([]uuid.UUID, herd)
	recs := make([]ledger.Rec, 0, 2*herd)
	for i := range jobs {
		jobs[i] = uuid.New()
		// Two slots a second apart for each job: the history must order them.
		recs = append(recs,
			ledger.Rec{Attempt: attempt(jobs[i], sched, 1, 7, succeeded), Held: true},
			ledger.Rec{Attempt: attempt(jobs[i], sched.Add(-time.Second), 1, 7, failed), Held: true})
	}
	if errs := w.RecordMany(ctx, recs); errs != nil {
		t.Fatal(errors.Join(errs...))
	}
	// One batch per partition touched; both slots of a job share a
	// partition unless the second straddles midnight. The tenant's
	// copies (one tenant, at most two hours) take a few batches of their
	// own, split by the batch caps (200 rows, ~40 KiB).
	if n, most := len(c.batches), 2*2*ledger.Buckets+2*12; n > most {
		t.Fatalf("%d batches for %d records, want at most %d", n, len(recs), most)
	}
	total := 0
	for _, n := range c.batches {
		total += n
	}
	if total != 3*len(recs) {
		t.Fatalf("%d statements, want %d (record, index entry and tenant copy each)", total, 3*len(recs))
	}

	r := ledger.NewReader(c, ks, ledger.WithoutLegacy(), ledger.WithClock(clock.NewFake(sched.Add(time.Minute))))
	for _, j := range jobs[:20] {
		before := c.queries.Load()
		page, _, err := r.ListByJob(ctx, j.String(), 2, "")
		if err != nil {
			t.Fatal(err)
		}
		if q := c.queries.Load() - before; q != 1 {
			t.Fatalf("history of one job took %d queries", q)
		}
		if len(page) != 2 || page[0].GetStatus() != succeeded || page[1].GetStatus() != failed ||
			!page[0].GetScheduledTime().AsTime().After(page[1].GetScheduledTime().AsTime()) {
			t.Fatalf("history of %s: %v", j, page)
		}
		got, err := r.GetExecution(ctx, page[1].GetExecutionId())
		if err != nil || len(got) != 1 || got[0].GetStatus() != failed || got[0].GetJobId() != j.String() {
			t.Fatalf("GetExecution: %v, %v", got, err)
		}
	}
}

// RecordMany keeps Record's fence semantics record by record: a checked
// record below a recorded fence is stored but reported ErrFenced, a held
// one is not checked, and invalid records fail alone.
func TestRecordManyFencing(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(s, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	if err := w.RecordHeld(ctx, attempt(job, sched, 1, 20, succeeded)); err != nil {
		t.Fatal(err)
	}
	other := attempt(job, sched.Add(time.Second), 1, 5, succeeded)
	errs := w.RecordMany(ctx, []ledger.Rec{
		{Attempt: attempt(job, sched, 1, 10, failed)},             // checked, stale
		{Attempt: attempt(job, sched, 1, 11, failed), Held: true}, // held: not checked
		{Attempt: other}, // checked, current
		{Attempt: &sundialv1.ExecutionAttempt{JobId: job.String()}},
	})
	if len(errs) != 4 || !errors.Is(errs[0], ledger.ErrFenced) || errs[1] != nil || errs[2] != nil ||
		!errors.Is(errs[3], ledger.ErrInvalidAttempt) {
		t.Fatalf("errs %v", errs)
	}
	got, err := r.GetExecution(ctx, attempt(job, sched, 1, 0, running).ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	// The live row (fence 20) first, both stale holders shown as FENCED.
	if len(got) != 3 || got[0].GetFenceToken() != 20 || got[0].GetStatus() != succeeded ||
		got[1].GetStatus() != fenced || got[2].GetStatus() != fenced {
		t.Fatalf("GetExecution: %v", got)
	}
}

// When a group's write fails in part (here: every index batch), RecordMany
// reports exactly the records not written, writes nothing those records
// would show in history without their index entry, and a retry of the
// whole group (idempotent) leaves every record readable once.
func TestRecordManyPartialFailureThenRetry(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	f := &failIndex{Session: s}
	f.down.Store(true)
	// Every slot is today's, so a two-day lookback reads the day that
	// holds them (a duplicate row included) without a query per day of
	// the default lookback for each of the 50 histories.
	w, r := ledger.NewWriter(f, ks), ledger.NewReader(s, ks, ledger.WithoutLegacy(), ledger.WithLookback(48*time.Hour))
	sched := time.Now().UTC().Truncate(time.Second)
	var recs []ledger.Rec
	for range 50 {
		recs = append(recs, ledger.Rec{Attempt: attempt(uuid.New(), sched, 1, 3, succeeded), Held: true})
	}
	errs := w.RecordMany(ctx, recs)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if page, _, err := r.ListByJob(ctx, recs[0].Attempt.GetJobId(), 10, ""); err != nil || len(page) != 0 {
		t.Fatalf("a record without its index entry is listed: %v %v", page, err)
	}
	f.down.Store(false)
	for range 2 { // a retry, and a duplicate delivery of the same group
		if errs := w.RecordMany(ctx, recs); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
	}
	for _, rc := range recs {
		got, err := r.GetExecution(ctx, rc.Attempt.GetExecutionId())
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: %v %v", rc.Attempt.GetExecutionId(), got, err)
		}
		page, _, err := r.ListByJob(ctx, rc.Attempt.GetJobId(), 10, "")
		if err != nil || len(page) != 1 {
			t.Fatalf("history %s: %v %v", rc.Attempt.GetJobId(), page, err)
		}
	}
}

// Rows written by the first layout (before the upgrade) stay readable: by
// id, and at the end of a job's history after the new layout's rows.
func TestReaderFallsBackToLegacyTables(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	now := time.Now().UTC().Truncate(time.Second)
	r := ledger.NewReader(s, ks, ledger.WithClock(clock.NewFake(now)))
	job := uuid.New()
	old := attempt(job, now.Add(-48*time.Hour), 1, 1, succeeded)
	if err := ledger.NewWriter(s, ks, ledger.WithLegacyLayout()).Record(ctx, old); err != nil {
		t.Fatal(err)
	}
	fresh := attempt(job, now.Add(-time.Hour), 1, 1, succeeded)
	if err := ledger.NewWriter(s, ks).Record(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got, err := r.GetExecution(ctx, old.ExecutionId); err != nil || len(got) != 1 {
		t.Fatalf("legacy GetExecution: %v %v", got, err)
	}
	var ids []string
	tok := ""
	for range 200 {
		page, next, err := r.ListByJob(ctx, job.String(), 1, tok)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page {
			ids = append(ids, a.ExecutionId)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if fmt.Sprint(ids) != fmt.Sprint([]string{fresh.ExecutionId, old.ExecutionId}) {
		t.Fatalf("history %v, want the new row then the legacy one", ids)
	}
}

// An execution read by its job and slot is the one read by id, at one
// query against two (the id's index, then the slice); another slot of the
// same job finds nothing, and the arguments are checked before any read.
func TestGetSlotExecution(t *testing.T) {
	s, ks := testLedger(t)
	ctx := ctxFor(t)
	c := &counting{Session: s}
	w, r := ledger.NewWriter(s, ks), ledger.NewReader(c, ks)
	job := uuid.New()
	sched := time.Now().UTC().Truncate(time.Second)
	for _, a := range []*sundialv1.ExecutionAttempt{
		attempt(job, sched, 1, 10, failed),
		attempt(job, sched, 2, 11, running),
		attempt(job, sched, 2, 12, succeeded),
	} {
		if err := w.RecordHeld(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	id := attempt(job, sched, 1, 0, running).ExecutionId
	before := c.queries.Load()
	bySlot, err := r.GetSlotExecution(ctx, job.String(), sched, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.queries.Load() - before; n != 1 {
		t.Fatalf("GetSlotExecution made %d queries, want 1", n)
	}
	byID, err := r.GetExecution(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(bySlot, byID, func(a, b *sundialv1.ExecutionAttempt) bool { return proto.Equal(a, b) }) {
		t.Fatalf("by slot %v\nby id   %v", bySlot, byID)
	}
	// Attempt 1 first, then attempt 2's live row (fence 12) and the row
	// it superseded.
	if len(bySlot) != 3 || bySlot[0].GetAttempt() != 1 || bySlot[1].GetStatus() != succeeded || bySlot[1].GetFenceToken() != 12 {
		t.Fatalf("GetSlotExecution: %v", bySlot)
	}
	if _, err := r.GetSlotExecution(ctx, job.String(), sched.Add(time.Second), id); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("another slot: %v, want ErrNotFound", err)
	}
	before = c.queries.Load()
	for name, call := range map[string]func() error{
		"job id":         func() error { _, err := r.GetSlotExecution(ctx, "", sched, id); return err },
		"scheduled time": func() error { _, err := r.GetSlotExecution(ctx, job.String(), time.Time{}, id); return err },
		"execution id":   func() error { _, err := r.GetSlotExecution(ctx, job.String(), sched, ""); return err },
	} {
		if err := call(); !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
			t.Errorf("empty %s: %v, want ErrInvalidArgument naming it", name, err)
		}
	}
	if n := c.queries.Load() - before; n != 0 {
		t.Fatalf("bad arguments made %d queries", n)
	}
}
