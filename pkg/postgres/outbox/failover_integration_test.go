//go:build integration

package outbox_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// The cluster profile's Postgres pair (deploy/local/cluster/postgres.sh,
// `CLUSTER=1 make infra-up`): a primary and a synchronous standby, reached
// through one multi-host DSN with target_session_attrs=read-write.

// pgFailoverBound is how long after the standby leaves recovery (seen from
// a connection of the test's own) the writers must be writing on it:
// pgxpool drops the connections the dead primary broke, and the next one it
// opens skips the refused host (and, until the promotion, the read-only
// one) and lands on the promoted node; a writer retries every 50 ms.
const pgFailoverBound = 5 * time.Second

// outboxWriters write outbox rows, one statement each, as fast as they can
// through a pool on the multi-host DSN, retrying a failed row (the insert
// is idempotent on its key) until it is acknowledged.
type outboxWriters struct {
	mu       sync.Mutex
	acked    []uuid.UUID // execution ids whose insert returned without error
	ackedAt  []time.Time // when
	ackedOn  []int       // and the port of the server that took it
	failures []time.Time // each failed attempt
	servers  map[int]int // acknowledged inserts by the server port that took them
	wg       sync.WaitGroup
	stop     context.CancelFunc
	job      uuid.UUID
	pool     *pgxpool.Pool
}

func startOutboxWriters(pool *pgxpool.Pool, n int) *outboxWriters {
	ctx, cancel := context.WithCancel(context.Background())
	w := &outboxWriters{stop: cancel, job: uuid.New(), pool: pool, servers: map[int]int{}}
	slot := time.Now().UTC().Truncate(time.Second)
	for i := 0; i < n; i++ {
		w.wg.Add(1)
		go func() { // owned by w: ends when stopWriters cancels ctx
			defer w.wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				r := row(w.job, slot.Add(time.Duration(i*1_000_000+j)*time.Millisecond))
				for ctx.Err() == nil {
					if w.insert(ctx, r) {
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	return w
}

// insert writes r and the port of the server that took it, in one
// transaction, and records the outcome.
func (w *outboxWriters) insert(ctx context.Context, r outbox.Row) bool {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var port int
	tx, err := w.pool.Begin(ictx)
	if err == nil {
		_, err = outbox.Insert(ictx, tx, []outbox.Row{r})
		if err == nil {
			err = tx.QueryRow(ictx, "SELECT inet_server_port()").Scan(&port)
		}
		if err == nil {
			err = tx.Commit(ictx)
		} else {
			_ = tx.Rollback(context.Background())
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			w.failures = append(w.failures, now)
		}
		return false
	}
	w.acked = append(w.acked, r.ExecutionID)
	w.ackedAt = append(w.ackedAt, now)
	w.ackedOn = append(w.ackedOn, port)
	w.servers[port]++
	return true
}

func (w *outboxWriters) stopWriters() {
	w.stop()
	w.wg.Wait()
}

// counts is how many acknowledgements came before t, and when the first
// one after t came (zero when none has).
func (w *outboxWriters) counts(t time.Time) (before int, firstAfter time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.ackedAt {
		if at.Before(t) {
			before++
		} else if firstAfter.IsZero() || at.Before(firstAfter) {
			firstAfter = at
		}
	}
	return before, firstAfter
}

// span is when the server at port first and last acknowledged a write.
func (w *outboxWriters) span(port int) (first, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, at := range w.ackedAt {
		if w.ackedOn[i] != port {
			continue
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return first, last
}

func TestPrimaryKilledStandbyPromotedWritesResumeAndNothingAcknowledgedIsLost(t *testing.T) {
	dsn := testinfra.PostgresHASchema(t)
	oldPrimary := testinfra.ClusterScript(t, "postgres", "primary")
	// Whatever happens, the pair is made whole again (the old primary rebuilt
	// as the new one's standby) before the schema's cleanup, registered
	// earlier, drops the schema.
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("postgres", "up"); err != nil {
			t.Errorf("healing the Postgres pair: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrations.Up(ctx, pool, slog.New(slog.DiscardHandler)))

	// The guarantee checked below rests on synchronous replication: say so
	// if the pair runs without it, rather than pass by luck.
	var syncStandbys int
	var syncCommit string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&syncStandbys))
	require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&syncCommit))
	require.Equal(t, 1, syncStandbys, "the primary has no synchronous standby (postgres.sh status)")
	require.Equal(t, "on", syncCommit)

	w := startOutboxWriters(pool, 4)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			w.stopWriters()
		}
	})
	require.Eventually(t, func() bool { n, _ := w.counts(time.Now()); return n >= 200 }, 30*time.Second, 10*time.Millisecond,
		"the writers never got going")

	// A connection of the test's own to the standby says when it leaves
	// recovery, whatever the scripts' own overhead.
	standby := standbyConfig(t, cfg, oldPrimary)
	sconn, err := pgx.ConnectConfig(ctx, standby)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sconn.Close(context.Background()) })

	killed := time.Now()
	testinfra.ClusterScript(t, "postgres", "kill-primary")
	down := time.Now()
	writable := make(chan time.Time, 1)
	go func() { // ends when the standby leaves recovery or ctx ends
		for ctx.Err() == nil {
			var rec bool
			if err := sconn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err == nil && !rec {
				writable <- time.Now()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(writable)
	}()
	testinfra.ClusterScript(t, "postgres", "promote")
	promoted := time.Now()
	writableAt, ok := <-writable
	require.True(t, ok, "the standby never left recovery")
	newPrimary := testinfra.ClusterScript(t, "postgres", "primary")
	require.NotEqual(t, oldPrimary, newPrimary)
	require.Equal(t, strconv.Itoa(int(standby.Port)), newPrimary)

	oldPort, err := strconv.Atoi(oldPrimary)
	require.NoError(t, err)
	newPort, err := strconv.Atoi(newPrimary)
	require.NoError(t, err)
	var resumed time.Time
	require.Eventually(t, func() bool {
		resumed, _ = w.span(newPort)
		return !resumed.IsZero()
	}, 30*time.Second, 5*time.Millisecond, "no write was acknowledged by the promoted node")
	// Some more writes on the new primary, then stop and count.
	require.Eventually(t, func() bool { _, last := w.span(newPort); return last.Sub(resumed) > time.Second }, 30*time.Second, 10*time.Millisecond)
	w.stopWriters()
	stopped = true

	ackedBeforePromotion, _ := w.counts(down)
	_, lastOld := w.span(oldPort)
	w.mu.Lock()
	acked := append([]uuid.UUID(nil), w.acked...)
	failures, servers := len(w.failures), w.servers
	w.mu.Unlock()

	// Every acknowledged row is on the new primary, exactly once (the key is
	// unique; a retried row that had committed is a no-op).
	var present, onPrimary int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE execution_id = ANY($1)`, acked).Scan(&present))
	require.NoError(t, pool.QueryRow(ctx, `SELECT inet_server_port()`).Scan(&onPrimary))
	t.Logf("Postgres failover: primary :%d stopped (immediate; the script took %s), standby :%d promoted (the script took %s, out of recovery %s after it began); "+
		"last write acknowledged by :%d %s after the kill began, first by :%d %s after it left recovery: writes stopped for %s; "+
		"%d failed attempts; %d rows acknowledged (%d before the promotion began) by server %v, %d of them present on :%d",
		oldPort, down.Sub(killed), newPort, promoted.Sub(down), writableAt.Sub(down),
		oldPort, lastOld.Sub(killed), newPort, resumed.Sub(writableAt), resumed.Sub(lastOld),
		failures, len(acked), ackedBeforePromotion, servers, present, onPrimary)
	require.Equal(t, newPort, onPrimary, "the pool's sessions are not on the promoted node")
	require.Equal(t, len(acked), present, "acknowledged rows are missing after the promotion")
	require.Less(t, resumed.Sub(writableAt), pgFailoverBound, "writes came back too slowly after the promotion")
}

// standbyConfig is a connection to the node of the multi-host configuration
// that is not primaryPort, without the read-write requirement.
func standbyConfig(t *testing.T, pool *pgxpool.Config, primaryPort string) *pgx.ConnConfig {
	t.Helper()
	c := pool.ConnConfig.Copy()
	hosts := []*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}
	hosts = append(hosts, c.Fallbacks...)
	for _, h := range hosts {
		if strconv.Itoa(int(h.Port)) != primaryPort {
			c.Host, c.Port, c.TLSConfig, c.Fallbacks = h.Host, h.Port, h.TLSConfig, nil
			c.ValidateConnect = nil
			return c
		}
	}
	t.Fatalf("the DSN names no node besides the primary :%s", primaryPort)
	return nil
}
