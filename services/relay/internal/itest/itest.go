// Package itest is what the relay's integration tests share: a Postgres
// schema of the test's own with Sundial's migrations applied, a Kafka topic
// prefix of the test's own, staging outbox rows the way the prefetcher does,
// and reading back everything the firing topics hold.
//
// Isolation comes from testkit/testinfra (a schema per test, unique names);
// what is relay-specific — four topics under one prefix, a whole database
// for the bloat measurement — is here.
package itest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/migrations"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// Brokers are the test Kafka brokers (SUNDIAL_TEST_KAFKA_BROKERS).
func Brokers(t testing.TB) []string { return testinfra.KafkaBrokers(t) }

// Name is a unique lower-case identifier starting with prefix.
func Name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// Postgres gives the test a schema of its own (testkit/testinfra) with the
// migrations applied, and returns a DSN selecting it (search_path in the
// libpq options, so child processes can use it too) and a pool on it. Both
// go when the test ends.
func Postgres(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := testinfra.PostgresDSN(t)
	pool := testinfra.PostgresPool(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	return dsn, pool
}

// TopicPrefix returns a prefix of the test's own ("test.<name>_<hex>", as
// testinfra names topics); the relay creates the four firing topics under
// it, and they are deleted when the test ends.
func TopicPrefix(t testing.TB) string {
	t.Helper()
	prefix := "test." + testinfra.UniqueName(t, 100)
	brokers := Brokers(t)
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := kadm.NewClient(cl).DeleteTopics(ctx, append(firing.Topics{Prefix: prefix}.FireAll(), firing.Topics{Prefix: prefix}.DLQ())...); err != nil {
			t.Logf("topics of %s left behind: %v", prefix, err)
		}
	})
	return prefix
}

// Staged is one staged row as the test knows it.
type Staged struct {
	ExecutionID string
	JobID       string
	Priority    sundialv1.Priority
	Envelope    []byte
}

// Stage inserts n outbox rows of fresh jobs, cycling through the four
// priorities, publishable at now() + delay, in one transaction; with notify
// it also sends the NOTIFY the prefetcher sends.
func Stage(t testing.TB, pool *pgxpool.Pool, n int, delay time.Duration, notify bool) []Staged {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prios := firing.Priorities()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var dbNow time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	rows := make([]outbox.Row, 0, n)
	out := make([]Staged, 0, n)
	now := time.Now().UTC()
	for i := range n {
		job := uuid.New()
		sched := now.Add(time.Minute).Truncate(time.Second)
		f := &sundialv1.Firing{
			ExecutionId: firing.ExecutionID(job, sched).String(), JobId: job.String(), Tenant: "t",
			JobVersion: 1, Attempt: 1, Priority: prios[i%len(prios)],
			ScheduledTime: timestamppb.New(sched), FireTime: timestamppb.New(sched),
		}
		envelope, err := firing.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		row, err := outbox.FromFiring(f, envelope)
		if err != nil {
			t.Fatal(err)
		}
		row.PublishAt = dbNow.Add(delay)
		rows = append(rows, row)
		out = append(out, Staged{ExecutionID: f.ExecutionId, JobID: f.JobId, Priority: f.Priority, Envelope: envelope})
	}
	if _, err := outbox.Insert(ctx, tx, rows); err != nil {
		t.Fatal(err)
	}
	if notify {
		if err := outbox.Notify(ctx, tx, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// Count is the number of rows left in the outbox.
func Count(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ReadAll returns every record in the four firing topics under prefix, up
// to their end offsets at the time of the call. Call it once the outbox is
// empty: every row was acknowledged before it was deleted, so by then every
// record is below the end offsets.
func ReadAll(t testing.TB, prefix string) []*kgo.Record {
	t.Helper()
	topics := firing.Topics{Prefix: prefix}.FireAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if want[o.Topic] == nil {
			want[o.Topic] = map[int32]int64{}
		}
		want[o.Topic][o.Partition] = o.Offset
		if o.Offset > 0 {
			remaining++
		}
	})
	var out []*kgo.Record
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records; %d partitions not at their end", len(out), remaining)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			end := want[r.Topic][r.Partition]
			if r.Offset >= end {
				return
			}
			out = append(out, r)
			if r.Offset == end-1 {
				remaining--
			}
		})
	}
	return out
}

// Database creates a database of the test's own with the migrations
// applied, for tests that must not touch anyone else's: a long transaction
// holds back vacuum and blocks CREATE INDEX CONCURRENTLY for its whole
// database, not just its schema. Dropped (WITH FORCE) when the test ends.
func Database(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	base := testinfra.PostgresBaseDSN()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("postgres at %s (deploy/local/infra.sh up): %v", base, err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	name := Name("relaydb")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("database %s left behind: %v", name, err)
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("database %s left behind: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dsn := u.String()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.Up(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	return dsn, pool
}
