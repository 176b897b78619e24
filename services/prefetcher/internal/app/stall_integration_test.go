//go:build integration

package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/testkit/pgtest"
)

// A prefetcher stalled inside a staging transaction (here: the transaction
// simply left open, as a paused process leaves it) holds its range's
// leader_epochs row only about its ZooKeeper session timeout: Postgres
// ends the idle session, and the next leader's upsert of the same row goes
// through. Without the parameter that upsert waits for as long as the
// stall lasts (TestPausedRangeLeaderRejoinsWithoutDoubling failed so in
// CI once: the paused leader held a row for the whole 30 s the test
// waited).
func TestStalledTransactionReleasesTheRangeRow(t *testing.T) {
	dsn := pgtest.Schema(t)
	cfg := validConfig(t, "--postgres-dsn", dsn, "--zk-session-timeout", "1s")
	ctx := context.Background()
	stalled, err := openPool(ctx, cfg)
	require.NoError(t, err)
	defer stalled.Close()
	const upsert = `INSERT INTO leader_epochs (election, epoch, leader, updated_at) VALUES ('r0001', $1, $2, now())
		ON CONFLICT (election) DO UPDATE SET epoch = excluded.epoch, leader = excluded.leader, updated_at = now()
		WHERE leader_epochs.epoch <= excluded.epoch`
	tx, err := stalled.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, upsert, 1, "old")
	require.NoError(t, err)
	// ... and the old leader says nothing more.

	next, err := openPool(ctx, cfg)
	require.NoError(t, err)
	defer next.Close()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = next.Exec(wctx, upsert, 2, "new")
	require.NoError(t, err, "the next leader's upsert waited on the stalled transaction")
	took := time.Since(start)
	t.Logf("the next leader's upsert went through %s after the stall began", took.Round(time.Millisecond))
	require.Less(t, took, 5*time.Second)
	require.GreaterOrEqual(t, took, 900*time.Millisecond, "the row was not locked: the test shows nothing")
	var leader string
	require.NoError(t, next.QueryRow(ctx, `SELECT leader FROM leader_epochs WHERE election = 'r0001'`).Scan(&leader))
	require.Equal(t, "new", leader)
}
