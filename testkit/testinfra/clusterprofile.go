package testinfra

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The cluster profile's ZooKeeper ensemble, Postgres primary/standby pair
// and three Kafka brokers (deploy/local/cluster/zookeeper.sh, postgres.sh
// and kafka.sh, started by `CLUSTER=1 make infra-up`), for the failover
// tests. Like every component, one that is not running fails the test,
// never skips it.
const (
	EnvZooKeeperEnsembleAddrs = "SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS"
	EnvPostgresHADSN          = "SUNDIAL_TEST_PG_HA_DSN"
	EnvKafkaClusterBrokers    = "SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS"
)

// Defaults match the scripts' ports.
const (
	DefaultZooKeeperEnsembleAddrs = "127.0.0.1:2191,127.0.0.1:2192,127.0.0.1:2193"
	DefaultPostgresHADSN          = "postgres://sundial:sundial@127.0.0.1:5441,127.0.0.1:5442/sundial?target_session_attrs=read-write&sslmode=disable"
	DefaultKafkaClusterBrokers    = "127.0.0.1:9191,127.0.0.1:9192,127.0.0.1:9193"
)

// ZooKeeperEnsembleAddrs are the ensemble's client addresses
// (SUNDIAL_TEST_ZK_ENSEMBLE_ADDRS or the default), each checked to accept
// connections: a failover test needs all three members at its start.
func ZooKeeperEnsembleAddrs(t testing.TB) []string {
	t.Helper()
	addrs := splitList(envOr(EnvZooKeeperEnsembleAddrs, DefaultZooKeeperEnsembleAddrs))
	for _, a := range addrs {
		requireReachable(t, "the ZooKeeper ensemble (CLUSTER=1 make infra-up)", EnvZooKeeperEnsembleAddrs, []string{a})
	}
	return addrs
}

// PostgresHADSN is the multi-host DSN of the primary/standby pair
// (SUNDIAL_TEST_PG_HA_DSN or the default), checked that a read-write
// session opens through it.
func PostgresHADSN(t testing.TB) string {
	t.Helper()
	dsn := envOr(EnvPostgresHADSN, DefaultPostgresHADSN)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testinfra: %s=%q is not a URL: %v", EnvPostgresHADSN, dsn, err)
	}
	requireReachable(t, "the Postgres primary/standby pair (CLUSTER=1 make infra-up)", EnvPostgresHADSN, strings.Split(u.Host, ","))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err == nil {
		err = pool.Ping(ctx)
		pool.Close()
	}
	if err != nil {
		t.Fatalf("%s", unreachable("the Postgres primary/standby pair (CLUSTER=1 make infra-up)", EnvPostgresHADSN, u.Host, "no read-write session: "+err.Error()))
	}
	return dsn
}

// PostgresHASchema creates a schema of the test's own on the pair's primary
// and returns the multi-host DSN with its search_path set to it. The schema
// is dropped when the test ends, on whichever node is the primary then.
func PostgresHASchema(t testing.TB) string {
	t.Helper()
	base := PostgresHADSN(t)
	schema := UniqueName(t, 63)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testinfra: connect to the Postgres pair: %v", err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testinfra: create schema %s on the Postgres pair: %v", schema, err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })
	return WithSearchPath(base, schema)
}

// ClusterScript runs deploy/local/cluster/<name>.sh with args (a fault drill:
// kill, kill-primary, promote; or up, to heal) and returns its standard
// output, trimmed; it fails the test when the script does.
func ClusterScript(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := RunClusterScript(name, args...)
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	return out
}

// RunClusterScript is ClusterScript for cleanups and goroutines, where a
// failure is to be reported rather than end the test.
func RunClusterScript(name string, args ...string) (string, error) {
	script := filepath.Join(checkoutRoot(), "deploy", "local", "cluster", name+".sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// kafkaClusterComponent names the three brokers and how to start them in
// the failure message.
const kafkaClusterComponent = "the Kafka cluster (CLUSTER=kafka make infra-up, or deploy/local/cluster/kafka.sh up)"

// KafkaClusterBrokers are the three brokers' addresses
// (SUNDIAL_TEST_KAFKA_CLUSTER_BROKERS or the default), each checked to
// accept connections: a failover test needs all three at its start.
func KafkaClusterBrokers(t testing.TB) []string {
	t.Helper()
	brokers := splitList(envOr(EnvKafkaClusterBrokers, DefaultKafkaClusterBrokers))
	for _, b := range brokers {
		requireReachable(t, kafkaClusterComponent, EnvKafkaClusterBrokers, []string{b})
	}
	return brokers
}

// KafkaClusterTopic creates a topic of the test's own on the three-broker
// cluster with the given number of partitions and replication factor 3,
// waits until every partition has a leader and all three replicas in sync,
// and deletes the topic when the test ends.
func KafkaClusterTopic(t testing.TB, partitions int32) string {
	t.Helper()
	if partitions < 1 {
		t.Fatalf("testinfra: KafkaClusterTopic: partitions must be positive, got %d", partitions)
	}
	brokers := KafkaClusterBrokers(t)
	topic := "test." + UniqueName(t, 200)
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("testinfra: kafka cluster admin client: %v", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, 3, nil, topic); err != nil {
		t.Fatalf("testinfra: create topic %s on the Kafka cluster: %v", topic, err)
	}
	t.Cleanup(func() {
		adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Logf("testinfra: kafka cluster topic %s left behind: %v", topic, err)
			return
		}
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Logf("testinfra: kafka cluster topic %s left behind: %v", topic, err)
		}
	})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fullyReplicated(ctx, adm, topic, partitions)
		if err == nil {
			return topic
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testinfra: topic %s on the Kafka cluster is not fully replicated: %v", topic, err)
		case <-tick.C:
		}
	}
}

// fullyReplicated: every partition of topic has a leader and 3 replicas, all in sync.
func fullyReplicated(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	d, ok := details[topic]
	switch {
	case !ok:
		return errors.New("not in metadata yet")
	case d.Err != nil:
		return d.Err
	case int32(len(d.Partitions)) != partitions:
		return fmt.Errorf("%d of %d partitions in metadata", len(d.Partitions), partitions)
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 || len(p.Replicas) != 3 || len(p.ISR) != 3 {
			return fmt.Errorf("partition %d: leader %d, replicas %v, in sync %v, err %v", p.Partition, p.Leader, p.Replicas, p.ISR, p.Err)
		}
	}
	return nil
}
