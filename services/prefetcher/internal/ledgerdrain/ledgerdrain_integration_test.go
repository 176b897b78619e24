//go:build integration

package ledgerdrain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

type env struct {
	pool   *pgxpool.Pool
	writer *ledger.Writer
	reader *ledger.Reader
	job    uuid.UUID
	slot0  time.Time
}

func setup(t *testing.T) *env {
	t.Helper()
	ks := testinfra.CassandraKeyspace(t)
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	require.NoError(t, err)
	t.Cleanup(s.Close) // before the keyspace is dropped
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, ledger.Migrate(ctx, s, ks, ""))
	return &env{
		pool:   pgtest.Pool(t, pgtest.Schema(t)),
		writer: ledger.NewWriter(s, ks),
		reader: ledger.NewReader(s, ks),
		job:    uuid.Must(uuid.NewV7()),
		// This month, so ListByJob's walk back from now finds the rows.
		slot0: time.Now().UTC().Truncate(time.Hour).Add(-time.Hour),
	}
}

// insert stores n skipped slots of the env's job, one minute apart.
func (e *env) insert(t *testing.T, n int) []ledgerpending.Row {
	t.Helper()
	var rows []ledgerpending.Row
	for i := range n {
		at := e.slot0.Add(time.Duration(i) * time.Minute)
		rows = append(rows, ledgerpending.Row{
			ExecutionID: firing.ExecutionID(e.job, at).String(), JobID: e.job.String(), Tenant: "tenant-a",
			Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, ScheduledAt: at, JobVersion: 4,
			Reason: fmt.Sprintf("misfire: reason %d", i),
		})
	}
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ledgerpending.Insert(ctx, tx, rows))
	require.NoError(t, tx.Commit(ctx))
	return rows
}

func (e *env) pending(t *testing.T) int64 {
	t.Helper()
	n, _, err := ledgerpending.Backlog(context.Background(), e.pool)
	require.NoError(t, err)
	return n
}

func (e *env) drainer(t *testing.T, l Ledger, batch int) (*Drainer, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	dial := func(context.Context) (Ledger, func(), error) { return l, func() {}, nil }
	d, err := New(Config{Interval: 20 * time.Millisecond, BatchSize: batch, Concurrency: 4, BatchTimeout: time.Minute},
		e.pool, dial, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, m)
	require.NoError(t, err)
	return d, m
}

// ledgerRows lists the job's rows in the ledger, oldest slot first.
func (e *env) ledgerRows(t *testing.T) []*sundialv1.ExecutionAttempt {
	t.Helper()
	got, _, err := e.reader.ListByJob(context.Background(), e.job.String(), ledger.MaxPageSize, "")
	require.NoError(t, err)
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	return got
}

func requireInLedger(t *testing.T, e *env, rows []ledgerpending.Row) {
	t.Helper()
	got := e.ledgerRows(t)
	require.Len(t, got, len(rows), "each pending row once in the ledger")
	for i, a := range got {
		r := rows[i]
		require.Equal(t, r.ExecutionID, a.GetExecutionId())
		require.Equal(t, sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED, a.GetStatus())
		require.Equal(t, int32(1), a.GetAttempt())
		require.Zero(t, a.GetFenceToken())
		require.Equal(t, r.Reason, a.GetReason())
		require.Equal(t, int64(4), a.GetJobVersion())
		require.Equal(t, "tenant-a", a.GetTenant())
		require.True(t, a.GetScheduledTime().AsTime().Equal(r.ScheduledAt))
	}
}

// The running service writes every pending row to the ledger and deletes
// it, batch after batch.
func TestDrainerMovesPendingRowsIntoTheLedger(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 25)
	d, m := e.drainer(t, e.writer, 10)
	require.NoError(t, d.Start(context.Background()))
	defer d.Stop()
	require.Eventually(t, func() bool { return e.pending(t) == 0 }, 60*time.Second, 20*time.Millisecond)
	requireInLedger(t, e, rows)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Drained) == 25 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Pending) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// failing embeds the real ledger and fails writes of one execution while
// broken is set.
type failing struct {
	Ledger
	mu     sync.Mutex
	broken string
	calls  map[string]int
}

func (f *failing) Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[a.GetExecutionId()]++
	broken := f.broken == a.GetExecutionId()
	f.mu.Unlock()
	if broken {
		return errors.New("cassandra: write timeout")
	}
	return f.Ledger.Record(ctx, a)
}

// A write that fails leaves its whole batch pending (nothing is deleted
// that is not in the ledger); the next round writes the batch again, which
// the ledger absorbs: every row once.
func TestFailedWriteLeavesTheBatchPendingAndRetryIsIdempotent(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 8)
	f := &failing{Ledger: e.writer, broken: rows[5].ExecutionID}
	d, m := e.drainer(t, f, 100)
	ctx := context.Background()

	require.Error(t, d.round(ctx))
	require.Equal(t, int64(8), e.pending(t), "the failed batch rolled back")
	require.Len(t, e.ledgerRows(t), 7, "the other rows were written")
	require.Zero(t, testutil.ToFloat64(m.Drained))

	f.mu.Lock()
	f.broken = ""
	f.mu.Unlock()
	require.NoError(t, d.round(ctx))
	require.Zero(t, e.pending(t))
	requireInLedger(t, e, rows)
	require.Equal(t, 2, f.calls[rows[0].ExecutionID], "written twice, recorded once")
}

// A ledger that cannot be reached is dialled again next round; the rows
// wait.
func TestDialFailureIsRetried(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 3)
	fails := 1
	dial := func(context.Context) (Ledger, func(), error) {
		if fails > 0 {
			fails--
			return nil, nil, errors.New("no hosts available")
		}
		return e.writer, func() {}, nil
	}
	d, err := New(Config{Interval: time.Second, BatchSize: 10, Concurrency: 2, BatchTimeout: time.Minute},
		e.pool, dial, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, err)
	require.ErrorContains(t, d.round(context.Background()), "no hosts available")
	require.Equal(t, int64(3), e.pending(t))
	require.NoError(t, d.round(context.Background()))
	require.Zero(t, e.pending(t))
	requireInLedger(t, e, rows)
}

// A row the ledger refuses outright is dropped (and counted) instead of
// blocking every row behind it forever.
func TestInvalidRowIsDroppedNotBlocking(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 2)
	_, err := e.pool.Exec(context.Background(), `INSERT INTO ledger_pending (execution_id, job_id, tenant, status, scheduled_at, fire_at, job_version, reason)
		VALUES (gen_random_uuid(), $1, 't', 0, now(), now(), 1, 'no status')`, e.job)
	require.NoError(t, err)
	d, m := e.drainer(t, e.writer, 10)
	require.NoError(t, d.round(context.Background()))
	require.Zero(t, e.pending(t))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Dropped))
	require.Equal(t, 2.0, testutil.ToFloat64(m.Drained))
	requireInLedger(t, e, rows)
}

// Drainers on several prefetchers split the rows between them: each row is
// written by exactly one.
func TestConcurrentDrainersSplitTheRows(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 60)
	counters := []*failing{{Ledger: e.writer}, {Ledger: e.writer}, {Ledger: e.writer}}
	for _, c := range counters {
		d, _ := e.drainer(t, c, 5)
		require.NoError(t, d.Start(context.Background()))
		defer d.Stop()
	}
	require.Eventually(t, func() bool { return e.pending(t) == 0 }, 60*time.Second, 20*time.Millisecond)
	total := map[string]int{}
	for _, c := range counters {
		c.mu.Lock()
		for id, n := range c.calls {
			total[id] += n
		}
		c.mu.Unlock()
	}
	require.Len(t, total, 60)
	for id, n := range total {
		require.Equal(t, 1, n, "row %s written %d times", id, n)
	}
	requireInLedger(t, e, rows)
}

// counting embeds the real ledger and counts the calls of each kind.
type counting struct {
	GroupLedger
	mu          sync.Mutex
	one, groups int
}

func (c *counting) Record(ctx context.Context, a *sundialv1.ExecutionAttempt) error {
	c.mu.Lock()
	c.one++
	c.mu.Unlock()
	return c.GroupLedger.Record(ctx, a)
}

func (c *counting) RecordMany(ctx context.Context, recs []ledger.Rec) []error {
	c.mu.Lock()
	c.groups++
	c.mu.Unlock()
	return c.GroupLedger.RecordMany(ctx, recs)
}

// A ledger that writes groups gets a batch of pending rows in one call (a
// deleted job's thousands of staged firings cost a few Cassandra batches,
// not a write and a fence read each).
func TestGroupLedgerTakesABatchInOneCall(t *testing.T) {
	e := setup(t)
	rows := e.insert(t, 25)
	c := &counting{GroupLedger: e.writer}
	d, _ := e.drainer(t, c, 100)
	require.NoError(t, d.round(context.Background()))
	require.Zero(t, e.pending(t))
	requireInLedger(t, e, rows)
	require.Equal(t, 1, c.groups, "one RecordMany for the batch")
	require.Zero(t, c.one, "no record written one by one")
}
