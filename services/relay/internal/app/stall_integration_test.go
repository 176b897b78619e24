//go:build integration

package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/services/relay/internal/relay"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// A relay stalled inside a claim (the transaction left open with its rows
// locked, as a paused process leaves it) keeps its rows from the other
// relays only about --publish-timeout plus claimIdleMargin: Postgres ends
// the idle session and the rows can be claimed again.
func TestStalledClaimReleasesItsRows(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := context.Background()
	cfg := relay.Defaults()
	cfg.PostgresDSN, cfg.PublishTimeout = dsn, time.Second
	pcfg, err := poolConfig(cfg)
	require.NoError(t, err)
	stalled, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer stalled.Close()
	_, err = stalled.Exec(ctx, `INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority, scheduled_at, fire_at, publish_at, envelope)
		VALUES ($1, 1, $2, 1, 2, now(), now(), now(), '\x00')`, uuid.New(), uuid.New())
	require.NoError(t, err)
	tx, err := stalled.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var id int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM outbox FOR UPDATE SKIP LOCKED LIMIT 1`).Scan(&id))
	// ... and the stalled relay says nothing more.

	other, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	defer other.Close()
	start := time.Now()
	var got int64
	require.Eventually(t, func() bool {
		err := other.QueryRow(ctx, `SELECT id FROM outbox FOR UPDATE SKIP LOCKED LIMIT 1`).Scan(&got)
		return err == nil
	}, 15*time.Second, 50*time.Millisecond, "the stalled claim's row was never claimable again")
	took := time.Since(start)
	t.Logf("the row was claimable again %s after the stall began (publish timeout 1s + margin %s)", took.Round(time.Millisecond), claimIdleMargin)
	require.Equal(t, id, got)
	require.GreaterOrEqual(t, took, cfg.PublishTimeout, "the row was not locked: the test shows nothing")
	require.Less(t, took, cfg.PublishTimeout+claimIdleMargin+2*time.Second)
}
