package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// A stager writes its rows and wakes the relay in the transaction that
// decided them: the rows and the notification commit together or not at
// all.
func ExampleInsert() {
	ctx := context.Background()
	var tx pgx.Tx // the caller's transaction
	slot := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	var envelope []byte // firing.Encode of the sundial.v1.Firing
	inserted, err := outbox.Insert(ctx, tx, []outbox.Row{{
		ExecutionID: uuid.MustParse("0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f"),
		Attempt:     1,
		JobID:       uuid.MustParse("0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10"),
		JobVersion:  7,
		Priority:    sundialv1.Priority_PRIORITY_MEDIUM,
		ScheduledAt: slot,
		FireAt:      slot.Add(1200 * time.Millisecond),
		PublishAt:   slot.Add(-2 * time.Minute), // a window before the slot
		Envelope:    envelope,
	}})
	if err != nil || !inserted[0] {
		return // an error, or this attempt was already staged
	}
	_ = outbox.Notify(ctx, tx, "1") // delivered when tx commits
}

// A backfill of four slots at 2 firings per second, staged at now with a
// two-minute lead: each fires half a second after the one before and may
// be published as soon as it is within the lead of its instant (here at
// once).
func ExamplePacedFireAt() {
	now := time.Date(2030, 6, 1, 9, 0, 0, 0, time.UTC)
	for i := range 4 {
		fire := outbox.PacedFireAt(now, i, 2)
		fmt.Println(fire.Format("15:04:05.000"), outbox.PublishAt(fire, 2*time.Minute, now).Format("15:04:05.000"))
	}
	// Output:
	// 09:00:00.000 09:00:00.000
	// 09:00:00.500 09:00:00.000
	// 09:00:01.000 09:00:00.000
	// 09:00:01.500 09:00:00.000
}
