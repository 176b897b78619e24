//go:build integration

package topiccheck

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sundialhq/sundial/testkit/testinfra"
)

func TestIntegrationTopicExists(t *testing.T) {
	brokers := testinfra.KafkaBrokers(t)
	c, err := New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	existing := testinfra.KafkaTopic(t, 1)
	if ok, err := c.TopicExists(ctx, existing); err != nil || !ok {
		t.Fatalf("TopicExists(%s) = %v, %v; want true", existing, ok, err)
	}
	missing := "test." + testinfra.UniqueName(t, 100)
	if ok, err := c.TopicExists(ctx, missing); err != nil || ok {
		t.Fatalf("TopicExists(%s) = %v, %v; want false", missing, ok, err)
	}
	// The local broker has auto.create.topics.enable=true: asking must not
	// have created the topic.
	adm := kadm.NewClient(testinfra.KafkaClient(t))
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if td.Has(missing) {
		t.Fatalf("the check created %s", missing)
	}
}

func TestIntegrationUnreachableClusterIsAnError(t *testing.T) {
	c, err := New([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ok, err := c.TopicExists(ctx, "anything"); err == nil || ok {
		t.Fatalf("TopicExists on no cluster = %v, %v; want an error", ok, err)
	}
}
