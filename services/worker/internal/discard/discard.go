// Package discard drops the held firings of jobs that changed (paused,
// updated or deleted) after they were staged, cheaply and in bulk, and
// records them as one ledger row per job and reason instead of one per
// firing.
//
// A deleted per-second job leaves up to two minutes of staged firings in
// the worker (more when the platform is behind). Checking each at its
// instant — decode, a lease round trip answered "stale", a ledger row —
// costs the platform about as much as firing it. Instead:
//
//   - the versions watch tells the Sweeper of each raised job version the
//     api announces (versions.WithChanged);
//   - the Sweeper coalesces the announcements of a short window (deleting
//     3,000 jobs is one announcement each, arriving within a second) and
//     takes every held firing of an older version out of each holder in one
//     pass (holder.RemoveIf), by the job id and version the item carries
//     from arrival: no decode;
//   - the Summarizer groups the dropped firings by job and reason and
//     writes, every Linger or once a group reaches MaxGroup, one SKIPPED
//     record per group through the worker's recorder: "N slots due from T1
//     to T2 dropped: job version V superseded by W".
//
// A dropped firing is finished (its offset may be committed past) only in
// the recorder's done callback of its group's record, so the offsets never
// pass a drop whose record could still be lost: a crash before it means the
// firings are delivered again and dropped again.
//
// The summary row is attempt 1 of an execution id of its own, derived from
// (job, dropped version, superseding version, first instant) in a namespace
// no firing uses: stable, so a group summarized again after a redelivery
// overwrites its row rather than adding one, and never the id of a real
// execution, whose records it would otherwise shadow or be shadowed by. Its
// scheduled time is the group's first instant, so the job's history shows
// it where the dropped slots begin. The instants are the firings' fire
// instants (the slot plus jitter): the slot itself would need a decode.
//
// The Summarizer records the same way the late firings the prepare stage
// sheds by their jobs' misfire policies without leasing them (Shed): a
// worker far behind sheds thousands a second, and a ledger row and a
// recorder write each cost the platform about as much as firing one would
// have (Cassandra's write alone ≈ 40 µs), capacity it needs to catch up.
// They are grouped by job and version for ShedLinger (5 s, so a per-second
// job's shed firings make one row per five) and recorded as one SKIPPED
// row, "N slots from T1 to T2 reached the worker late and were skipped: X
// older than the grace; Y not replayed by policy P", under an id of its own
// (firing.ShedID). The metrics count each shed firing (outcome
// misfire_skipped); the ledger has no row under a shed firing's own id.
package discard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/misfire"
	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/lifecycle"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/work"
)

// Recorder is the part of the worker's recorder the Summarizer writes
// through (recorder.Recorder.Final): done runs once the record is written
// or permanently refused; false means the recorder is stopping and done
// will not run.
type Recorder interface {
	Final(ctx context.Context, a *sundialv1.ExecutionAttempt, held bool, done func()) bool
}

// Config of a Summarizer.
type Config struct {
	// WorkerID is written in the summary rows' worker column.
	WorkerID string
	// Linger is how long a group collects drops before its record is
	// written: the drops of one change arrive within it, so they make one
	// row. Default 2 s.
	Linger time.Duration
	// MaxGroup is the size at which a group is written without waiting
	// for Linger, so the firings it holds (and their offsets) are not kept
	// waiting behind a large drop. Default 5,000.
	MaxGroup int
	// ShedLinger is how long a group of shed late firings collects before
	// its record is written. Longer than Linger: a job falling behind sheds
	// one firing per slot, and each record spared is capacity to catch up.
	// Default 5 s.
	ShedLinger time.Duration
	// ReturnMemory, when set, is called (on the Summarizer's goroutine)
	// once at least ReturnAfter dropped firings were finished and none is
	// pending any more: a bulk delete frees hundreds of megabytes of held
	// firings at once, which the Go runtime would otherwise hand back to
	// the system only gradually (the worker passes debug.FreeOSMemory).
	// Shed late firings do not count: a worker shedding is behind, and
	// what they held is taken again by the firings it fetches next; a
	// forced collection of a full heap would only cost it.
	ReturnMemory func()
	// ReturnAfter is how many finished drops call ReturnMemory. Default
	// 50,000.
	ReturnAfter int
}

// Defaults.
const (
	DefaultLinger      = 2 * time.Second
	DefaultShedLinger  = 5 * time.Second
	DefaultMaxGroup    = 5000
	DefaultReturnAfter = 50_000
)

// Validate checks the config, naming the field at fault.
func (c Config) Validate() error {
	if c.Linger < 0 {
		return fmt.Errorf("discard-linger: must not be negative, got %s", c.Linger)
	}
	if c.ShedLinger < 0 {
		return fmt.Errorf("discard: ShedLinger must not be negative, got %s", c.ShedLinger)
	}
	if c.MaxGroup < 0 {
		return fmt.Errorf("discard-max-group: must not be negative, got %d", c.MaxGroup)
	}
	if c.ReturnAfter < 0 {
		return fmt.Errorf("discard: ReturnAfter must not be negative, got %d", c.ReturnAfter)
	}
	return nil
}

// Summarizer is a lifecycle.Service: its goroutine writes the groups'
// records.
type Summarizer struct {
	rec    Recorder
	cfg    Config
	clk    clock.Clock
	logger *slog.Logger

	mu     sync.Mutex
	groups map[groupKey]*group
	full   chan struct{}
	// finished counts the drops finished since memory was last returned
	// (Config.ReturnMemory).
	finished atomic.Int64

	runner lifecycle.Runner
}

// groupKey is a group's job and version change (from, to); a group of
// shed late firings has shed set and to 0.
type groupKey struct {
	job      string
	from, to int64
	shed     bool
}

type group struct {
	tenant      string
	first, last int64
	since       time.Time
	items       []*work.Item
	// Of a shed group: the job's misfire policy, and the firings counted
	// by why they were not fired.
	policy           misfire.Policy
	expired, notRepl int
}

// NewSummarizer returns a summarizer writing through rec.
func NewSummarizer(rec Recorder, cfg Config, clk clock.Clock, logger *slog.Logger) *Summarizer {
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.MaxGroup == 0 {
		cfg.MaxGroup = DefaultMaxGroup
	}
	if cfg.ShedLinger == 0 {
		cfg.ShedLinger = DefaultShedLinger
	}
	if cfg.ReturnAfter == 0 {
		cfg.ReturnAfter = DefaultReturnAfter
	}
	return &Summarizer{rec: rec, cfg: cfg, clk: clk, logger: logger, groups: map[groupKey]*group{}, full: make(chan struct{}, 1)}
}

// Drop takes over it, a firing of job it.JobID at version it.JobVersion
// superseded by version current: it will be recorded in its group's
// summary and finished (it.Owner.Finish) once that record is written. The
// caller must have claimed it (it.Owner.Claim) and must not touch it
// again. Drop releases it at once (it.Owner.Release): a dropped firing no
// longer counts against what the worker may hold. Drop never blocks on I/O.
func (s *Summarizer) Drop(it *work.Item, current int64) {
	it.Owner.Release(it)
	s.add(groupKey{job: it.JobID, from: it.JobVersion, to: current}, it, 0, misfire.Policy{})
}

// Shed takes over it, a late firing its job's misfire policy does not fire
// for kind (misfire.Expired or misfire.NotReplayed), that no delivery
// touched: it will be recorded in its job's late summary and finished once
// that record is written. The caller must have claimed and decoded it (the
// policy is read from it.Firing, before the release lets go of it) and must
// not touch it again. Like Drop, it releases it at once and never blocks on
// I/O.
func (s *Summarizer) Shed(it *work.Item, kind misfire.Kind) {
	policy := misfire.Of(it.Firing.GetMisfire())
	it.Owner.Release(it)
	s.add(groupKey{job: it.JobID, from: it.JobVersion, shed: true}, it, kind, policy)
}

func (s *Summarizer) add(k groupKey, it *work.Item, kind misfire.Kind, policy misfire.Policy) {
	s.mu.Lock()
	g := s.groups[k]
	if g == nil {
		g = &group{tenant: it.Tenant, first: it.FireAt, last: it.FireAt, since: s.clk.Now(), policy: policy}
		s.groups[k] = g
	}
	g.first, g.last = min(g.first, it.FireAt), max(g.last, it.FireAt)
	g.items = append(g.items, it)
	switch kind {
	case misfire.Expired:
		g.expired++
	case misfire.NotReplayed:
		g.notRepl++
	}
	full := len(g.items) >= s.cfg.MaxGroup
	s.mu.Unlock()
	if full {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
}

// Pending is the number of dropped and shed firings not yet handed to the
// recorder.
func (s *Summarizer) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.groups {
		n += len(g.items)
	}
	return n
}

// Start runs the loop that writes the groups' records.
func (s *Summarizer) Start(context.Context) error { return s.runner.Run(s.loop) }

// Stop ends the loop. Groups not yet handed to the recorder stay
// unfinished: their firings are delivered again after a restart and
// dropped (or judged late and shed) again.
func (s *Summarizer) Stop() { s.runner.Stop() }

func (s *Summarizer) loop(ctx context.Context) error {
	every := min(s.cfg.Linger, s.cfg.ShedLinger) / 4
	tick := s.clk.NewTimer(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			tick.Reset(every)
		case <-s.full:
		}
		s.flush(ctx)
		s.returnMemory()
	}
}

// returnMemory calls Config.ReturnMemory once enough drops finished and
// none is pending: the held firings they were are garbage by then.
func (s *Summarizer) returnMemory() {
	if s.cfg.ReturnMemory == nil || s.finished.Load() < int64(s.cfg.ReturnAfter) || s.Pending() > 0 {
		return
	}
	n := s.finished.Swap(0)
	start := s.clk.Now()
	s.cfg.ReturnMemory()
	s.logger.Info("returned the memory of dropped firings to the system", "firings", n, "took", s.clk.Now().Sub(start))
}

// flush hands every group that lingered long enough, or is full, to the
// recorder.
func (s *Summarizer) flush(ctx context.Context) {
	now := s.clk.Now()
	var due []groupKey
	var gs []*group
	s.mu.Lock()
	for k, g := range s.groups {
		linger := s.cfg.Linger
		if k.shed {
			linger = s.cfg.ShedLinger
		}
		if now.Sub(g.since) >= linger || len(g.items) >= s.cfg.MaxGroup {
			due = append(due, k)
			gs = append(gs, g)
			delete(s.groups, k)
		}
	}
	s.mu.Unlock()
	for i, k := range due {
		g := gs[i]
		items := g.items
		finish := func() {
			for _, it := range items {
				it.Owner.Finish(it)
			}
			if !k.shed {
				s.finished.Add(int64(len(items)))
			}
		}
		// Held: a skip is stored without the fence check (there is no
		// lease, and the read would cost the ledger more than the write).
		if !s.rec.Final(ctx, s.record(k, g, now), true, finish) {
			s.logger.Warn("recorder stopped before a discard summary was recorded; its firings will be delivered again",
				"job_id", k.job, "firings", len(items), "late", k.shed)
		}
	}
}

func (s *Summarizer) record(k groupKey, g *group, now time.Time) *sundialv1.ExecutionAttempt {
	first, last := time.Unix(0, g.first), time.Unix(0, g.last)
	id := firing.DroppedID(k.job, k.from, k.to, g.first)
	reason := firing.DroppedReason(len(g.items), first, last, k.from, k.to, "the job was paused, updated or deleted")
	if k.shed {
		id = firing.ShedID(k.job, k.from, g.first)
		reason = g.policy.LateSummaryReason(misfire.Summary{First: first, Last: last, Expired: g.expired, Policy: g.notRepl})
	}
	return &sundialv1.ExecutionAttempt{
		ExecutionId:   id,
		JobId:         k.job,
		Tenant:        g.tenant,
		Attempt:       1,
		Status:        sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
		ScheduledTime: timestamppb.New(first),
		FireTime:      timestamppb.New(first),
		FinishedTime:  timestamppb.New(now),
		Worker:        s.cfg.WorkerID,
		JobVersion:    k.from,
		Reason:        reason,
	}
}
