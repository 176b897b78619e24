package settle

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// Headers of DLQ records. Kind tells a reader how to decode the value: a
// sundial.v1.DeadLetter ("dead_letter"), or the raw bytes of a record that
// could not be decoded at all ("raw"), which no proto message can wrap.
const (
	HeaderDLQKind     = "Sundial-DLQ-Kind"
	HeaderErrorClass  = "Sundial-Error-Class"
	HeaderError       = "Sundial-Error"
	HeaderSourceTopic = "Sundial-Source-Topic"
	HeaderSourcePart  = "Sundial-Source-Partition"
	HeaderSourceOff   = "Sundial-Source-Offset"
	KindDeadLetter    = "dead_letter"
	KindRaw           = "raw"
)

// Producer is the part of *kgo.Client the DLQ uses.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// KafkaDLQ produces to the dead-letter topic.
type KafkaDLQ struct {
	producer Producer
	topic    string
}

// NewKafkaDLQ produces to topic (firing.Topics.DLQ()).
func NewKafkaDLQ(p Producer, topic string) *KafkaDLQ { return &KafkaDLQ{producer: p, topic: topic} }

// PublishDeadLetter implements Publisher: value = the DeadLetter, key = the
// job id (one job's dead letters stay ordered).
func (k *KafkaDLQ) PublishDeadLetter(ctx context.Context, dl *sundialv1.DeadLetter) error {
	v, err := encode(dl)
	if err != nil {
		return err
	}
	f := dl.GetFiring()
	rec := &kgo.Record{Topic: k.topic, Key: []byte(f.GetJobId()), Value: v, Headers: []kgo.RecordHeader{
		{Key: HeaderDLQKind, Value: []byte(KindDeadLetter)},
		{Key: HeaderErrorClass, Value: []byte(dl.GetErrorClass())},
		{Key: firing.HeaderExecutionID, Value: []byte(f.GetExecutionId())},
		{Key: firing.HeaderJobID, Value: []byte(f.GetJobId())},
	}}
	if err := k.producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("settle: produce dead letter %s to %s: %w", f.GetExecutionId(), k.topic, err)
	}
	return nil
}

// PublishRaw sends an undecodable record from a fire topic to the DLQ as
// it was (value and key), with where it came from and why in headers.
func (k *KafkaDLQ) PublishRaw(ctx context.Context, src *kgo.Record, cause error) error {
	msg := "undecodable"
	if cause != nil {
		msg = cause.Error()
	}
	rec := &kgo.Record{Topic: k.topic, Key: src.Key, Value: src.Value, Headers: []kgo.RecordHeader{
		{Key: HeaderDLQKind, Value: []byte(KindRaw)},
		{Key: HeaderErrorClass, Value: []byte(target.ClassPoison)},
		{Key: HeaderError, Value: []byte(msg)},
		{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		{Key: HeaderSourcePart, Value: []byte(strconv.Itoa(int(src.Partition)))},
		{Key: HeaderSourceOff, Value: []byte(strconv.FormatInt(src.Offset, 10))},
	}}
	if err := k.producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("settle: produce raw poison %s/%d@%d to %s: %w", src.Topic, src.Partition, src.Offset, k.topic, err)
	}
	return nil
}
