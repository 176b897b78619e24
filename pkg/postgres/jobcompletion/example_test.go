package jobcompletion_test

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
)

// The prefetcher finds every remaining slot of a job skipped by its misfire
// policy: no firing is left to complete it, so the staging transaction
// does, if the job is still the version it claimed.
func ExampleComplete() {
	ctx := context.Background()
	var tx pgx.Tx // the staging transaction
	done, err := jobcompletion.Complete(ctx, tx, "system:prefetcher", []jobcompletion.Job{{
		ID:      uuid.MustParse("0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10"),
		Version: 7,
		Detail:  map[string]any{"reason": "no slot left: the last slots were skipped (misfire)"},
	}})
	if err != nil || !done[0] {
		return // an error, or the job was changed, ended or completed already
	}
}

// A worker whose firing of a one-off job's last slot settled queues the
// job, before the attempt's markers; its completer completes queued jobs
// a batch at a time, at its pace.
func ExampleQueue() {
	ctx := context.Background()
	var pool *pgxpool.Pool // the worker's settling pool
	if err := jobcompletion.Queue(ctx, pool, []jobcompletion.Job{{
		ID:      uuid.MustParse("0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10"),
		Version: 7,
		Detail:  map[string]any{"execution_id": "0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f", "outcome": "succeeded"},
	}}); err != nil {
		return // not queued: the attempt is not marked finished, and its redelivery queues it
	}
	taken, err := jobcompletion.CompleteQueued(ctx, pool, "system:worker", 500)
	if err != nil || taken.Rows < 500 {
		return // an error (the rows stay queued), or the queue is empty
	}
}

// The api resumes a paused one-off job whose instant has passed: the job
// completes as version 8, in the transaction that holds its row lock and
// writes the resume's audit row.
func ExampleCompleteOnResume() {
	ctx := context.Background()
	var tx pgx.Tx     // the caller's transaction, the job's row locked
	var spec []byte   // the job as stored at version 8
	var now time.Time // the transaction's clock
	done, err := jobcompletion.CompleteOnResume(ctx, tx, jobcompletion.Resumed{
		ID:      uuid.MustParse("0190f0c2-7a1b-7c3d-8e4f-5a6b7c8d9e10"),
		Version: 7, Spec: spec, At: now,
	})
	if err != nil || !done {
		return // an error, or the job is no longer paused at version 7
	}
}
