// Package firing holds the identities and names every service agrees on for
// one firing: its deterministic execution id and the jitter of its fire
// instant, the job's partition, the Kafka topic for its priority, the
// envelope (built whole by New, retried by NextAttempt, encoded by Encode),
// the headers a target receives, and the status words of jobs and
// executions with their one mapping to Postgres and the Cassandra ledger.
package firing

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Partitions is the number of job partitions; a job's partition is a stable
// hash of its id, so ranges of partitions can later get their own leader.
const Partitions = 256

// Partition is the job's partition in [0, Partitions).
func Partition(jobID uuid.UUID) int {
	h := fnv.New32a()
	_, _ = h.Write(jobID[:])
	return int(h.Sum32() % Partitions)
}

// Namespaces keep the ids of scheduled slots and manual triggers apart, so a
// trigger that lands on a slot's instant is still its own execution.
var (
	scheduleNamespace = uuid.MustParse("6f0c8a52-2b0e-4d5e-9a51-3b7f3c9e2a10")
	triggerNamespace  = uuid.MustParse("0d3b8e41-7f7a-4c6b-8e0e-5c2a9d1f4b77")
)

// ExecutionID is the id of the execution of job's slot at scheduled. It is
// deterministic, so staging the same slot twice yields the same id, and it
// is the natural idempotency key for the target.
func ExecutionID(jobID uuid.UUID, scheduled time.Time) uuid.UUID {
	return derive(scheduleNamespace, jobID, scheduled)
}

// TriggerExecutionID is the id of a manual trigger of job at instant at.
func TriggerExecutionID(jobID uuid.UUID, at time.Time) uuid.UUID {
	return derive(triggerNamespace, jobID, at)
}

func derive(ns, jobID uuid.UUID, t time.Time) uuid.UUID {
	var b [24]byte
	copy(b[:16], jobID[:])
	binary.BigEndian.PutUint64(b[16:], uint64(t.UnixNano()))
	return uuid.NewSHA1(ns, b[:])
}

// Topics names the Kafka topics under a prefix ("sundial" in production;
// tests use their own prefix to stay isolated).
type Topics struct{ Prefix string }

// DefaultTopics are the production topic names.
var DefaultTopics = Topics{Prefix: "sundial"}

// Fire is the topic for firings of priority p; unspecified means medium.
func (t Topics) Fire(p sundialv1.Priority) string {
	return t.Prefix + ".fire." + PriorityName(p)
}

// Priorities are the four priorities a firing can have, most urgent first:
// the order topics are listed, served and leased in.
func Priorities() [4]sundialv1.Priority {
	return [4]sundialv1.Priority{
		sundialv1.Priority_PRIORITY_CRITICAL,
		sundialv1.Priority_PRIORITY_HIGH,
		sundialv1.Priority_PRIORITY_MEDIUM,
		sundialv1.Priority_PRIORITY_LOW,
	}
}

// FireAll lists the four priority topics, most urgent first.
func (t Topics) FireAll() []string {
	var topics []string
	for _, p := range Priorities() {
		topics = append(topics, t.Fire(p))
	}
	return topics
}

// FirePriority is the priority whose fire topic topic is, under any
// prefix (the inverse of Fire); false for any other topic.
func FirePriority(topic string) (sundialv1.Priority, bool) {
	i := strings.LastIndex(topic, ".fire.")
	if i < 0 {
		return sundialv1.Priority_PRIORITY_UNSPECIFIED, false
	}
	name := topic[i+len(".fire."):]
	for _, p := range Priorities() {
		if PriorityName(p) == name {
			return p, true
		}
	}
	return sundialv1.Priority_PRIORITY_UNSPECIFIED, false
}

// DLQ is the dead-letter topic.
func (t Topics) DLQ() string { return t.Prefix + ".dlq" }

// Normalize maps the unspecified priority to medium.
func Normalize(p sundialv1.Priority) sundialv1.Priority {
	if p == sundialv1.Priority_PRIORITY_UNSPECIFIED {
		return DefaultPriority
	}
	return p
}

// PriorityName is the lower-case name used in topics and metric labels.
func PriorityName(p sundialv1.Priority) string {
	switch Normalize(p) {
	case sundialv1.Priority_PRIORITY_CRITICAL:
		return "critical"
	case sundialv1.Priority_PRIORITY_HIGH:
		return "high"
	case sundialv1.Priority_PRIORITY_LOW:
		return "low"
	default:
		return "medium"
	}
}

// Encode marshals an envelope for the outbox and Kafka.
func Encode(f *sundialv1.Firing) ([]byte, error) { return proto.Marshal(f) }

// Decode unmarshals an envelope; a record that does not decode is poison.
func Decode(b []byte) (*sundialv1.Firing, error) {
	f := &sundialv1.Firing{}
	if err := proto.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("firing: decode envelope: %w", err)
	}
	return f, nil
}

// traceparentField is the field number of sundial.v1.Firing.traceparent.
var traceparentField = (&sundialv1.Firing{}).ProtoReflect().Descriptor().Fields().ByName("traceparent").Number()

// Traceparent reads an encoded envelope's W3C trace context without
// decoding the rest of it: the relay needs nothing else from the envelopes
// it forwards, and skipping a field costs a length read. "" when there is
// none or the envelope is malformed; like proto, the last occurrence wins.
func Traceparent(b []byte) string {
	var tp []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == traceparentField && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ""
			}
			tp, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return string(tp)
}

// Headers every HTTP target receives.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderExecutionID    = "Sundial-Execution-Id"
	HeaderFenceToken     = "Sundial-Fence-Token"
	HeaderScheduledAt    = "Sundial-Scheduled-At"
	HeaderAttempt        = "Sundial-Attempt"
	HeaderCatchUp        = "Sundial-Catch-Up"
	HeaderJobID          = "Sundial-Job-Id"
	HeaderSignature      = "Sundial-Signature"
	// HeaderEvent flags a request that is not an attempt but news of one
	// (EventCancelled; the completion callbacks' events).
	HeaderEvent = "Sundial-Event"
)

// EventCancelled is the event of the request a target gets when an
// attempt already sent to it was cancelled (its Idempotency-Key is
// "<execution id>:cancelled").
const EventCancelled = "cancelled"

// Jitter is the deterministic offset of job's slot at scheduled: uniform in
// [0, maxJitter) at millisecond granularity, taken from bytes 8–16 of the
// slot's execution id, so restaging a slot yields the same fire instant and
// neighbouring slots of one job spread independently. The firing's fire
// instant is scheduled + Jitter.
func Jitter(jobID uuid.UUID, scheduled time.Time, maxJitter time.Duration) time.Duration {
	if maxJitter < time.Millisecond {
		// Below a millisecond there is no offset to give; and a negative
		// maximum (never valid, but a stored job is not re-validated) must
		// not turn into a huge unsigned modulus and a negative offset.
		return 0
	}
	ms := uint64(maxJitter / time.Millisecond)
	id := ExecutionID(jobID, scheduled)
	return time.Duration(binary.BigEndian.Uint64(id[8:16])%ms) * time.Millisecond
}
