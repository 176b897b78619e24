//go:build integration

package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	pgoutbox "github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/services/relay/internal/itest"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

func ids(rows []outbox.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// plan is Postgres's plan of query, as EXPLAIN prints it.
func plan(t *testing.T, pool *pgxpool.Pool, query string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

func TestClaimsAreDisjointAndOnlyCompletedRowsGo(t *testing.T) {
	_, pool := itest.Postgres(t)
	ctx := context.Background()
	s := outbox.NewStore(pool)
	staged := itest.Stage(t, pool, 10, 0, false)
	itest.Stage(t, pool, 3, time.Hour, false) // not due

	a, err := s.Claim(ctx, 6)
	require.NoError(t, err)
	b, err := s.Claim(ctx, 6) // skips a's locked rows
	require.NoError(t, err)
	require.Len(t, a.Rows(), 6)
	require.Len(t, b.Rows(), 4)
	require.NotContains(t, ids(b.Rows()), a.Rows()[0].ID)
	require.Equal(t, staged[0].ExecutionID, a.Rows()[0].ExecutionID, "oldest first")
	require.Equal(t, staged[0].Envelope, a.Rows()[0].Envelope)
	_, ok := a.NextDue()
	require.False(t, ok, "a full claim does not look ahead")
	wait, ok := b.NextDue()
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60)

	// a publishes only its first two rows; b fails entirely.
	require.NoError(t, a.Complete(ctx, ids(a.Rows()[:2])))
	a.Release(ctx) // no-op after Complete
	b.Release(ctx)
	require.Equal(t, 11, itest.Count(t, pool))

	c, err := s.Claim(ctx, 100)
	require.NoError(t, err)
	require.Len(t, c.Rows(), 8, "released and unpublished rows are claimable again")
	require.NoError(t, c.Complete(ctx, nil))

	total, err := s.Total(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(11), total)
	d, err := s.Due(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(8), d.Rows)
	require.Greater(t, d.Oldest, time.Duration(0))
}

// Counting the due rows reads the publish index's due range, not the
// table: with the prefetcher's chunk staged ahead (here 20,000 rows an hour
// out beside 5 due), the plan has no sequential scan, and the count and the
// oldest are right.
func TestDueReadsTheDueRangeOfTheIndex(t *testing.T) {
	_, pool := itest.Postgres(t)
	ctx := context.Background()
	s := outbox.NewStore(pool)
	itest.Stage(t, pool, 5, 0, false)
	itest.Stage(t, pool, 20000, time.Hour, false)
	_, err := pool.Exec(ctx, "ANALYZE "+pgoutbox.Table)
	require.NoError(t, err)

	text := plan(t, pool, outbox.DueSQL)
	require.NotContains(t, text, "Seq Scan", text)
	require.Contains(t, text, "outbox_publish", text)

	d, err := s.Due(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), d.Rows)
	require.Greater(t, d.Oldest, time.Duration(0))
	require.Less(t, d.Oldest, time.Minute)
	total, err := s.Total(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(20005), total)
}

// Complete deletes exactly the acknowledged rows of the claim, found by
// the ctids the claim read, even while other transactions delete and
// insert around them; the delete is a TID scan, not a primary-key descent
// per row. An id the claim does not hold still goes (by id).
func TestCompleteDeletesTheClaimedRowsByCtid(t *testing.T) {
	_, pool := itest.Postgres(t)
	ctx := context.Background()
	s := outbox.NewStore(pool)
	itest.Stage(t, pool, 20, 0, false)

	a, err := s.Claim(ctx, 10)
	require.NoError(t, err)
	// Another claimer takes and deletes the other ten meanwhile, and new
	// rows arrive (they may reuse freed space, never a locked row's).
	b, err := s.Claim(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, b.Complete(ctx, ids(b.Rows())))
	fresh := itest.Stage(t, pool, 5, 0, false)
	acked := ids(a.Rows())[1:8]
	require.NoError(t, a.Complete(ctx, acked))

	left := map[int64]bool{}
	r, err := pool.Query(ctx, `SELECT id FROM outbox`)
	require.NoError(t, err)
	for r.Next() {
		var id int64
		require.NoError(t, r.Scan(&id))
		left[id] = true
	}
	require.NoError(t, r.Err())
	require.Len(t, left, 3+len(fresh), "a's three unacknowledged rows and the new ones")
	for _, id := range acked {
		require.False(t, left[id], "row %d acknowledged but still there", id)
	}
	require.True(t, left[a.Rows()[0].ID])
	require.True(t, left[a.Rows()[9].ID])

	require.Contains(t, plan(t, pool, `DELETE FROM outbox WHERE ctid = ANY($1::tid[])`, []string{"(0,1)", "(0,2)"}), "Tid Scan")

	// An id outside the claim: the delete falls back to ids.
	c, err := s.Claim(ctx, 1)
	require.NoError(t, err)
	var other int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM outbox`).Scan(&other))
	require.NotEqual(t, other, c.Rows()[0].ID)
	require.NoError(t, c.Complete(ctx, []int64{c.Rows()[0].ID, other}))
	require.Equal(t, 3+len(fresh)-2, itest.Count(t, pool))
}

// The listener reconnects after its connection is killed and wakes again.
func TestListenerSurvivesConnectionLoss(t *testing.T) {
	dsn, pool := itest.Postgres(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "listener-" + itest.Name("t")
	l := &outbox.Listener{Config: cfg.ConnConfig, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.Real{}}
	wakes := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx, func() { wakes <- struct{}{} }) }()
	defer func() { cancel(); <-done }()

	next := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case <-time.After(time.Minute):
			t.Fatalf("no wake after %s", what)
		}
	}
	next("connect") // every (re)connect wakes once
	require.NoError(t, pgoutbox.Notify(context.Background(), pool, ""))
	next("notify")

	_, err = pool.Exec(context.Background(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
		cfg.ConnConfig.RuntimeParams["application_name"])
	require.NoError(t, err)
	next("reconnect")
	require.NoError(t, pgoutbox.Notify(context.Background(), pool, ""))
	next("notify after reconnect")
}
