//go:build integration

package recorder

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/pgtest"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// delayedWriter is the real ledger writer behind a delay on every group,
// as a Cassandra node in long GC pauses answers; delay 0 is the node
// healthy again.
type delayedWriter struct {
	*ledger.Writer
	delay atomic.Int64 // time.Duration
}

func (d *delayedWriter) RecordMany(ctx context.Context, recs []ledger.Rec) []error {
	if w := time.Duration(d.delay.Load()); w > 0 {
		select {
		case <-time.After(w):
		case <-ctx.Done():
		}
	}
	return d.Writer.RecordMany(ctx, recs)
}

// Against the real Cassandra and Postgres: while every ledger write takes
// 1.5 s, a worker's backlog of 4,000 records is taken in at once (not at
// the slow ledger's pace), the recorder never holds more than its queue
// and its groups in flight, the excess is spilled whole to ledger_pending
// and the rest written; once the node is fast again, the spill drained
// through ledgerpending.Claim (as the prefetcher's drainer does) puts every
// record in the ledger.
func TestSlowLedgerSpillsToPostgresAndDrainsAfter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Migrated(t)
	keyspace := testinfra.CassandraKeyspace(t)
	s, err := ledger.Connect(ledger.ConnectConfig{Hosts: testinfra.CassandraHosts(t), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := ledger.Migrate(ctx, s, keyspace, ledger.DefaultReplication); err != nil {
		t.Fatal(err)
	}
	w := &delayedWriter{Writer: ledger.NewWriter(s, keyspace)}
	w.delay.Store(int64(1500 * time.Millisecond))

	th, err := ledger.NewThrottle(ledger.ThrottleConfig{
		Initial: 2000, Min: 50, Max: 20000, Burst: 200,
		Slow: 300 * time.Millisecond, Increase: 500, Decrease: 0.5, Interval: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	const (
		records   = 4000
		shards    = 2
		groupSize = 200
		queueSize = 1000
	)
	var spilled atomic.Int64
	rec := New(w, Config{
		Shards: shards, GroupSize: groupSize, QueueSize: queueSize, Linger: 50 * time.Millisecond, Quiet: 50 * time.Millisecond,
		SpillAfter: 300 * time.Millisecond, Throttle: th, RunningDelay: time.Millisecond,
		Spill: func(ctx context.Context, as []*sundialv1.ExecutionAttempt) error {
			if err := ledgerpending.Spill(ctx, pool, as); err != nil {
				return err
			}
			spilled.Add(int64(len(as)))
			return nil
		},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics{})
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()

	// Records the recorder holds: handed in and not yet written or
	// spilled.
	var handed, finished, peak atomic.Int64
	sample := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sample:
				return
			case <-tick.C:
				if n := handed.Load() - finished.Load(); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	})
	slot := time.Now().UTC().Truncate(time.Second)
	ids := make([]string, records)
	t0 := time.Now()
	for i := range records {
		ids[i] = uuid.NewString()
		a := &sundialv1.ExecutionAttempt{
			ExecutionId: ids[i], JobId: uuid.NewString(), Tenant: "acme", Attempt: 1, FenceToken: 1, JobVersion: 1,
			Status:        sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED,
			ScheduledTime: timestamppb.New(slot), FireTime: timestamppb.New(slot),
			StartedTime: timestamppb.New(slot), FinishedTime: timestamppb.New(slot.Add(time.Millisecond)),
		}
		handed.Add(1)
		if !rec.Final(ctx, a, true, func() { finished.Add(1) }) {
			t.Fatal("Final refused")
		}
	}
	tookIn := time.Since(t0)
	waitFor(t, ctx, "every record written or spilled", func() bool { return finished.Load() == records })
	close(sample)
	sampler.Wait()
	written := records - spilled.Load()
	t.Logf("slow ledger: %d records taken in %s; %d written, %d spilled; peak held %d; rate now %.0f/s",
		records, tookIn.Round(time.Millisecond), written, spilled.Load(), peak.Load(), th.Rate())

	// At 1.5 s per group of at most 200, two shards with four groups out
	// each would take 4 s to write them all: they were taken in far
	// sooner, spilled around the slow node.
	if tookIn > 2*time.Second {
		t.Fatalf("the backlog took %s to hand in: the recorder waited for the slow ledger instead of spilling", tookIn)
	}
	if spilled.Load() == 0 || written <= 0 {
		t.Fatalf("%d written, %d spilled: want the slow ledger written at its rate and the rest spilled", written, spilled.Load())
	}
	// The queues, and per shard the group being gathered and the groups
	// being written.
	if bound := int64(queueSize + shards*(1+DefaultConfig.GroupsInFlight)*groupSize); peak.Load() > bound {
		t.Fatalf("the recorder held %d records at once, beyond its bound of %d", peak.Load(), bound)
	}
	if th.Rate() >= 2000 {
		t.Fatalf("throttle rate %.0f/s after slow writes, want it cut", th.Rate())
	}
	n, _, err := ledgerpending.Backlog(ctx, pool)
	if err != nil || n != spilled.Load() {
		t.Fatalf("ledger_pending holds %d rows (%v), want the %d spilled", n, err, spilled.Load())
	}

	// The node is healthy again: drain the spill as the drainer does.
	w.delay.Store(0)
	drained := drain(t, ctx, pool, w.Writer)
	if drained != spilled.Load() {
		t.Fatalf("drained %d rows, want the %d spilled", drained, spilled.Load())
	}
	// Every execution read back, 16 reads at a time: one after another,
	// the 4,000 reads took most of the test's three minutes.
	reader := ledger.NewReader(s, keyspace)
	todo := make(chan string)
	wrong := make(chan error, len(ids))
	var readers sync.WaitGroup
	for range 16 {
		readers.Go(func() {
			for id := range todo {
				as, err := reader.GetExecution(ctx, id)
				switch {
				case err != nil:
					wrong <- fmt.Errorf("execution %s: %w", id, err)
				case len(as) != 1 || as[0].GetStatus() != sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED || as[0].GetFenceToken() != 1:
					wrong <- fmt.Errorf("execution %s in the ledger: %v, want its one SUCCEEDED attempt as recorded (fence 1)", id, as)
				}
			}
		})
	}
	for _, id := range ids {
		todo <- id
	}
	close(todo)
	readers.Wait()
	close(wrong)
	if err := <-wrong; err != nil {
		t.Fatalf("%v (and %d more)", err, len(wrong))
	}
}

// drain moves ledger_pending into the ledger a batch per transaction
// (claim, write, commit) and returns how many rows it moved.
func drain(t *testing.T, ctx context.Context, pool *pgxpool.Pool, w *ledger.Writer) int64 {
	t.Helper()
	var n int64
	for {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := ledgerpending.Claim(ctx, tx, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			_ = tx.Rollback(ctx)
			return n
		}
		recs := make([]ledger.Rec, len(rows))
		for i, p := range rows {
			recs[i] = ledger.Rec{Attempt: p.ExecutionAttempt(), Held: true}
		}
		for i, err := range w.RecordMany(ctx, recs) {
			if err != nil {
				t.Fatalf("drain: record %d: %v", i, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		n += int64(len(rows))
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
