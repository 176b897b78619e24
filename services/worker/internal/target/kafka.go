package target

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer is the part of *kgo.Client the Kafka delivery uses.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Kafka delivers attempts as records: value = payload, key = the target's
// key or else the job id (so one job's records stay ordered in one
// partition), headers = the identity headers.
type Kafka struct {
	producer Producer
	signer   Signer
	// denyPrefix refuses topics the platform itself uses ("sundial."): a
	// job must not be able to inject firings or dead letters.
	denyPrefix string
	// allow, when not empty, lists topic prefixes a job may produce to.
	allow          []string
	DefaultTimeout time.Duration
}

// KafkaOption configures a Kafka delivery.
type KafkaOption func(*Kafka)

// WithKafkaSigner makes a Kafka delivery sign with s (each tenant's own
// keys) instead of the one secret NewKafka was given.
func WithKafkaSigner(s Signer) KafkaOption { return func(k *Kafka) { k.signer = s } }

// NewKafka returns a Kafka delivery. allow lists permitted topic prefixes
// ("*" or empty for any); topics under denyPrefix are always refused.
func NewKafka(p Producer, secret []byte, denyPrefix string, allow []string, opts ...KafkaOption) *Kafka {
	k := &Kafka{producer: p, signer: Secret(secret), denyPrefix: denyPrefix, DefaultTimeout: 30 * time.Second}
	for _, a := range allow {
		if a = strings.TrimSpace(a); a != "" && a != "*" {
			k.allow = append(k.allow, a)
		}
	}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Fire implements Target.
func (k *Kafka) Fire(ctx context.Context, req Request) Result {
	t := req.Firing.GetTarget().GetKafka()
	if t == nil || t.GetTopic() == "" {
		return invalidf("target: kafka target without topic")
	}
	if err := k.permitted(t.GetTopic()); err != nil {
		return Failed(ClassKafka, true, err)
	}
	timeout := k.DefaultTimeout
	if d := req.Firing.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := t.GetKey()
	if key == "" {
		key = req.Firing.GetJobId()
	}
	rec := &kgo.Record{Topic: t.GetTopic(), Key: []byte(key), Value: req.Firing.GetPayload()}
	for _, h := range SignedHeaders(k.signer, req) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)})
	}
	if err := k.producer.ProduceSync(pctx, rec).FirstErr(); err != nil {
		err = fmt.Errorf("target: produce to %s: %w", t.GetTopic(), err)
		switch {
		case ctx.Err() != nil:
			return Failed(ClassCanceled, false, err)
		case pctx.Err() != nil:
			return Failed(ClassTimeout, false, err)
		default:
			return Failed(ClassKafka, false, err)
		}
	}
	return Result{OK: true}
}

func (k *Kafka) permitted(topic string) error {
	if k.denyPrefix != "" && strings.HasPrefix(topic, k.denyPrefix) {
		return fmt.Errorf("target: topic %q is reserved for the platform", topic)
	}
	if len(k.allow) == 0 {
		return nil
	}
	for _, a := range k.allow {
		if strings.HasPrefix(topic, a) {
			return nil
		}
	}
	return fmt.Errorf("target: topic %q is not allowed on this worker (--allow-kafka-targets)", topic)
}
