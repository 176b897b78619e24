package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sundialhq/sundial/pkg/process/clock"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ErrFenced is returned (wrapped) by Writer.Record when the ledger already
// holds a record of the same attempt under a higher fence token: the caller's
// lease was taken over, so its result is stale. The stale record is still
// stored, under its own fence, and readers report it as FENCED; it never
// overwrites the newer one. Do not retry on ErrFenced.
var ErrFenced = errors.New("ledger: attempt already recorded under a higher fence token")

// Batch limits of RecordMany. A batch is one Cassandra mutation of one
// partition; the byte cap keeps it under the server's
// batch_size_fail_threshold (50 KiB by default) with room for overhead.
const (
	maxBatchRows  = 200
	maxBatchBytes = 40 << 10
	// parallel bounds the batches and fence reads one RecordMany has in
	// flight at once.
	parallel = 16
)

// Writer records execution attempts. It is safe for concurrent use.
type Writer struct {
	s          Session
	keyspace   string
	clock      clock.Clock
	legacy     bool
	noIndex    bool
	noTenant   bool
	logged     bool
	checkFence bool
	// columns writes each record's fields as columns (WithColumnRecords)
	// instead of one packed cell.
	columns bool
	// ttl, when set, names each row's time to live by its tenant (USING
	// TTL); nil leaves every row to the tables' default (TTL).
	ttl func(tenant string) time.Duration

	insertAttempt, insertIndex, insertTenant, maxFence string
	// The packed records' statements (the default).
	packAttempt, packTenant string
	// The first layout's statements (WithLegacyLayout).
	insertByJob, insertByID, maxFenceByID string
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// WithLegacyLayout writes the first layout instead: each record into
// executions_by_job and executions_by_id, one batch per record. Kept to
// measure against (see DESIGN.md) and to test the Reader's fallback to rows
// written before the upgrade.
func WithLegacyLayout() WriterOption { return func(w *Writer) { w.legacy = true } }

// WithUnloggedBatch writes the legacy layout's two tables in an unlogged
// batch instead of a logged one. Only meaningful WithLegacyLayout (the
// grouped layout's batches are single-partition, so always unlogged).
func WithUnloggedBatch() WriterOption { return func(w *Writer) { w.logged = false } }

// WithoutFenceCheck skips the read that detects a stale fence before
// writing. Fencing itself still holds (the fence is part of the key), only
// ErrFenced is no longer reported.
func WithoutFenceCheck() WriterOption { return func(w *Writer) { w.checkFence = false } }

// WithoutIndex skips the execution index entries. For measurement only:
// GetExecution cannot find what such a Writer records.
func WithoutIndex() WriterOption { return func(w *Writer) { w.noIndex = true } }

// WithoutTenantCopy skips the rows of TableByTenant. For measurement
// only: the cross-job listing (Reader.ListByTenant) cannot find what such
// a Writer records.
func WithoutTenantCopy() WriterOption { return func(w *Writer) { w.noTenant = true } }

// WithColumnRecords writes each record's fields as columns of the grouped
// tables, as the Writer did before records were packed into one cell. For
// measurement (the packed cell is what the write saves Cassandra) and to
// test reading rows written before the change.
func WithColumnRecords() WriterOption { return func(w *Writer) { w.columns = true } }

// WithWriterClock sets the clock that dates index entries (the day
// partition of TableIndex); the real clock by default.
func WithWriterClock(c clock.Clock) WriterOption { return func(w *Writer) { w.clock = c } }

// WithTenantTTL makes every row's time to live its tenant's: ttl(tenant)
// is written USING TTL on the record and its index entry (the same, so an
// entry never outlives or dies before its record). A duration that is not
// positive, or over MaxTTL, is taken as TTL (the default) and MaxTTL
// respectively: the reader looks back at most MaxTTL, so a longer-lived row
// could not be listed, and Cassandra reads TTL 0 as "never expires".
func WithTenantTTL(ttl func(tenant string) time.Duration) WriterOption {
	return func(w *Writer) { w.ttl = ttl }
}

// NewWriter returns a Writer over s writing into keyspace, whose tables
// Migrate created. It panics on an invalid keyspace name (a programming or
// configuration error caught at start-up).
func NewWriter(s Session, keyspace string, opts ...WriterOption) *Writer {
	if err := ValidKeyspace(keyspace); err != nil {
		panic(err)
	}
	w := &Writer{s: s, keyspace: keyspace, clock: clock.Real{}, logged: true, checkFence: true}
	for _, o := range opts {
		o(w)
	}
	marks := func(cols string) string { return "?" + strings.Repeat(", ?", strings.Count(cols, ",")) }
	// Each statement carries its own write timestamp (a batch's single
	// timestamp would give every record of a group the same one).
	using := "USING TIMESTAMP ?"
	if w.ttl != nil {
		using = "USING TTL ? AND TIMESTAMP ?"
	}
	w.insertAttempt = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s) %s",
		keyspace, TableAttempts, attemptColumns, marks(attemptColumns), using)
	w.insertIndex = fmt.Sprintf("INSERT INTO %s.%s (bucket, day, execution_id, job_id, scheduled_at) VALUES (?, ?, ?, ?, ?) %s",
		keyspace, TableIndex, using)
	w.insertTenant = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s) %s",
		keyspace, TableByTenant, tenantColumns, marks(tenantColumns), using)
	// A packed record is an update of the row's status and of its own
	// entry of parts: two cells whatever the record holds, and no
	// tombstone (an entry set by key, not the map replaced).
	w.packAttempt = fmt.Sprintf("UPDATE %s.%s %s SET status = ?, parts[?] = ?"+
		" WHERE bucket = ? AND day = ? AND job_id = ? AND scheduled_at = ? AND execution_id = ? AND attempt = ? AND fence = ?",
		keyspace, TableAttempts, using)
	w.packTenant = fmt.Sprintf("UPDATE %s.%s %s SET status = ?, parts[?] = ?"+
		" WHERE tenant = ? AND hour = ? AND scheduled_at = ? AND job_id = ? AND execution_id = ? AND attempt = ? AND fence = ?",
		keyspace, TableByTenant, using)
	w.maxFence = fmt.Sprintf("SELECT fence FROM %s.%s WHERE bucket = ? AND day = ? AND job_id = ? AND scheduled_at = ?"+
		" AND execution_id = ? AND attempt = ? LIMIT 1", keyspace, TableAttempts)
	w.insertByJob = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", keyspace, TableByJob, columns, marks(columns))
	w.insertByID = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", keyspace, TableByID, columns, marks(columns))
	w.maxFenceByID = fmt.Sprintf("SELECT fence FROM %s.%s WHERE execution_id = ? AND attempt = ? LIMIT 1", keyspace, TableByID)
	return w
}

// Record writes one attempt's state. Call it at every transition (RUNNING
// when the lease is taken, then the outcome); fields left empty keep what
// an earlier record of the same attempt and fence wrote. The attempt needs
// execution_id, job_id, attempt >= 1, scheduled_time and a status;
// fire_time should be the envelope's, the same on every record of the
// attempt (it anchors the write timestamp).
//
// Writing the same record again is harmless (same key, same timestamp,
// same values), so a caller may retry any error except ErrFenced and
// ErrInvalidAttempt.
func (w *Writer) Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return w.one(ctx, Rec{Attempt: a, Held: !w.checkFence})
}

// RecordHeld is Record without the fence check, for a caller that knows its
// fence was current when the attempt ended: it held the lease throughout
// (every renewal succeeded) and wrote its done marker under that fence.
// The check is a read that costs Cassandra more than the write itself, and
// for such a record it cannot find a higher fence. Fencing still holds
// whatever the caller claims: the fence is part of the key, so a record
// never overwrites one written under another fence.
func (w *Writer) RecordHeld(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return w.one(ctx, Rec{Attempt: a, Held: true})
}

func (w *Writer) one(ctx context.Context, r Rec) error {
	if w.legacy {
		return w.recordLegacy(ctx, r.Attempt, !r.Held)
	}
	if errs := w.RecordMany(ctx, []Rec{r}); errs != nil {
		return errs[0]
	}
	return nil
}

// Rec is one record handed to RecordMany.
type Rec struct {
	Attempt *sundialv1.ExecutionAttempt
	// Held: written as RecordHeld (no fence check); otherwise as Record.
	Held bool
}

// RecordMany writes many records at once, with Record's semantics for each
// (RecordHeld's for those marked Held): records of one partition (the
// same PartitionKey) go in one unlogged single-partition batch — one
// mutation for Cassandra however many records it holds — and the records'
// index entries likewise. It returns nil when every record is written, else
// one error per record (nil for those written): ErrInvalidAttempt,
// ErrFenced (written, but stale), or the write's error. Everything it
// writes is idempotent, so the caller retries the failed records (or all of
// them) until they succeed; an entry written without its record is
// invisible.
//
// The index entries are written first, then the records, so a record that
// history lists can always be found by its execution id.
func (w *Writer) RecordMany(ctx context.Context, recs []Rec) []error {
	if w.legacy {
		return w.manyLegacy(ctx, recs)
	}
	errs := make([]error, len(recs))
	failed := false
	fail := func(i int, err error) { errs[i], failed = err, true }

	rows := make([]row, len(recs))
	var packed [][]byte
	if !w.columns {
		packed = make([][]byte, len(recs))
	}
	var valid []int
	for i, rc := range recs {
		r, err := rowFrom(rc.Attempt)
		if err == nil && packed != nil {
			packed[i], err = packRecord(rc.Attempt)
		}
		if err != nil {
			fail(i, err)
			continue
		}
		rows[i] = r
		valid = append(valid, i)
	}
	if len(valid) == 0 {
		return errs
	}

	// The fence checks read other rows (each attempt's highest fence),
	// independent of the writes, so they run beside them: RecordMany costs
	// the slower of the two, not their sum. Either order of arrival is
	// correct, since a record cannot be above its own fence.
	checks := make([]int64, len(recs))
	checkErrs := make([]error, len(recs))
	var checking sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, i := range valid {
		if recs[i].Held {
			continue
		}
		checking.Add(1)
		go func() {
			defer checking.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			checks[i], checkErrs[i] = w.highestFence(ctx, rows[i])
		}()
	}

	now := dayOf(w.clock.Now())
	indexed := valid
	if !w.noIndex {
		indexed = w.writeGroups(ctx, valid, func(i int) (uint64, Statement) {
			r := rows[i]
			b := bucketOf(r.executionID)
			return uint64(b)<<32 | uint64(now), Statement{CQL: w.insertIndex, Values: w.using([]any{
				b, int(now), r.executionID, r.jobID, r.scheduled,
			}, r, recs[i].Attempt.GetStatus())}
		}, func(i int, err error) {
			fail(i, fmt.Errorf("ledger: index execution %s: %w", rows[i].executionID, err))
		})
	}

	// The record and its tenant copy are independent writes (different
	// partitions), so they go out together; a record fails if either did,
	// and its retry writes both again.
	var copyErrs []error
	var copying sync.WaitGroup
	if !w.noTenant {
		copyErrs = make([]error, len(recs))
		var tenanted []int
		for _, i := range indexed {
			if rows[i].tenant != "" { // every real record has one; the key needs it
				tenanted = append(tenanted, i)
			}
		}
		copying.Go(func() {
			w.writeGroups(ctx, tenanted, func(i int) (uint64, Statement) {
				r := rows[i]
				part := tenantPart(r.tenant, hourOf(r.scheduled))
				if packed != nil {
					return part, Statement{CQL: w.packTenant, Values: append(w.usingFirst(r, recs[i].Attempt.GetStatus()),
						r.status, int(statusRank(recs[i].Attempt.GetStatus())), packed[i],
						r.tenant, int(hourOf(r.scheduled)), r.scheduled, r.jobID, r.executionID, r.attempt, r.fence)}
				}
				return part, Statement{
					CQL: w.insertTenant, Values: w.using(r.tenantValues(), r, recs[i].Attempt.GetStatus()),
				}
			}, func(i int, err error) {
				copyErrs[i] = fmt.Errorf("ledger: record execution %s attempt %d by tenant: %w", rows[i].executionID, rows[i].attempt, err)
			})
		})
	}
	w.writeGroups(ctx, indexed, func(i int) (uint64, Statement) {
		r := rows[i]
		part := uint64(r.bucket)<<32 | uint64(r.day)
		if packed != nil {
			return part, Statement{CQL: w.packAttempt, Values: append(w.usingFirst(r, recs[i].Attempt.GetStatus()),
				r.status, int(statusRank(recs[i].Attempt.GetStatus())), packed[i],
				r.bucket, int(r.day), r.jobID, r.scheduled, r.executionID, r.attempt, r.fence)}
		}
		return part, Statement{
			CQL: w.insertAttempt, Values: w.using(r.attemptValues(), r, recs[i].Attempt.GetStatus()),
		}
	}, func(i int, err error) {
		fail(i, fmt.Errorf("ledger: record execution %s attempt %d: %w", rows[i].executionID, rows[i].attempt, err))
	})
	copying.Wait() // always: the goroutine is this call's to reap
	for i, err := range copyErrs {
		if err != nil && errs[i] == nil {
			fail(i, err)
		}
	}

	checking.Wait() // always: the goroutines are this call's to reap
	for _, i := range valid {
		switch r := rows[i]; {
		case errs[i] != nil || recs[i].Held:
		case checkErrs[i] != nil:
			// The record is written; only the staleness verdict is
			// unknown. Reporting the error lets the caller retry, which is
			// harmless.
			fail(i, checkErrs[i])
		case checks[i] > r.fence:
			fail(i, fmt.Errorf("%w: execution %s attempt %d fence %d, recorded fence %d",
				ErrFenced, r.executionID, r.attempt, r.fence, checks[i]))
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// using appends the values of a statement's USING clause: the row's TTL in
// seconds (WithTenantTTL only), then its write timestamp.
func (w *Writer) using(vals []any, r row, status sundialv1.ExecutionStatus) []any {
	if w.ttl != nil {
		vals = append(vals, TTLSeconds(w.ttl(r.tenant)))
	}
	return append(vals, r.writeTimestamp(status))
}

// usingFirst is the values of an UPDATE's USING clause, which come before
// the rest: the row's TTL (WithTenantTTL only), then its write timestamp.
func (w *Writer) usingFirst(r row, status sundialv1.ExecutionStatus) []any {
	return w.using(make([]any, 0, 12), r, status)
}

// TTLSeconds is the USING TTL value of a row meant to live d: TTL when d
// is not positive, MaxTTL when it is longer, at least one second.
func TTLSeconds(d time.Duration) int {
	switch {
	case d <= 0:
		d = TTL
	case d > MaxTTL:
		d = MaxTTL
	}
	return max(int(d/time.Second), 1)
}

// writeGroups writes one statement per index in idx, grouped by partition
// into unlogged batches of at most maxBatchRows statements and about
// maxBatchBytes, up to parallel batches at once. It reports each failed
// index to fail (serially) and returns the indexes written.
func (w *Writer) writeGroups(ctx context.Context, idx []int, stmt func(int) (uint64, Statement), fail func(int, error)) []int {
	type item struct {
		part uint64
		i    int
		st   Statement
	}
	items := make([]item, len(idx))
	for n, i := range idx {
		p, st := stmt(i)
		items[n] = item{p, i, st}
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.part, b.part) })
	type batch struct{ items []item }
	var batches []batch
	size := 0
	for n, it := range items {
		sz := statementBytes(it.st)
		if n == 0 || it.part != items[n-1].part || len(batches[len(batches)-1].items) >= maxBatchRows || size+sz > maxBatchBytes {
			batches = append(batches, batch{})
			size = 0
		}
		last := &batches[len(batches)-1]
		last.items = append(last.items, it)
		size += sz
	}
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for n, b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sts := make([]Statement, len(b.items))
			for k, it := range b.items {
				sts[k] = it.st
			}
			errs[n] = w.s.ExecBatch(ctx, Batch{Statements: sts, Idempotent: true})
		}()
	}
	wg.Wait()
	var ok []int
	for n, b := range batches {
		for _, it := range b.items {
			if errs[n] != nil {
				fail(it.i, errs[n])
			} else {
				ok = append(ok, it.i)
			}
		}
	}
	slices.Sort(ok)
	return ok
}

// tenantPart is the grouping key of a TableByTenant row: its partition
// (tenant, hour), as a 64-bit FNV-1a hash. Two partitions whose hashes
// collided would share a batch: still correct (an unlogged batch may span
// partitions), only not one mutation.
func tenantPart(tenant string, h hour) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(tenant))
	_, _ = fmt.Fprintf(f, "\x00%d", int(h))
	return f.Sum64()
}

// statementBytes estimates a statement's share of a batch's size as
// Cassandra counts it (the mutation's data, dominated by text values).
func statementBytes(st Statement) int {
	n := 64
	for _, v := range st.Values {
		switch v := v.(type) {
		case string:
			n += len(v) + 8
		case []byte:
			n += len(v) + 8
		default:
			n += 12
		}
	}
	return n
}

// highestFence reads the highest fence recorded for the row's attempt (the
// first clustering row of the attempt, fences descending).
func (w *Writer) highestFence(ctx context.Context, r row) (int64, error) {
	it := w.s.Iter(ctx, Statement{CQL: w.maxFence, Idempotent: true,
		Values: []any{r.bucket, int(r.day), r.jobID, r.scheduled, r.executionID, r.attempt}})
	var fence int64
	it.Scan(&fence)
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("ledger: fence check execution %s attempt %d: %w", r.executionID, r.attempt, err)
	}
	return fence, nil
}

// manyLegacy is RecordMany for the legacy layout: one batch per record.
func (w *Writer) manyLegacy(ctx context.Context, recs []Rec) []error {
	errs := make([]error, len(recs))
	failed := false
	for i, rc := range recs {
		if errs[i] = w.recordLegacy(ctx, rc.Attempt, !rc.Held); errs[i] != nil {
			failed = true
		}
	}
	if !failed {
		return nil
	}
	return errs
}

// recordLegacy writes one record to both legacy tables in one batch.
func (w *Writer) recordLegacy(ctx context.Context, a *sundialv1.ExecutionAttempt, checkFence bool) error {
	r, err := rowFrom(a)
	if err != nil {
		return err
	}
	type check struct {
		recorded int64
		err      error
	}
	var checked chan check
	if checkFence {
		checked = make(chan check, 1)
		go func() {
			var c check
			it := w.s.Iter(ctx, Statement{CQL: w.maxFenceByID, Values: []any{r.executionID, r.attempt}, Idempotent: true})
			it.Scan(&c.recorded)
			if c.err = it.Close(); c.err != nil {
				c.err = fmt.Errorf("ledger: fence check execution %s attempt %d: %w", r.executionID, r.attempt, c.err)
			}
			checked <- c
		}()
	}
	vals := r.values()
	err = w.s.ExecBatch(ctx, Batch{
		Logged:     w.logged,
		Timestamp:  r.writeTimestamp(a.GetStatus()),
		Idempotent: true,
		Statements: []Statement{
			{CQL: w.insertByJob, Values: vals},
			{CQL: w.insertByID, Values: vals},
		},
	})
	var c check
	if checked != nil {
		c = <-checked // always wait: the goroutine is this call's to reap
	}
	if err != nil {
		return fmt.Errorf("ledger: record execution %s attempt %d: %w", r.executionID, r.attempt, err)
	}
	if c.err != nil {
		return c.err
	}
	if c.recorded > r.fence {
		return fmt.Errorf("%w: execution %s attempt %d fence %d, recorded fence %d",
			ErrFenced, r.executionID, r.attempt, r.fence, c.recorded)
	}
	return nil
}
