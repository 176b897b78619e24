// Package topiccheck tells the api whether a Kafka target's topic exists,
// so a job that names a missing topic is refused when it is created or
// updated instead of dead-lettering every firing later: the workers never
// create job topics (a typo must not become a topic), and their produce
// to a missing one fails with UNKNOWN_TOPIC_OR_PARTITION.
package topiccheck

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Checker asks the cluster for one topic's metadata per call.
type Checker struct {
	cl *kgo.Client
}

// New returns a Checker on the cluster at brokers; opts are the client's
// TLS and SASL settings. It connects lazily, on the first check.
func New(brokers []string, opts ...kgo.Opt) (*Checker, error) {
	if len(brokers) == 0 {
		return nil, errors.New("topiccheck: no brokers")
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.ClientID("sundial-api-topiccheck"))...)
	if err != nil {
		return nil, fmt.Errorf("topiccheck: %w", err)
	}
	return &Checker{cl: cl}, nil
}

// TopicExists reports whether topic exists. A broker that cannot be asked
// is an error, not an answer: the caller decides what an unknown means.
func (c *Checker) TopicExists(ctx context.Context, topic string) (bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	// The broker's auto.create.topics.enable would otherwise create the
	// topic merely because we asked about it.
	req.AllowAutoTopicCreation = false
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return false, fmt.Errorf("topiccheck: metadata of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case err == nil:
			return true, nil
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return false, nil
		default:
			// Authorization failures, a leader election in progress:
			// neither says the topic is missing.
			return false, fmt.Errorf("topiccheck: metadata of %s: %w", topic, err)
		}
	}
	return false, fmt.Errorf("topiccheck: metadata of %s: topic missing from the answer", topic)
}

// Close closes the client.
func (c *Checker) Close() { c.cl.Close() }
