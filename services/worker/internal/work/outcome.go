package work

import (
	"time"

	"github.com/sundialhq/sundial/pkg/store/lease"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// Outcome is what the fire stage returns for a firing it sent (package
// fire): the request's times and what the target answered, handed to the
// settle stage (package settle) with the execution's lease still held and
// renewed. Only the fire stage makes one and only the settle stage reads
// it, so it lives here, beside the Item it belongs to, where both stages
// see it and neither imports the other's internals.
//
// It is not a part of Item: it exists only for the attempts in flight (a
// few hundred), and in every held Item it would double the size of the
// 100,000 and more firings that wait.
type Outcome struct {
	// Execution is the lease's view of the firing fired
	// (prepare.Execution).
	Execution lease.Execution
	// Started and Finished bound the request; FireAt is its instant.
	Started, Finished, FireAt time.Time
	// Result is what the target answered.
	Result target.Result
	// Fenced: a renewal found another holder; the result is stale.
	Fenced bool
	// CancelledBy names who cancelled the execution while its request
	// was out (the request was abandoned); empty otherwise.
	CancelledBy string
	// StopRenewing ends the lease's renewal and reports whether any
	// renewal failed.
	StopRenewing func() (failed bool)
	// NextTraceparent is the context a retry or dead letter staged from this
	// attempt carries (its consume span), so the next attempt continues
	// the trace; empty when the firing is not traced.
	NextTraceparent string
}
