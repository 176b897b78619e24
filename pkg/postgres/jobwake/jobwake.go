// Package jobwake is the one home of the notification that wakes the
// prefetcher when a job may have become due sooner than its next tick
// (created, updated, resumed, triggered): the channel's name, and the one
// statement that sends it inside the transaction that changed the job.
// Notifications are only a shortcut: the prefetcher's tick still finds
// every due job.
package jobwake

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Channel is the LISTEN/NOTIFY channel the prefetcher wakes on.
const Channel = "sundial_jobs"

// Execer is what Notify needs: a pgx transaction, connection or pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Notify wakes the prefetcher for jobID once q's transaction commits
// (Postgres delivers a NOTIFY at commit, and drops it on rollback).
func Notify(ctx context.Context, q Execer, jobID string) error {
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, jobID); err != nil {
		return fmt.Errorf("jobwake: notify: %w", err)
	}
	return nil
}
