// Package work is the unit the worker's stages pass along: one held firing,
// from the Kafka record it came from through prepare (decoded, leased ahead
// of its instant), fire (the request, at the instant) and settle (markers,
// ledger, retries, after it).
//
// An Item is one struct made of parts, each written by one stage and only
// read by the later ones, so a reader of a field knows where it was set:
//
//   - Facts: the envelope's facts, set by the consumer when the record
//     arrives and never changed (Release, the owner letting the firing go,
//     only drops the encoded envelope).
//   - Hold: the holders' bookkeeping (package holder): when the item is
//     due, its place in the heap, its arrival order and turn. A stage that
//     sends an item to wait again (or paces it) says until when through
//     the holder's one port, Holder.AddAfter, which sets NotBefore.
//   - Prepared: what the prepare stage returns: the decoded firing and
//     the lease it took (package prepare).
//   - Admission: what the fire stage's limits granted (package limits).
//   - Owned: the owner's state machine (package consumer, under the
//     partition's lock).
//   - Trace: the firing's open spans.
//
// Beside the Item, not in it, the fire stage returns one Outcome per
// request it sent (outcome.go), which only the settle stage reads.
//
// The parts are embedded structs, not separate values passed from stage to
// stage: the worker holds 100,000 and more items, and an item that moved
// between types would cost an allocation (or a copy) at each stage on the
// path of every firing. Embedding keeps one allocation per firing, the
// fields promoted (it.FireAt, it.Lease), and the size of the flat struct
// it replaces (each part is laid out so its padding is no larger than the
// flat struct's was; TestItemSize keeps it so).
package work

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Item is one firing the worker holds. To keep 100,000 pending firings
// small, it keeps the encoded envelope (a few hundred bytes) rather than the
// decoded message (a tree of allocations several times larger) and decodes
// it again when it fires.
type Item struct {
	Facts
	Hold
	Prepared
	Owned
	Admission
	// Trace is the firing's spans in this worker; nil when tracing is off,
	// so an untraced item costs one pointer. The consumer starts and ends
	// it; the fire stage ends its hold span and opens another when the
	// firing waits again.
	Trace *Trace
}

// Facts are what the record said when it arrived: the consumer sets them
// and no stage changes them.
type Facts struct {
	// FireAt is the instant to fire, by the database clock, in Unix ns.
	FireAt int64
	// JobID and JobVersion are the envelope's, read when the record
	// arrived: a firing of a job changed or deleted since it was staged is
	// found and dropped by them without decoding (package discard).
	JobVersion int64
	JobID      string
	// Tenant keys per-tenant fairness in the ready queue.
	Tenant string
	// Envelope is the encoded sundial.v1.Firing (a private copy, not a
	// slice of the fetch buffer, so finished records free their batch).
	// The owner lets it go (nil) when the item is released.
	Envelope []byte
	// Owner is the partition that delivered the item; it decides whether
	// the item may still run and learns when it has finished.
	Owner Owner
	// Priority is normalized (never unspecified).
	Priority sundialv1.Priority
	// Overlap: the job has an overlap policy (SKIP, BUFFER_ONE), so its
	// lease is taken at the instant, not ahead of it.
	Overlap bool
}

// Hold is the holders' bookkeeping (package holder): Add and AddAfter set
// it, the heap keeps HeapIndex, the release sets Ready.
type Hold struct {
	// Due is when the holder the item is in releases it: its prepare
	// instant in the prepare holder, FireAt (or later, when it waits
	// again) in the fire holder.
	Due int64
	// NotBefore holds the item back after a failed try (another delivery
	// holds the lease, Redis did not answer, a limit said wait) or to
	// pace a catch-up: no holder releases it earlier, whatever its
	// instant. The stage that sends the item to a holder names it
	// (holder.Holder.AddAfter), and the holder sets it.
	NotBefore int64
	// Ready is when the item entered the ready queue (corrected clock, Unix
	// ns), for the queueing part of the lateness.
	Ready int64
	// Seq orders items with the same Due (the order they were added to
	// the holder), so ties fire FIFO; the ready queue keeps the order.
	Seq uint64
	// HeapIndex is the item's position in the holder's heap, -1 once it
	// left one (a new item's 0 is safe too: the holder checks the slot
	// holds the item before it trusts the index).
	HeapIndex int
	// Turn is the item's place among its tenant's items due at the same
	// instant (1 for the first), in a holder that takes turns between
	// tenants (holder.WithTenantTurns); 0 elsewhere.
	Turn uint32
}

// Prepared is what the prepare stage returns (package prepare); the fire
// and settle stages read it.
type Prepared struct {
	// Firing is the decoded envelope, kept from prepare on (only for the
	// few seconds before the instant, so held firings stay small). The
	// owner lets it go (nil) when the item is released.
	Firing *sundialv1.Firing
	// Lease is what the lease script decided for this delivery.
	Lease lease.Result
	// LeaseHolder names this delivery in Redis.
	LeaseHolder string
	// LeaseUntil is when the lease ends unless renewed (corrected clock,
	// Unix ns; measured from before the call, so it errs early).
	LeaseUntil int64
	// Deliveries counts how often this worker tried and had to hold it
	// again (another holder had the lease).
	Deliveries int32
	// Acquired counts the leases this worker took for the item's attempt
	// (the lease's delivery count includes them): a count above it means
	// another delivery leased the attempt too.
	Acquired int32
	// LedgerChecked: found done by its marker once, this copy is looked
	// up in the ledger the next time (prepare.Config.HasRecord).
	LedgerChecked bool
	// OverlapWaited: the job's overlap policy held it behind a running
	// execution (BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER) at least once. From
	// then on its lateness is the job's own doing, not the platform's, so
	// the misfire judge (prepare.Config.Late) no longer sees it
	// (Item.LateByPolicy).
	OverlapWaited bool
}

// Owned belongs to the Owner (guarded by its lock): where the item is in
// its life, and the owner's bookkeeping handle.
type Owned struct {
	Token any
	State State
}

// Admission is what the fire stage's limits (package limits) keep between
// a firing's tries.
type Admission struct {
	// Admitted is what the limits already granted this firing (its
	// tenant's rate, its host's rate: bits), so a firing that waits is not
	// charged again when it comes back.
	Admitted uint8
	// AdmitWaits counts its waits for a concurrency slot (their backoff).
	AdmitWaits uint8
	// LimitWaited: a limit (its tenant's rate, its host's rate or
	// concurrency) made it wait at least once. A firing a limit holds back
	// fires late rather than failing, so from then on the misfire judge
	// (prepare.Config.Late) no longer sees it when its lease is taken
	// again.
	LimitWaited bool
}

// LateByPolicy reports whether the firing was held back by its job's
// overlap policy or by a limit: whatever lateness it has since is what
// that policy asked for, not the platform falling behind, so it is not
// judged a misfire again.
func (it *Item) LateByPolicy() bool { return it.OverlapWaited || it.LimitWaited }

// Trace is a held firing's open spans.
type Trace struct {
	// Consume spans the firing's stay in this worker, from its record's
	// arrival until it is finished or abandoned; the worker's other spans
	// of the firing are its children.
	Consume trace.Span
	// Hold is open while the firing waits to be executed (in the holder
	// and the ready queue); a firing held again gets a new one.
	Hold trace.Span
}

// End ends the open spans, with outcome on the consume span ("" keeps the
// one set last: the outcome label of sundial_worker_firings_total, or
// abandoned when the firing's partition moved away). Safe on a nil Trace, and to call more than once.
func (t *Trace) End(outcome string) {
	if t == nil {
		return
	}
	if t.Hold != nil {
		t.Hold.End()
	}
	if outcome != "" {
		t.Consume.SetAttributes(tracing.AttrOutcome.String(outcome))
	}
	t.Consume.End()
}

// State is an item's place in its life; the Owner moves it.
type State uint8

const (
	Held      State = iota // in the holder or the ready queue
	Executing              // claimed by an executor
	Finished               // done; its offset may be committed past
	Abandoned              // its partition went away before it ran
	// Released: executing but no longer waiting to fire (dropped: its
	// job changed), so it counts no more against what a worker may hold;
	// its offset still waits for Finish.
	Released
)

// FireTime is FireAt as a time.
func (it *Item) FireTime() time.Time { return time.Unix(0, it.FireAt) }

// Owner is the partition an item came from. Its methods are the item's
// state machine: held → (Claim) executing → (Release →) (Finish | Requeue).
type Owner interface {
	// Claim moves a held item to executing. It returns false when the item
	// was abandoned (its partition revoked or lost): the new owner of the
	// partition will get it again, so the caller drops it.
	Claim(it *Item) bool
	// Finish ends an executing or released item: its offset may now be
	// committed past.
	Finish(it *Item)
	// Release marks an executing item that will not fire (it is dropped
	// and waits only for its summary to be recorded): it stops counting
	// against the worker's bound on held firings, and its envelope is let
	// go. Finish still ends it.
	Release(it *Item)
	// Requeue moves an executing item back to held, to try again later (the
	// lease was held by another delivery, or Redis was unreachable). It
	// returns false when the partition is gone; the caller drops the item.
	Requeue(it *Item) bool
}
