package testinfra

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaBrokers is the test Kafka's bootstrap list (SUNDIAL_TEST_KAFKA_BROKERS,
// comma separated, or the default), checked to accept connections.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	brokers := splitList(envOr(EnvKafkaBrokers, DefaultKafkaBrokers))
	requireReachable(t, "Kafka", EnvKafkaBrokers, brokers)
	return brokers
}

// KafkaClient returns a franz-go client seeded with the test brokers plus
// opts, closed when the test ends.
func KafkaClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(KafkaBrokers(t)...)}, opts...)...)
	if err != nil {
		t.Fatalf("testinfra: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kafkaAdmin is an admin client for one helper call; the caller closes it.
func kafkaAdmin(t testing.TB) *kadm.Client {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(KafkaBrokers(t)...))
	if err != nil {
		t.Fatalf("testinfra: kafka admin client: %v", err)
	}
	return adm
}

// KafkaTopic creates a topic of the test's own ("test.<name>_<hex>") with the
// given number of partitions and one replica, waits until every partition has
// a leader, and deletes the topic when the test ends.
func KafkaTopic(t testing.TB, partitions int32) string {
	t.Helper()
	if partitions < 1 {
		t.Fatalf("testinfra: KafkaTopic: partitions must be positive, got %d", partitions)
	}
	topic := "test." + UniqueName(t, 200)
	adm := kafkaAdmin(t)
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("testinfra: create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		adm := kafkaAdmin(t)
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Logf("testinfra: kafka topic %s left behind: %v", topic, err)
		}
	})
	if err := waitForLeaders(ctx, adm, topic, partitions); err != nil {
		t.Fatalf("testinfra: topic %s: %v", topic, err)
	}
	return topic
}

// waitForLeaders polls metadata until every partition of topic has a leader:
// a topic is usable a moment after CreateTopics returns, not at once.
func waitForLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = topicReady(ctx, adm, topic, partitions)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions without a leader: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func topicReady(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	d, ok := details[topic]
	if !ok {
		return errors.New("not in metadata yet")
	}
	if d.Err != nil {
		return d.Err
	}
	if int32(len(d.Partitions)) != partitions {
		return fmt.Errorf("%d of %d partitions in metadata", len(d.Partitions), partitions)
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return fmt.Errorf("partition %d: leader %d, err %v", p.Partition, p.Leader, p.Err)
		}
	}
	return nil
}

// KafkaGroup is a consumer-group id of the test's own; the group is deleted
// (if it exists by then) when the test ends.
func KafkaGroup(t testing.TB) string {
	t.Helper()
	group := "test." + UniqueName(t, 200)
	t.Cleanup(func() {
		adm := kafkaAdmin(t)
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := adm.DeleteGroup(ctx, group)
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			t.Logf("testinfra: kafka group %s left behind: %v", group, err)
		}
	})
	return group
}
