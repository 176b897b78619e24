package settle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
)

// RawPublisher sends undecodable records to the DLQ (*KafkaDLQ).
type RawPublisher interface {
	PublishRaw(ctx context.Context, src *kgo.Record, cause error) error
}

// RawForwarder moves undecodable records from the fire topics to the DLQ
// topic, off the consumer's poll loop: Forward queues without blocking (an
// unbounded queue — poison records are rare and small), one goroutine
// produces them, trying again until it succeeds or the forwarder stops, and
// reports each record done only once it is on the DLQ topic, so its offset
// is never committed before. Records still queued at stop stay unfinished
// and are fetched again by the partition's next owner.
type RawForwarder struct {
	pub    RawPublisher
	clk    clock.Clock
	logger *slog.Logger
	result func(result string)

	mu    sync.Mutex
	queue []rawJob
	wake  chan struct{}

	runner lifecycle.Runner
}

type rawJob struct {
	rec   *kgo.Record
	cause error
	done  func()
}

// NewRawForwarder returns a forwarder; result (may be nil) is told "dlq" or
// "dlq_error" for every try.
func NewRawForwarder(pub RawPublisher, clk clock.Clock, logger *slog.Logger, result func(string)) *RawForwarder {
	return &RawForwarder{pub: pub, clk: clk, logger: logger, result: result, wake: make(chan struct{}, 1)}
}

// Forward implements consumer.Config.Poison.
func (r *RawForwarder) Forward(rec *kgo.Record, cause error, done func()) {
	r.mu.Lock()
	r.queue = append(r.queue, rawJob{rec, cause, done})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs the producing goroutine.
func (r *RawForwarder) Start(context.Context) error { return r.runner.Run(r.loop) }

// Stop ends it; unsent records stay unfinished.
func (r *RawForwarder) Stop() { r.runner.Stop() }

func (r *RawForwarder) next() (rawJob, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return rawJob{}, false
	}
	j := r.queue[0]
	r.queue[0] = rawJob{}
	r.queue = r.queue[1:]
	return j, true
}

func (r *RawForwarder) loop(ctx context.Context) error {
	for {
		j, ok := r.next()
		if !ok {
			select {
			case <-r.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		wait := 100 * time.Millisecond
		for {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.pub.PublishRaw(pctx, j.rec, j.cause)
			cancel()
			if err == nil {
				r.count("dlq")
				j.done()
				break
			}
			r.count("dlq_error")
			r.logger.Warn("could not send an undecodable record to the dead-letter topic, trying again", "err", err, "retry_in", wait)
			t := r.clk.NewTimer(wait)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return nil
			}
			wait = min(2*wait, 5*time.Second)
		}
	}
}

func (r *RawForwarder) count(s string) {
	if r.result != nil {
		r.result(s)
	}
}
