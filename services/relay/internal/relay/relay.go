// Package relay moves firings from the Postgres outbox to Kafka.
//
// Each cycle claims up to --batch-size due rows (FOR UPDATE SKIP LOCKED, so
// replicas take disjoint batches), produces each row's envelope unchanged to
// its priority topic keyed by job id, waits for Kafka's acknowledgements,
// deletes exactly the acknowledged rows and commits. Rows Kafka did not
// acknowledge are left in place for the next claim; nothing is deleted before
// its ack. A relay that dies between the ack and the commit leaves published
// rows behind, and they are published again: delivery is at least once, and
// workers drop duplicates by execution id.
//
// With a tracer, each record whose envelope carries a trace context is
// published under a relay.publish span, a child of that context, and the
// span's context goes on the record as a traceparent header, so the firing's
// trace continues in the worker (and in any other consumer of the topics).
//
// The loop runs again at once while claims come back full, and otherwise
// sleeps until a NOTIFY on sundial_outbox, the poll interval, or the moment
// the next staged row comes due, whichever is first.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/services/relay/internal/outbox"
)

// Outbox is the outbox store as the loop uses it: *outbox.Store through
// FromStore, or an in-memory table in unit tests.
type Outbox interface {
	Claim(ctx context.Context, limit int) (Claim, error)
	// Due counts the rows a relay could publish now, cheaply; Total counts
	// every row, at the cost of a scan of the table.
	Due(ctx context.Context) (outbox.Due, error)
	Total(ctx context.Context) (int64, error)
}

// Claim is an open claim on some rows; see outbox.Claim.
type Claim interface {
	Rows() []outbox.Row
	NextDue() (wait time.Duration, ok bool)
	Complete(ctx context.Context, ids []int64) error
	Release(ctx context.Context)
}

// FromStore adapts the Postgres store to Outbox.
func FromStore(s *outbox.Store) Outbox { return pgOutbox{s} }

type pgOutbox struct{ *outbox.Store }

func (p pgOutbox) Claim(ctx context.Context, limit int) (Claim, error) {
	c, err := p.Store.Claim(ctx, limit)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Deps are the relay's collaborators, built and closed by package app.
type Deps struct {
	Outbox Outbox
	Kafka  *kgo.Client
	// Listener wakes the relay on NOTIFY; nil means polling only.
	Listener *outbox.Listener
	Logger   *slog.Logger
	Clock    clock.Clock
	Registry prometheus.Registerer
	// Tracer traces publishing; nil: tracing off.
	Tracer trace.Tracer
}

// Relay is the outbox-to-Kafka loop. It implements lifecycle.Service.
type Relay struct {
	cfg      Config
	ob       Outbox
	kc       *kgo.Client
	listener *outbox.Listener
	topics   firing.Topics
	logger   *slog.Logger
	clock    clock.Clock
	m        *metrics
	tracer   trace.Tracer

	wake   chan struct{}
	runner lifecycle.Runner
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// drainGrace is added to the publish timeout to bound a cycle that
	// already claimed its rows: it finishes publishing and deleting even
	// when Stop is called, so a graceful stop republishes nothing.
	drainGrace = 10 * time.Second
)

// New returns a relay; Start ensures the topics and starts the loop.
func New(cfg Config, d Deps) *Relay {
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	r := &Relay{
		cfg: cfg, ob: d.Outbox, kc: d.Kafka, listener: d.Listener,
		topics: firing.Topics{Prefix: cfg.TopicPrefix},
		logger: d.Logger, clock: d.Clock, m: newMetrics(d.Registry), tracer: d.Tracer,
		wake: make(chan struct{}, 1),
	}
	if r.listener != nil && r.listener.Connected == nil {
		r.listener.Connected = func(up bool) {
			if up {
				r.m.listening.Set(1)
			} else {
				r.m.listening.Set(0)
			}
		}
	}
	return r
}

// Start starts the loop and returns: brokers that do not answer yet are
// waited for by the loop, not by Start, so the relay starts during a Kafka
// outage (its kafka readiness check names the brokers) and relays once
// they answer. The loop first makes sure the four firing topics and the
// dead-letter topic exist (creating missing ones), retrying until they do,
// and claims nothing before. The relay creates the DLQ topic too because
// workers only produce to it: with broker auto-creation off, as production
// clusters usually have it, a missing DLQ topic would make every
// dead-lettering time out.
func (r *Relay) Start(context.Context) error { return r.runner.Run(r.loop) }

// Stop lets the current cycle finish (bounded by the publish timeout) and
// waits for the loop and its helpers to return.
func (r *Relay) Stop() { r.runner.Stop() }

// Done is closed when the loop has returned.
func (r *Relay) Done() <-chan struct{} { return r.runner.Done() }

// Err is why the loop returned on its own, if it did (lifecycle.Watched).
func (r *Relay) Err() error { return r.runner.Err() }

var _ lifecycle.Watched = (*Relay)(nil)

// Wake asks the loop to claim now; wakes while a cycle runs fold into one.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Relay) loop(ctx context.Context) error {
	if err := EnsureTopics(ctx, r.kc, r.clock, r.logger, r.cfg.TopicPartitions, r.cfg.TopicReplication, append(r.topics.FireAll(), r.topics.DLQ())); err != nil {
		return err // stopped before the brokers answered
	}
	var helpers sync.WaitGroup
	hctx, cancel := context.WithCancel(ctx)
	// Deferred in this order so the helpers are cancelled, then awaited.
	defer helpers.Wait()
	defer cancel()
	if r.listener != nil {
		helpers.Go(func() { _ = r.listener.Run(hctx, r.Wake) })
	}
	helpers.Go(func() { r.watchDepth(hctx) })

	r.logger.Info("relay running", "batch_size", r.cfg.BatchSize, "poll_interval", r.cfg.PollInterval,
		"listen", r.listener != nil, "topics", r.topics.FireAll())
	var backoff time.Duration
	for ctx.Err() == nil {
		claimedAt := r.clock.Now()
		n, next, err := r.cycle(ctx)
		if err != nil {
			// Postgres or Kafka is failing: back off, and let no NOTIFY cut
			// the wait short, or an outage turns into a hot loop.
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			r.sleep(ctx, backoff)
			continue
		}
		backoff = 0
		if n >= r.cfg.BatchSize {
			continue // a full batch: more rows are probably due
		}
		// Sleep until the poll, or until the next staged row comes due,
		// measured from the claim so time spent publishing is not slept
		// twice (and a clock that moved meanwhile shortens the wait).
		wait, source := r.cfg.PollInterval, "poll"
		if next >= 0 && next < wait {
			wait, source = next, "due"
		}
		r.idle(ctx, claimedAt.Add(wait).Sub(r.clock.Now()), source)
	}
	return nil
}

// idle waits for a wake, the timer, or the end.
func (r *Relay) idle(ctx context.Context, d time.Duration, source string) {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
		r.m.wakeups.WithLabelValues("notify").Inc()
	case <-t.C():
		r.m.wakeups.WithLabelValues(source).Inc()
	}
}

func (r *Relay) sleep(ctx context.Context, d time.Duration) {
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// cycle claims, publishes and deletes one batch. It returns how many rows
// it claimed and how long after the claim the next staged row comes due (-1
// if none). An error means Postgres failed or Kafka left records
// unacknowledged; acknowledged rows are deleted either way.
func (r *Relay) cycle(ctx context.Context) (n int, next time.Duration, err error) {
	claimedAt := r.clock.Now()
	c, err := r.ob.Claim(ctx, r.cfg.BatchSize)
	if err != nil {
		if ctx.Err() != nil {
			return 0, -1, nil // stopping
		}
		r.m.cycleErrors.WithLabelValues("claim").Inc()
		r.logger.Warn("outbox claim failed", "err", err)
		return 0, -1, err
	}
	next = -1
	if d, ok := c.NextDue(); ok {
		next = d
	}
	// From here the batch runs to its end even if Stop is called.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout+drainGrace)
	defer cancel()
	defer c.Release(dctx)
	rows := c.Rows()
	if len(rows) == 0 {
		return 0, next, c.Complete(dctx, nil)
	}
	r.m.claimSize.Observe(float64(len(rows)))

	recs := make([]*kgo.Record, len(rows))
	index := make(map[*kgo.Record]int, len(rows))
	for i, row := range rows {
		recs[i] = &kgo.Record{Topic: r.topics.Fire(row.Priority), Key: []byte(row.JobID), Value: row.Envelope}
		index[recs[i]] = i
	}
	var spans []trace.Span
	if r.tracer != nil {
		spans = r.startPublishSpans(dctx, rows, recs)
	}
	pctx, pcancel := context.WithTimeout(dctx, r.cfg.PublishTimeout)
	results := r.kc.ProduceSync(pctx, recs...)
	pcancel()
	ackedAt := r.clock.Now()
	if spans != nil {
		endPublishSpans(spans, index, results)
	}

	acked := make([]int, 0, len(rows))
	ids := make([]int64, 0, len(rows))
	var firstErr error
	for _, res := range results {
		i, ok := index[res.Record]
		if !ok {
			continue
		}
		if res.Err != nil {
			r.m.publishErrors.WithLabelValues(errorReason(res.Err)).Inc()
			if firstErr == nil {
				firstErr = fmt.Errorf("execution %s attempt %d: %w", rows[i].ExecutionID, rows[i].Attempt, res.Err)
			}
			continue
		}
		acked = append(acked, i)
		ids = append(ids, rows[i].ID)
	}
	if err := c.Complete(dctx, ids); err != nil {
		r.m.cycleErrors.WithLabelValues("delete").Inc()
		r.logger.Error("published rows not deleted; they will be published again", "rows", len(ids), "err", err)
		return len(rows), next, err
	}
	for _, i := range acked {
		prio := firing.PriorityName(rows[i].Priority)
		r.m.published.WithLabelValues(prio).Inc()
		r.m.publishLatency.WithLabelValues(prio).Observe((rows[i].Waited + ackedAt.Sub(claimedAt)).Seconds())
	}
	if failed := len(rows) - len(acked); failed > 0 {
		r.logger.Warn("kafka did not acknowledge records; their rows stay for the next claim",
			"failed", failed, "published", len(acked), "err", firstErr)
		return len(rows), next, fmt.Errorf("relay: %d of %d records unacknowledged: %w", failed, len(rows), firstErr)
	}
	r.logger.Debug("batch published", "rows", len(rows))
	return len(rows), next, nil
}

// SpanPublish is the name of the span under which a record is published.
const SpanPublish = "relay.publish"

// startPublishSpans starts a publish span for each row whose envelope
// carries a trace context, as that context's child, and puts the span's
// context on the record. A row without a (well-formed) context is not
// traced: a firing's trace begins where it is staged, never here. spans[i] is nil for those.
func (r *Relay) startPublishSpans(ctx context.Context, rows []outbox.Row, recs []*kgo.Record) []trace.Span {
	spans := make([]trace.Span, len(rows))
	for i, row := range rows {
		parent, ok := tracing.Parse(firing.Traceparent(row.Envelope))
		if !ok {
			continue
		}
		_, span := r.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), SpanPublish, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", recs[i].Topic),
				attribute.String("messaging.kafka.message.key", row.JobID),
				tracing.AttrExecutionID.String(row.ExecutionID),
				tracing.AttrJobID.String(row.JobID),
				tracing.AttrAttempt.Int(int(row.Attempt)),
				attribute.Int64("sundial.outbox_row", row.ID),
			)
		}
		recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: tracing.Header, Value: []byte(tracing.Format(span.SpanContext()))})
		spans[i] = span
	}
	return spans
}

// endPublishSpans ends each span with its record's fate.
func endPublishSpans(spans []trace.Span, index map[*kgo.Record]int, results kgo.ProduceResults) {
	for _, res := range results {
		i, ok := index[res.Record]
		if !ok || spans[i] == nil {
			continue
		}
		span := spans[i]
		if res.Err != nil {
			span.SetStatus(codes.Error, res.Err.Error())
		} else if span.IsRecording() {
			span.SetAttributes(attribute.Int("messaging.destination.partition.id", int(res.Record.Partition)),
				attribute.Int64("messaging.kafka.offset", res.Record.Offset))
		}
		span.End()
		spans[i] = nil
	}
	// A record the client never reported on (cannot happen with
	// ProduceSync, but a span must not stay open).
	for _, span := range spans {
		if span != nil {
			span.End()
		}
	}
}

func (r *Relay) watchDepth(ctx context.Context) {
	var counted time.Time // when the total was last counted; zero: never
	for {
		if d, err := r.ob.Due(ctx); err == nil {
			r.m.depthDue.Set(float64(d.Rows))
			r.m.oldestDue.Set(d.Oldest.Seconds())
		} else if ctx.Err() == nil {
			r.logger.Debug("outbox due rows unavailable", "err", err)
		}
		if now := r.clock.Now(); counted.IsZero() || now.Sub(counted) >= r.cfg.DepthTotalInterval {
			if n, err := r.ob.Total(ctx); err == nil {
				r.m.depthTotal.Set(float64(n))
				counted = now
			} else if ctx.Err() == nil {
				r.logger.Debug("outbox total unavailable", "err", err)
			}
		}
		t := r.clock.NewTimer(r.cfg.DepthInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// errorReason is a bounded label for a produce error.
func errorReason(err error) string {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ke):
		return ke.Message
	default:
		return "other"
	}
}
