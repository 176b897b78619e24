package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/process/clock"
)

// NewProducer returns the Kafka client the relay publishes with. Every
// setting is here for a reason the relay's guarantees depend on.
func NewProducer(cfg Config, logger *slog.Logger, extra ...kgo.Opt) (*kgo.Client, error) {
	// TLS and SASL as configured (none by default).
	sec, err := cfg.KafkaSecurity.Opts()
	if err != nil {
		return nil, fmt.Errorf("relay: kafka: %w", err)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers()...),
		// Names the relay in broker logs and quotas.
		kgo.ClientID("sundial-relay-" + cfg.NodeID),

		// acks=all: a row is deleted from the outbox only after every
		// in-sync replica has the record, so losing the partition leader
		// right after the ack cannot lose a firing. (Also the default, and
		// required by idempotence; stated so nobody "tunes" it away.)
		kgo.RequiredAcks(kgo.AllISRAcks()),

		// Idempotent writes are the franz-go default and stay on: the
		// client's own retries of a request whose reply was lost are
		// deduplicated by the broker, and records of one partition keep
		// their order across retries.

		// Bounded delivery: a record that cannot be acknowledged within the
		// publish timeout fails instead of being retried forever, so the
		// claim transaction (and its row locks) ends and the rows wait for
		// the next claim — possibly by a relay that can reach Kafka.
		kgo.RecordDeliveryTimeout(cfg.PublishTimeout),
		// A request in flight when the broker goes silent would otherwise
		// pin its records (and our transaction) until the broker answers:
		// idempotent clients refuse to fail a record whose fate is unknown.
		// We let them fail: a record that did land is published again by
		// the next claim, and workers drop duplicates by execution id. A
		// bounded transaction matters more here than a rare duplicate.
		kgo.AllowIdempotentProduceCancellation(),
		// Per-request wait for the broker's reply; below the delivery
		// timeout so a lost request is retried at least once inside it.
		kgo.ProduceRequestTimeout(max(cfg.PublishTimeout/2, time.Second)),

		// Records are keyed by job id and partitioned with the default
		// murmur2 key hash, the Java client's, so every tool agrees on
		// which partition a job's firings are in and one job's firings
		// stay ordered.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),

		// No linger: the relay hands over a whole claimed batch at once and
		// ProduceSync flushes it, so waiting for more records would only add
		// latency to every batch.
		kgo.ProducerLinger(0),

		// Topics are created deliberately (EnsureTopics) with the configured
		// partition count; a typo'd prefix must fail, not create a topic.
		// (Auto-creation is off unless requested; stated for the reader.)

		kgo.WithLogger(slogAdapter{logger}),
	}
	cl, err := kgo.NewClient(slices.Concat(sec, opts, extra)...)
	if err != nil {
		return nil, fmt.Errorf("relay: kafka client: %w", err)
	}
	return cl, nil
}

// EnsureTopics creates any of topics that does not exist, retrying while
// the cluster is unreachable until ctx ends. Topics that exist are left as
// they are, whatever their partition count.
func EnsureTopics(ctx context.Context, cl *kgo.Client, clk clock.Clock, logger *slog.Logger, partitions, replication int, topics []string) error {
	adm := kadm.NewClient(cl)
	backoff := 200 * time.Millisecond
	for {
		err := createTopics(ctx, adm, logger, partitions, replication, topics)
		if err == nil {
			return nil
		}
		logger.Warn("cannot ensure firing topics yet", "err", err, "retry_in", backoff)
		t := clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("relay: ensure topics: %w (last error: %v)", ctx.Err(), err)
		case <-t.C():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func createTopics(ctx context.Context, adm *kadm.Client, logger *slog.Logger, partitions, replication int, topics []string) error {
	resp, err := adm.CreateTopics(ctx, int32(partitions), int16(replication), nil, topics...)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range topics {
		r, ok := resp[t]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: no response", t))
		case r.Err == nil:
			logger.Info("created firing topic", "topic", t, "partitions", partitions)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
		default:
			errs = append(errs, fmt.Errorf("%s: %w", t, r.Err))
		}
	}
	return errors.Join(errs...)
}

// slogAdapter sends the Kafka client's logs to the service logger.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case a.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case a.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case a.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelInfo:
		lv = slog.LevelInfo
	}
	a.l.Log(context.Background(), lv, msg, append([]any{"component", "kgo"}, keyvals...)...)
}
