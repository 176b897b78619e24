package consumer

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	"github.com/sundialhq/sundial/pkg/store/lease"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/metrics"
	"github.com/sundialhq/sundial/services/worker/internal/offsets"
	"github.com/sundialhq/sundial/services/worker/internal/prepare"
	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// partition owns the items one assigned partition delivered. Its lock
// guards every item's State; the watermark has its own.
//
// A partition taken away (revoked or lost) is detached: no record is added
// to it any more and its watermark is no longer committed, but the firings
// it kept go on — held, prepared, fired and finished here — because the
// lease, not the group, decides who fires (see Consumer.lost). If the group
// gives the partition back to this worker before they are over, it is
// attached again and records it already has are skipped.
type partition struct {
	c     *Consumer
	topic string
	id    int32
	label string

	// held counts the topic's firings in memory (Consumer.held): one
	// more for each held here, one less when it is finished or abandoned.
	held *atomic.Int64

	wm        offsets.Watermark[*work.Item]
	committed atomic.Int64
	// committedMeta is the metadata of the last commit (guarded by the
	// consumer's commitMu).
	committedMeta string
	// ahead is the latest fire instant fetched (Unix ns): how far ahead
	// the partition has fetched (Consumer.pace).
	ahead atomic.Int64

	mu       sync.Mutex
	detached bool
	// abandoned: a detach gave up some held firings (a revoke, for those
	// due beyond Config.RevokeKeep): their records must come again from
	// Kafka, so the partition cannot be attached again.
	abandoned bool
	// skipBelow: records below this offset are already tracked (the
	// partition was attached again and its fetch restarted at the
	// committed offset).
	skipBelow int64
	// doneBits, from doneFrom on, are the records the partition's previous
	// owner finished past its commit (offsets.Done): passed as finished.
	doneFrom  int64
	doneBits  []byte
	executing int
	// drained is closed once the partition is detached and nothing of it
	// is executing (the first time; later claims of kept firings do not
	// reopen it).
	drained     chan struct{}
	drainedShut bool
}

func newPartition(c *Consumer, topic string, id int32) *partition {
	p := &partition{c: c, topic: topic, id: id, label: strconv.Itoa(int(id)), held: c.heldOf(topic), drained: make(chan struct{})}
	p.committed.Store(-1)
	return p
}

// add tracks and holds arriving records.
func (p *partition) add(recs []*kgo.Record) {
	p.mu.Lock()
	drops := p.addLocked(recs)
	p.mu.Unlock()
	// Outside the lock: Drop releases each (Release takes it).
	for _, d := range drops {
		p.c.cfg.Drop(d.it, d.current)
	}
}

// drop is an arriving firing whose job changed since it was staged.
type drop struct {
	it      *work.Item
	current int64
}

// addLocked is add under p.mu; it returns the arriving firings to drop.
func (p *partition) addLocked(recs []*kgo.Record) (drops []drop) {
	if p.detached {
		return nil
	}
	for _, r := range recs {
		if r.Offset < p.skipBelow {
			continue // held since before the partition was taken away
		}
		if p.doneBits != nil {
			if offsets.DoneAt(p.doneBits, p.doneFrom, r.Offset) {
				// Finished by the previous owner: nothing to lease or
				// decode, only the offset to pass.
				p.wm.Finish(p.wm.Track(r.Offset, r.LeaderEpoch, nil))
				p.c.m.TakeoverPassed.Inc()
				continue
			}
			if r.Offset >= p.doneFrom+int64(len(p.doneBits))*8 {
				p.doneBits = nil
			}
		}
		f, err := firing.Decode(r.Value)
		if err == nil && (f.GetExecutionId() == "" || f.GetJobId() == "") {
			err = errors.New("envelope without execution id or job id")
		}
		if err != nil {
			// Poison: it can never fire. It goes to the DLQ topic as it
			// is, and the offset passes it once it is there.
			p.c.m.Firings.WithLabelValues("unknown", "poison", metrics.TenantUnknown).Inc()
			p.c.logger.Error("undecodable firing record, sending it to the dead-letter topic", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			m := p.wm.Track(r.Offset, r.LeaderEpoch, nil)
			if hook := p.c.cfg.Poison; hook != nil {
				cp := *r
				cp.Key, cp.Value, cp.Headers = bytes.Clone(r.Key), bytes.Clone(r.Value), nil
				hook(&cp, err, func() { p.wm.Finish(m) })
			} else {
				p.wm.Finish(m)
			}
			continue
		}
		at := f.GetFireTime()
		if at == nil {
			at = f.GetScheduledTime()
		}
		it := &work.Item{
			Facts: work.Facts{
				FireAt:     at.AsTime().UnixNano(),
				Priority:   firing.Normalize(f.GetPriority()),
				Tenant:     f.GetTenant(),
				JobID:      f.GetJobId(),
				JobVersion: f.GetJobVersion(),
				Overlap:    prepare.Overlap(f.GetOverlap()) != lease.OverlapAllow,
				// A private copy: the record's value aliases its whole fetch
				// batch, which must not stay alive for one held firing.
				Envelope: bytes.Clone(r.Value),
				Owner:    p,
			},
			Owned: work.Owned{State: work.Held},
		}
		var notBefore int64
		if f.GetCatchUp() {
			// Released at the catch-up rate, however late they arrive;
			// the fire instant (and the lateness measured from it) stays.
			if at := p.c.pace.release(it.FireAt, p.c.cfg.Clock.Now().UnixNano()); at > it.FireAt {
				notBefore = at
			}
		}
		if p.c.cfg.Tracer != nil {
			it.Trace = p.startTrace(r, f)
		}
		it.Token = p.wm.Track(r.Offset, r.LeaderEpoch, it)
		if it.FireAt > p.ahead.Load() {
			p.ahead.Store(it.FireAt)
		}
		p.held.Add(1)
		if cfg := &p.c.cfg; cfg.Changed != nil && cfg.Drop != nil {
			if v, changed := cfg.Changed(it.JobID, it.JobVersion); changed {
				// Its job changed since it was staged: claimed here (the
				// lock is held) and dropped, never decoded again or leased.
				it.State = work.Executing
				p.executing++
				drops = append(drops, drop{it, v})
				continue
			}
		}
		if p.c.cfg.Arrived != nil {
			p.c.cfg.Arrived(f)
		}
		p.c.holder.AddAfter(it, notBefore)
	}
	return drops
}

// Claim implements work.Owner. A kept firing of a detached partition may
// still be claimed: its lease decides whether it fires.
func (p *partition) Claim(it *work.Item) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if it.State != work.Held {
		return false
	}
	it.State = work.Executing
	p.executing++
	return true
}

// Finish implements work.Owner.
func (p *partition) Finish(it *work.Item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch it.State {
	case work.Executing:
		p.held.Add(-1)
	case work.Released:
	default:
		return
	}
	it.State = work.Finished
	p.wm.Finish(it.Token.(*offsets.Mark[*work.Item]))
	p.doneExecuting()
	it.Trace.End("")
}

// Release implements work.Owner: a dropped firing stops counting against
// Config.MaxHeld as soon as it is taken out, so the records behind it (a
// new job's among a deleted job's thousands) are fetched at once, not once
// its summary is written.
func (p *partition) Release(it *work.Item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if it.State != work.Executing {
		return
	}
	it.State = work.Released
	it.Envelope, it.Firing = nil, nil
	p.held.Add(-1)
}

// Requeue implements work.Owner. A firing given back has not sent its
// request (that is what Requeue means). Kept to be prepared again, it keeps
// its lease: the same delivery takes it again under the same holder, which
// does not count as another delivery. Abandoned (the worker is leaving the
// group), a lease it took is given back unstarted (Config.Unstarted), so it
// does not count as a delivery and the next owner does not wait for it.
func (p *partition) Requeue(it *work.Item) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if it.State != work.Executing {
		return false
	}
	if p.detached && p.c.closing.Load() {
		p.c.cfg.Unstarted.Give(it)
		// Leaving the group: the next owner fires it from the commit.
		it.State = work.Abandoned
		p.held.Add(-1)
		p.doneExecuting()
		it.Trace.End(outcomeAbandoned)
		return false
	}
	// Kept even when the partition is detached: its lease decides.
	it.State = work.Held
	p.executing--
	p.shutDrained()
	return true
}

func (p *partition) doneExecuting() {
	p.executing--
	p.shutDrained()
}

func (p *partition) shutDrained() {
	if p.detached && p.executing == 0 && !p.drainedShut {
		p.drainedShut = true
		close(p.drained)
	}
}

// detach stops the partition: nothing more is added or committed. Each
// held firing for which keep says so stays held here (its lease decides
// whether it fires); the others are abandoned and taken out of the holder
// (ready-queue copies are skipped by Claim). It returns how many were kept
// and abandoned; p.drained closes once the executing ones are over.
func (p *partition) detach(keep func(*work.Item) bool) (kept, abandoned int) {
	var held []*work.Item
	p.mu.Lock()
	if p.detached {
		p.mu.Unlock()
		return 0, 0
	}
	p.detached = true
	p.wm.Pending(func(m *offsets.Mark[*work.Item]) {
		if it := m.Value; it != nil && it.State == work.Held {
			if keep(it) {
				kept++
				return
			}
			it.State = work.Abandoned
			p.held.Add(-1)
			// Prepared before and waiting to be prepared again: its
			// lease goes back unstarted.
			p.c.cfg.Unstarted.Give(it)
			held = append(held, it)
		}
	})
	p.abandoned = p.abandoned || len(held) > 0
	p.shutDrained()
	p.mu.Unlock()
	for _, it := range held {
		p.c.holder.Remove(it)
		it.Trace.End(outcomeAbandoned)
	}
	return kept, len(held)
}

// finishedAhead sets the records from offset from on that bits says the
// previous owner finished, before the partition's first record arrives. A
// partition already tracking records (attached again) knows better and
// keeps what it has.
func (p *partition) finishedAhead(from int64, bits []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.wm.Next(); seen || p.skipBelow > 0 {
		return
	}
	p.doneFrom, p.doneBits = from, bits
}

// reattach makes a detached partition this worker was given back its own
// again, if it abandoned nothing: its fetch restarts at the committed
// offset, and the records it still tracks (kept, or finished behind an
// unfinished one) are skipped rather than held twice.
func (p *partition) reattach() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.detached || p.abandoned {
		return false
	}
	next, ok := p.wm.Next()
	if !ok {
		return false
	}
	p.detached, p.drainedShut, p.drained = false, false, make(chan struct{})
	p.skipBelow = next
	p.committed.Store(-1)
	return true
}

// over: detached, and none of its firings is still held or executing here.
func (p *partition) over() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.detached {
		return false
	}
	live := false
	p.wm.Pending(func(m *offsets.Mark[*work.Item]) {
		if it := m.Value; it != nil && (it.State == work.Held || it.State == work.Executing) {
			live = true
		}
	})
	return !live
}

// outcomeAbandoned ends the trace of a firing whose partition moved to
// another worker before it finished here; the next owner traces it again.
const outcomeAbandoned = "abandoned"

// SpanConsume and SpanHold name the spans of a firing's stay.
const (
	SpanConsume = "worker.consume"
	SpanHold    = "worker.hold"
)

// startTrace opens the consume and hold spans of an arriving firing. The
// parent is the record's traceparent header (the relay's publish span),
// else the envelope's; a firing with neither starts a trace here, sampled
// at the firing ratio.
func (p *partition) startTrace(r *kgo.Record, f *sundialv1.Firing) *work.Trace {
	ctx := context.Background()
	parent, ok := tracing.Parse(recordTraceparent(r))
	if !ok {
		parent, ok = tracing.Parse(f.GetTraceparent())
	}
	if ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		ctx = tracing.ForFirings(ctx)
	}
	tr := p.c.cfg.Tracer
	ctx, consume := tr.Start(ctx, SpanConsume, trace.WithSpanKind(trace.SpanKindConsumer))
	if consume.IsRecording() {
		consume.SetAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", r.Topic),
			attribute.Int("messaging.destination.partition.id", int(r.Partition)),
			attribute.Int64("messaging.kafka.offset", r.Offset),
			attribute.String("messaging.consumer.group.name", p.c.cfg.Group),
		)
		consume.SetAttributes(tracing.FiringAttributes(f)...)
	}
	_, hold := tr.Start(ctx, SpanHold)
	return &work.Trace{Consume: consume, Hold: hold}
}

func recordTraceparent(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == tracing.Header {
			return string(h.Value)
		}
	}
	return ""
}

func (p *partition) forgetMetrics() {
	p.c.m.Lag.DeleteLabelValues(p.topic, p.label)
	p.c.m.Uncommitted.DeleteLabelValues(p.topic, p.label)
}
