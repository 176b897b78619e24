//go:build integration && kafkacluster

// The relay's producer against the cluster profile's three Kafka brokers
// (deploy/local/cluster/kafka.sh: replication factor 3,
// min.insync.replicas=2). Its own build tag keeps it out of the integration
// tier that make test runs (which does not start the three brokers); run it
// with
//
//	deploy/local/cluster/kafka.sh up
//	source <(deploy/local/cluster/kafka.sh env)
//	go test -tags integration,kafkacluster -count=1 -run TestKafkaCluster ./internal/relay/
//
// (in services/relay). Without the brokers it fails, never skips.

package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

// TestKafkaClusterAcksAllSurvivesLeaderKill produces with the relay's own
// producer (acks=all, idempotent, bounded delivery) while the partition's
// leader broker is SIGKILLed, then restarts it (kafka.sh up) and reads the
// partition back: every record the producer was told is acknowledged is
// there exactly once, and no record is there twice. Records whose produce
// failed during the election are not counted as acknowledged (the relay
// keeps their outbox rows and publishes them again); they may or may not
// be in the log, but at most once.
func TestKafkaClusterAcksAllSurvivesLeaderKill(t *testing.T) {
	brokers := testinfra.KafkaClusterBrokers(t)
	topic := testinfra.KafkaClusterTopic(t, 1)
	// Whatever happens below, the killed broker is started again (and the
	// test fails if it cannot be); this cleanup runs before the topic's.
	t.Cleanup(func() {
		if _, err := testinfra.RunClusterScript("kafka", "up"); err != nil {
			t.Errorf("heal the Kafka cluster: %v", err)
		}
	})

	cfg := Defaults()
	cfg.KafkaBrokers = strings.Join(brokers, ",")
	cfg.NodeID = "kafkacluster-test"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	kc, err := NewProducer(cfg, logger)
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	adm := kadm.NewClient(kc)

	leader := partitionLeader(t, adm, topic)
	require.GreaterOrEqual(t, leader, int32(1), "partition 0 has no leader at the start")

	p := &ackingProducer{kc: kc, topic: topic, ok: map[string]bool{}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	const before, after = 300, 300
	require.Eventually(t, func() bool { return p.acked() >= before }, 60*time.Second, 20*time.Millisecond,
		"the producer did not get %d acknowledgements from the healthy cluster", before)

	killedAt := time.Now()
	ackedAtKill := p.acked()
	testinfra.ClusterScript(t, "kafka", "kill", strconv.Itoa(int(leader)))
	var newLeader int32
	require.Eventually(t, func() bool {
		newLeader = partitionLeader(t, adm, topic)
		return newLeader >= 1 && newLeader != leader
	}, 60*time.Second, 100*time.Millisecond, "partition 0's leadership did not move off killed broker %d", leader)
	elected := time.Since(killedAt)
	require.Eventually(t, func() bool { return p.acked() >= ackedAtKill+after }, 90*time.Second, 20*time.Millisecond,
		"the producer did not get %d more acknowledgements from the two remaining brokers", after)
	resumed := time.Since(killedAt)
	stop()
	<-done

	testinfra.ClusterScript(t, "kafka", "up")
	healed := time.Since(killedAt)

	acked, failed, longest := p.result()
	read := readPartition(t, brokers, adm, topic)
	dups, missing := 0, 0
	for v, n := range read {
		if n > 1 {
			dups++
			t.Errorf("record %s is in the log %d times", v, n)
		}
	}
	for v := range acked {
		if read[v] == 0 {
			missing++
			if missing <= 10 {
				t.Errorf("acknowledged record %s is not in the log", v)
			}
		}
	}
	t.Logf("leader %d killed; leader %d elected after %v; %d more acks after %v; healed (kafka.sh up) after %v",
		leader, newLeader, elected.Round(time.Millisecond), after, resumed.Round(time.Millisecond), healed.Round(time.Millisecond))
	t.Logf("%d acknowledged, %d failed (not acknowledged), %d in the log; %d acknowledged missing, %d duplicated; longest produce call %v",
		len(acked), failed, len(read), missing, dups, longest.Round(time.Millisecond))
	require.Zero(t, missing, "acknowledged records lost")
	require.Zero(t, dups, "records duplicated")
}

// ackingProducer produces numbered records in batches of 20 with the
// relay's ProduceSync, as the relay hands over a claimed batch, and keeps
// which ones were acknowledged.
type ackingProducer struct {
	kc    *kgo.Client
	topic string

	mu      sync.Mutex
	ok      map[string]bool
	failed  int
	longest time.Duration
}

func (p *ackingProducer) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; {
		recs := make([]*kgo.Record, 20)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: p.topic, Value: []byte(fmt.Sprintf("r%08d", i))}
			i++
		}
		start := time.Now()
		results := p.kc.ProduceSync(ctx, recs...)
		took := time.Since(start)
		p.mu.Lock()
		p.longest = max(p.longest, took)
		for _, r := range results {
			if r.Err == nil {
				p.ok[string(r.Record.Value)] = true
			} else {
				p.failed++
			}
		}
		p.mu.Unlock()
	}
}

func (p *ackingProducer) acked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ok)
}

func (p *ackingProducer) result() (map[string]bool, int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.failed, p.longest
}

// partitionLeader is the node id (1-3, kafka.sh's node number) leading
// partition 0 of topic, or -1 while there is none.
func partitionLeader(t *testing.T, adm *kadm.Client, topic string) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return -1
	}
	d, ok := details[topic]
	if !ok || d.Err != nil || len(d.Partitions) != 1 {
		return -1
	}
	p := d.Partitions[0]
	if p.Err != nil {
		return -1
	}
	return p.Leader
}

// readPartition reads partition 0 of topic from the start to its end
// offset with a fresh client and counts each value.
func readPartition(t *testing.T, brokers []string, adm *kadm.Client, topic string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	end, ok := ends.Lookup(topic, 0)
	require.True(t, ok, "no end offset for %s/0", topic)
	require.NoError(t, end.Err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	counts := map[string]int{}
	next := int64(0)
	for next < end.Offset {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d offsets of %s", next, end.Offset, topic)
		for _, e := range fs.Errors() {
			t.Logf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			counts[string(r.Value)]++
			next = r.Offset + 1
		})
	}
	return counts
}
