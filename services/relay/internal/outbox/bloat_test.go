//go:build integration && bloat

package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/services/relay/internal/itest"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

// TestOutboxBloat measures the outbox under a sustained insert/delete load
// — a stager inserting rows and a relay-style claimer deleting them, no
// Kafka — in three phases: normal, with a long-running transaction holding
// back the xmin horizon, and after it ends. It logs dead tuples, table and
// index sizes and claim latency every few seconds. docs/architecture/relay.md
// records a run.
//
//	go test -tags integration,bloat -run Bloat -v -timeout 20m ./internal/outbox/
func TestOutboxBloat(t *testing.T) {
	// A database of its own: the long transaction below would otherwise
	// hold back vacuum and CREATE INDEX CONCURRENTLY for everyone.
	dsn, pool := itest.Database(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := outbox.NewStore(pool)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Stager: 100 rows every 50 ms, about 2,000 rows/s.
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			itest.Stage(t, pool, 100, 0, false)
			if t.Failed() {
				return
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	var mu sync.Mutex
	var claims []time.Duration
	// Claimer: the relay's claim and delete, 500 rows a batch.
	wg.Go(func() {
		for ctx.Err() == nil {
			start := time.Now()
			c, err := store.Claim(ctx, 500)
			if err != nil {
				return
			}
			took := time.Since(start)
			if err := c.Complete(context.Background(), ids(c.Rows())); err != nil {
				t.Errorf("complete: %v", err)
				return
			}
			mu.Lock()
			claims = append(claims, took)
			mu.Unlock()
			if len(c.Rows()) < 500 {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	})

	sample := func(phase string) {
		var live, dead, vacuums int64
		var table, index string
		err := pool.QueryRow(ctx, `
SELECT n_live_tup, n_dead_tup, autovacuum_count + vacuum_count,
       pg_size_pretty(pg_relation_size(relid)), pg_size_pretty(pg_indexes_size(relid))
  FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass`).Scan(&live, &dead, &vacuums, &table, &index)
		require.NoError(t, err)
		mu.Lock()
		c := slices.Clone(claims)
		claims = claims[:0]
		mu.Unlock()
		slices.Sort(c)
		p := func(q float64) time.Duration {
			if len(c) == 0 {
				return 0
			}
			return c[int(q*float64(len(c)-1))]
		}
		t.Logf("%-10s live %6d  dead %8d  vacuums %2d  table %8s  indexes %8s  claims %4d  claim p50 %7s p99 %7s",
			phase, live, dead, vacuums, table, index, len(c), p(.5).Round(10*time.Microsecond), p(.99).Round(10*time.Microsecond))
	}
	run := func(phase string, d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			time.Sleep(10 * time.Second) // a measurement cadence, not synchronisation
			sample(phase)
		}
	}

	run("normal", 90*time.Second)
	// A long transaction elsewhere in the database (a report, a stuck
	// migration, an idle-in-transaction client): its snapshot pins the
	// xmin horizon, so no dead outbox row can be vacuumed while it lives.
	long, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	// Closing the connection ends the transaction whatever happens below.
	defer func() { _ = long.Close(context.Background()) }()
	tx, err := long.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n)) // takes the snapshot
	run("long-tx", 120*time.Second)
	require.NoError(t, tx.Rollback(ctx))
	run("after", 90*time.Second)
	_, err = pool.Exec(ctx, "VACUUM outbox")
	require.NoError(t, err)
	sample("vacuumed")
	fmt.Println()
}
