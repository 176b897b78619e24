//go:build integration

package testinfra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/gocql/gocql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These smoke tests prove a real round trip through each component started by
// deploy/local/infra.sh, and that every helper's cleanup removes what it made.

func TestPostgresRoundTrip(t *testing.T) {
	ctx := context.Background()
	var schema string
	t.Run("schema", func(t *testing.T) {
		dsn := PostgresDSN(t)
		pool := PostgresPool(t, dsn)
		schema = PostgresSchema(t, pool)
		if !strings.HasPrefix(schema, "testpostgresroundtrip_schema_") {
			t.Errorf("current_schema() = %q, want the test's own schema", schema)
		}
		if _, err := pool.Exec(ctx, `CREATE TABLE jobs (id bigint PRIMARY KEY, name text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO jobs VALUES (1, 'nightly')`); err != nil {
			t.Fatal(err)
		}
		// A second, separate connection from the same DSN (as a child process
		// would make) sees the same schema.
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		var name string
		if err := conn.QueryRow(ctx, `SELECT name FROM jobs WHERE id = $1`, 1).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "nightly" {
			t.Errorf("name = %q, want nightly", name)
		}
	})
	// The subtest's cleanup dropped its schema.
	admin := PostgresPool(t, PostgresBaseDSN())
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after its test ended", schema)
	}
}

func TestRedisRoundTrip(t *testing.T) {
	ctx := context.Background()
	var prefix string
	t.Run("lease", func(t *testing.T) {
		rdb, p := Redis(t)
		prefix = p
		key := prefix + "{job:1}:lease"
		// SET NX PX: the lease primitive the worker builds on.
		ok, err := rdb.SetNX(ctx, key, "worker-a", 1500*time.Millisecond).Result()
		if err != nil || !ok {
			t.Fatalf("first SET NX = %v, %v; want true", ok, err)
		}
		ok, err = rdb.SetNX(ctx, key, "worker-b", 1500*time.Millisecond).Result()
		if err != nil || ok {
			t.Fatalf("second SET NX = %v, %v; want false (lease held)", ok, err)
		}
		got, err := rdb.Get(ctx, key).Result()
		if err != nil || got != "worker-a" {
			t.Fatalf("GET = %q, %v; want worker-a", got, err)
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl <= 0 || ttl > 1500*time.Millisecond {
			t.Fatalf("PTTL = %v, %v; want within (0, 1.5s]", ttl, err)
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	defer func() { _ = rdb.Close() }()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("keys %v still exist after their test ended", keys)
	}
}

func TestZooKeeperRoundTrip(t *testing.T) {
	var root string
	t.Run("ephemeral sequential and watch", func(t *testing.T) {
		conn, r := ZooKeeper(t)
		root = r
		election := root + "/election"
		if _, err := conn.Create(election, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		children, _, watch, err := conn.ChildrenW(election)
		if err != nil {
			t.Fatal(err)
		}
		if len(children) != 0 {
			t.Fatalf("children = %v, want none", children)
		}

		// A second session is a competing candidate.
		other := ZooKeeperConnect(t, time.Second)
		node, err := other.CreateProtectedEphemeralSequential(election+"/n-", []byte("candidate"), zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(node, election+"/") || !strings.Contains(node, "n-00000000") {
			t.Errorf("node = %q, want a sequential child of %s", node, election)
		}
		ev := waitEvent(t, watch)
		if ev.Type != zk.EventNodeChildrenChanged || ev.Path != election {
			t.Errorf("watch event = %+v, want children changed on %s", ev, election)
		}

		// An ephemeral node goes with its session, and a data watch says so.
		exists, _, gone, err := conn.ExistsW(node)
		if err != nil || !exists {
			t.Fatalf("exists(%s) = %v, %v", node, exists, err)
		}
		other.Close()
		if ev := waitEvent(t, gone); ev.Type != zk.EventNodeDeleted || ev.Path != node {
			t.Errorf("watch event = %+v, want %s deleted with its session", ev, node)
		}
	})
	conn := ZooKeeperConnect(t, DefaultZooKeeperSessionTimeout)
	if ok, _, err := conn.Exists(root); err != nil || ok {
		t.Errorf("exists(%s) = %v, %v after its test ended; want deleted", root, ok, err)
	}
}

func waitEvent(t *testing.T, ch <-chan zk.Event) zk.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
		return zk.Event{}
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var topic string
	t.Run("produce and consume in a group", func(t *testing.T) {
		topic = KafkaTopic(t, 4)
		group := KafkaGroup(t)

		producer := KafkaClient(t,
			kgo.DefaultProduceTopic(topic),
			kgo.RequiredAcks(kgo.AllISRAcks()), // acks=all, as the relay publishes
		)
		const n = 20
		var records []*kgo.Record
		for i := range n {
			records = append(records, &kgo.Record{Key: fmt.Appendf(nil, "job-%d", i%5), Value: fmt.Appendf(nil, "firing-%d", i)})
		}
		if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}

		consumer := KafkaClient(t,
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
		)
		seen := map[string]bool{}
		for len(seen) < n {
			fetches := consumer.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("consumed %d of %d records: %v", len(seen), n, err)
			}
			fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
			fetches.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
		}
		if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}

		// The group's committed offsets cover every record.
		adm := kadm.NewClient(producer)
		offsets, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		offsets.Each(func(o kadm.OffsetResponse) { committed += o.At })
		if committed != n {
			t.Errorf("committed offsets sum to %d, want %d", committed, n)
		}
	})
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(KafkaBrokers(t)...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := topics[topic]; ok && d.Err == nil {
		t.Errorf("topic %s still exists after its test ended", topic)
	}
}

func TestCassandraRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var keyspace string
	t.Run("keyspace", func(t *testing.T) {
		session, ks := Cassandra(t)
		keyspace = ks
		if err := session.Query(`CREATE TABLE executions (job text, id timeuuid, status text, PRIMARY KEY (job, id)) WITH CLUSTERING ORDER BY (id DESC)`).WithContext(ctx).Exec(); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"RUNNING", "SUCCEEDED"} {
			if err := session.Query(`INSERT INTO executions (job, id, status) VALUES (?, now(), ?)`, "job-1", s).WithContext(ctx).Exec(); err != nil {
				t.Fatal(err)
			}
		}
		var status string
		if err := session.Query(`SELECT status FROM executions WHERE job = ? LIMIT 1`, "job-1").WithContext(ctx).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status != "SUCCEEDED" {
			t.Errorf("newest status = %q, want SUCCEEDED", status)
		}
	})
	session := CassandraSession(t, CassandraCluster(t))
	var name string
	err := session.Query(`SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`, keyspace).WithContext(ctx).Scan(&name)
	if err == nil {
		t.Errorf("keyspace %s still exists after its test ended", keyspace)
	} else if !errors.Is(err, gocql.ErrNotFound) {
		t.Fatal(err)
	}
}

// A pool whose connection a failed test never returned (a transaction
// left open by FailNow) is given up on at cleanup instead of waiting for
// it forever: pgxpool's Close waits for every acquired connection.
func TestPoolCloseGivesUpOnAConnectionNeverReturned(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	closeWithin(t, pool, 200*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("closing took %s with a connection held", took)
	}
	conn.Release() // the close finishes now, before goleak looks
}
