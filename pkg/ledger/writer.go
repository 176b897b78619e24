package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ErrFenced is returned (wrapped) by Writer.Record when the ledger already
// holds a record of the same attempt under a higher fence token: the caller's
// lease was taken over, so its result is stale. The stale record is still
// stored, under its own fence, and readers report it as FENCED; it never
// overwrites the newer one. Do not retry on ErrFenced.
var ErrFenced = errors.New("ledger: attempt already recorded under a higher fence token")

// Writer records execution attempts. It is safe for concurrent use.
type Writer struct {
	s          Session
	keyspace   string
	logged     bool
	checkFence bool

	insertByJob, insertByID, maxFence string
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// WithUnloggedBatch writes the two tables in an unlogged batch: one round
// trip less to the batch log, but a coordinator that dies midway can leave
// the row in one table only. Kept for measurement (see DESIGN.md); the
// default is logged.
func WithUnloggedBatch() WriterOption { return func(w *Writer) { w.logged = false } }

// WithoutFenceCheck skips the read that detects a stale fence before
// writing. Fencing itself still holds (the fence is part of the key), only
// ErrFenced is no longer reported.
func WithoutFenceCheck() WriterOption { return func(w *Writer) { w.checkFence = false } }

// NewWriter returns a Writer over s writing into keyspace, whose tables
// Migrate created. It panics on an invalid keyspace name (a programming or
// configuration error caught at start-up).
func NewWriter(s Session, keyspace string, opts ...WriterOption) *Writer {
	if err := ValidKeyspace(keyspace); err != nil {
		panic(err)
	}
	w := &Writer{s: s, keyspace: keyspace, logged: true, checkFence: true}
	for _, o := range opts {
		o(w)
	}
	marks := "?" + strings.Repeat(", ?", strings.Count(columns, ","))
	w.insertByJob = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", keyspace, TableByJob, columns, marks)
	w.insertByID = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", keyspace, TableByID, columns, marks)
	w.maxFence = fmt.Sprintf("SELECT fence FROM %s.%s WHERE execution_id = ? AND attempt = ? LIMIT 1", keyspace, TableByID)
	return w
}

// Record writes one attempt's state to both tables in one batch. Call it at
// every transition (RUNNING when the lease is taken, then the outcome);
// fields left empty keep what an earlier record of the same attempt and
// fence wrote. The attempt needs execution_id, job_id, attempt >= 1,
// scheduled_time and a status; fire_time should be the envelope's, the same
// on every record of the attempt (it anchors the write timestamp).
//
// Writing the same record again is harmless (same key, same timestamp,
// same values), so a caller may retry any error except ErrFenced and
// ErrInvalidAttempt.
func (w *Writer) Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return w.record(ctx, a, w.checkFence)
}

// RecordHeld is Record without the fence check, for a caller that knows its
// fence was current when the attempt ended: it held the lease throughout
// (every renewal succeeded) and wrote its done marker under that fence.
// The check is a read that costs Cassandra more than the write itself, and
// for such a record it cannot find a higher fence. Fencing still holds
// whatever the caller claims: the fence is part of the key, so a record
// never overwrites one written under another fence.
func (w *Writer) RecordHeld(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	return w.record(ctx, a, false)
}

func (w *Writer) record(ctx context.Context, a *sundialv1.ExecutionAttempt, checkFence bool) error {
	r, err := rowFrom(a)
	if err != nil {
		return err
	}
	// The fence check is a read of another row (the attempt's highest
	// fence), independent of the write, so both run at once: Record costs
	// the slower of the two round trips, not their sum. Either order of
	// arrival is correct, since our own row cannot be above our own fence.
	type check struct {
		recorded int64
		stale    bool
		err      error
	}
	var checked chan check
	if checkFence {
		checked = make(chan check, 1)
		go func() {
			var c check
			c.recorded, c.stale, c.err = w.higherFence(ctx, r)
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
		// The record is written; only the staleness verdict is unknown.
		// Reporting the error lets the caller retry, which is harmless.
		return c.err
	}
	if c.stale {
		return fmt.Errorf("%w: execution %s attempt %d fence %d, recorded fence %d",
			ErrFenced, r.executionID, r.attempt, r.fence, c.recorded)
	}
	return nil
}

// higherFence reads the highest fence recorded for the row's attempt (the
// first clustering row, fences descending) and reports whether it is above
// the row's own.
func (w *Writer) higherFence(ctx context.Context, r row) (int64, bool, error) {
	it := w.s.Iter(ctx, Statement{CQL: w.maxFence, Values: []any{r.executionID, r.attempt}, Idempotent: true})
	var fence int64
	found := it.Scan(&fence)
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("ledger: fence check execution %s attempt %d: %w", r.executionID, r.attempt, err)
	}
	return fence, found && fence > r.fence, nil
}
