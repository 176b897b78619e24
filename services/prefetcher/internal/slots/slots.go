// Package slots decides which slots of one job the prefetcher stages in one
// pass: the on-time slots up to the end of the window, the catch-up slots
// its misfire policy allows after an outage, and where the job's
// next_fire_at moves to. It is pure (no clock, no database), so every
// policy is tested on exact instants; the caller passes the database
// clock's reading.
//
// A pass looks at the slots from next_fire_at onwards, in four stretches:
//
//   - expired: older than the job's grace; never staged.
//   - missed: inside the grace but older than the misfire threshold. SKIP
//     stages none, RUN_ONCE the most recent one, RUN_ALL the most recent
//     max_catch_up ones; all marked catch-up.
//   - late: the threshold keeps ordinary delays (a job created a moment
//     before its first slot, a slow tick) from counting as misfires; such
//     slots are staged as usual and fire at once.
//   - on time: staged as usual.
//
// On the database clock's time line:
//
//	      expired         missed (policy)       late     on time
//	──────────────────┼──────────────────────┼─────────┼────────────┤
//	              now-grace          now-threshold      now      now+window
//
// With a Chunk, on-time slots are staged beyond the window, up to the
// job's next chunk boundary at least half a chunk past the window: a
// frequent job is then claimed once per chunk and writes all of that
// chunk's slots in one go. A job's boundaries sit on a phase of a
// chunk-long grid (the caller's: the prefetcher gives each range its own),
// so jobs of different phases come due for their claims at different
// moments of the chunk, not all in one pass.
//
// next_fire_at becomes the first slot after what was staged, or none.
//
// Every slot not staged is accounted for in the plan, so the ledger can say
// why it did not run: the most recent MaxSkipRecords skipped slots one by
// one (expired or policy), and one Summary (first, last, counts) standing
// for the older ones, so a long outage of a frequent job costs a bounded
// number of ledger rows. An expired stretch longer than MaxSkipWalk slots
// is not walked to the end: the planner jumps to an estimate of where its
// last listed slots begin, and the summary's count becomes a lower bound.
//
// The plan also says whether it stages the schedule's last slot
// (LastSlot: the firing carries last_slot and the job completes after it)
// or whether the job has no slot left and none was staged (Exhausted: the
// caller completes the job itself).
package slots

import (
	"time"

	"github.com/sundialhq/sundial/pkg/domain/misfire"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Schedule is the part of schedule.Schedule the planner needs.
type Schedule interface {
	// Next is the first slot strictly after the instant; zero when none.
	Next(after time.Time) time.Time
}

// Policy is a job's misfire policy with defaults applied; its home is
// pkg/domain/misfire, shared with the worker's judge of late firings.
type Policy = misfire.Policy

// PolicyOf reads the misfire policy of a (normalized or not) job.
func PolicyOf(job *sundialv1.Job) Policy { return misfire.Of(job.GetMisfire()) }

// Input is one job's pass.
type Input struct {
	Schedule Schedule
	// NextFireAt is the job's next slot not yet staged. Postgres keeps
	// microseconds, so it may be the slot rounded; the planner looks for
	// the first slot at or after NextFireAt minus a microsecond.
	NextFireAt time.Time
	// Now is the database clock for this transaction.
	Now time.Time
	// Window is how far ahead of Now slots are staged.
	Window time.Duration
	// Chunk stages on-time slots beyond the window, up to ChunkEnd (between
	// half a chunk and a chunk and a half past the window), so a job due
	// within the window gets the next chunk of slots in the same pass and
	// is claimed again only a chunk later, not on every tick. Zero stages
	// up to the window only.
	Chunk time.Duration
	// Phase is the job's offset on the chunk grid: where its chunks end.
	// Jobs of different phases are claimed at different moments of the
	// chunk.
	Phase time.Duration
	// MisfireThreshold: a slot is missed only when older than Now minus
	// this.
	MisfireThreshold time.Duration
	Policy           Policy
	// MaxSlots bounds the slots one pass stages for one job, so a
	// pathological schedule cannot blow up a transaction; the rest are
	// staged by the next pass (next_fire_at stops at the first unstaged).
	MaxSlots int
	// MaxSkipRecords is how many skipped slots the plan lists one by one
	// (the most recent ones); older skipped slots are folded into one
	// Summary. Zero folds every skipped slot into the summary.
	MaxSkipRecords int
	// MaxSkipWalk bounds how many expired slots the planner walks to count
	// them; a longer expired stretch is jumped over and counted as "at
	// least". Zero means DefaultMaxSkipWalk.
	MaxSkipWalk int
}

// DefaultMaxSkipWalk bounds the walk over an expired stretch: about a
// millisecond of Next calls per job, once, after an outage.
const DefaultMaxSkipWalk = 10_000

// Slot is one slot to stage.
type Slot struct {
	At      time.Time
	CatchUp bool
}

// SkipKind says why a slot was not staged.
type SkipKind = misfire.Kind

const (
	// SkipExpired: older than the job's misfire grace; never replayed.
	SkipExpired = misfire.Expired
	// SkipPolicy: inside the grace, but the misfire policy did not replay
	// it (SKIP, RUN_ONCE's older slots, RUN_ALL's beyond the cap).
	SkipPolicy = misfire.NotReplayed
)

// Skip is one skipped slot recorded on its own.
type Skip struct {
	At   time.Time
	Kind SkipKind
}

// Summary stands for the skipped slots not listed one by one: all older
// than every listed Skip.
type Summary = misfire.Summary

// Plan is the outcome of a pass.
type Plan struct {
	// Slots to stage, in order.
	Slots []Slot
	// Next is the job's new next_fire_at; zero when the schedule has no
	// more slots.
	Next time.Time
	// Skipped are the most recent skipped slots, oldest first, at most
	// MaxSkipRecords of them.
	Skipped []Skip
	// Summary covers the skipped slots older than those in Skipped; nil
	// when there are none.
	Summary *Summary
	// Missed counts slots inside the grace that the policy did not stage.
	Missed int
	// Expired counts slots older than the grace (a lower bound when
	// ExpiredAtLeast).
	Expired        int
	ExpiredAtLeast bool
}

// LastSlot reports whether the plan stages the schedule's last slot: the
// schedule has nothing after it, so the job completes once that
// execution finishes.
func (p Plan) LastSlot() bool { return p.Next.IsZero() && len(p.Slots) > 0 }

// Exhausted reports whether the job has no slot left and this pass staged
// none: its remaining slots (if any) were all skipped, so no firing will
// ever complete it.
func (p Plan) Exhausted() bool { return p.Next.IsZero() && len(p.Slots) == 0 }

// roundingSlack covers Postgres's microsecond rounding of next_fire_at.
const roundingSlack = time.Microsecond

// skips keeps the most recent max skipped slots and folds older ones into
// a summary.
type skips struct {
	max     int
	ring    []Skip
	head    int
	summary *Summary
}

func (k *skips) add(s Skip) {
	if k.max > 0 && len(k.ring) < k.max {
		k.ring = append(k.ring, s)
		return
	}
	if k.max > 0 {
		s, k.ring[k.head] = k.ring[k.head], s
		k.head = (k.head + 1) % k.max
	}
	k.fold(s)
}

func (k *skips) fold(s Skip) {
	if k.summary == nil {
		k.summary = &Summary{First: s.At}
	}
	k.summary.Last = s.At
	if s.Kind == SkipExpired {
		k.summary.Expired++
	} else {
		k.summary.Policy++
	}
}

// flush folds every listed slot into the summary: they are older than what
// follows a jump.
func (k *skips) flush() {
	for _, s := range k.list() {
		k.fold(s)
	}
	k.ring, k.head = k.ring[:0], 0
}

func (k *skips) list() []Skip {
	out := make([]Skip, 0, len(k.ring))
	for i := range k.ring {
		out = append(out, k.ring[(k.head+i)%len(k.ring)])
	}
	return out
}

// ChunkEnd is where a pass stages up to when the window ends at windowEnd:
// the first instant at or after windowEnd+chunk/2 that lies phase past a
// whole multiple of chunk (counted from the Unix epoch). A job claimed as
// its next slot enters the window is claimed at about its previous end
// minus the window, so every later pass ends exactly one chunk after the
// previous one, at the job's phase.
func ChunkEnd(windowEnd time.Time, chunk, phase time.Duration) time.Time {
	c := int64(chunk)
	from := windowEnd.Add(chunk/2).UnixNano() - int64(phase)%c
	k := from / c
	if from > k*c {
		k++
	}
	return time.Unix(0, k*c+int64(phase)%c).In(windowEnd.Location())
}

// Compute plans one pass for one job.
func Compute(in Input) Plan {
	var p Plan
	if in.NextFireAt.IsZero() {
		return p
	}
	maxSlots := in.MaxSlots
	if maxSlots <= 0 {
		maxSlots = 1 << 20
	}
	maxWalk := in.MaxSkipWalk
	if maxWalk <= 0 {
		maxWalk = DefaultMaxSkipWalk
	}
	stageEnd := in.Now.Add(in.Window)
	if in.Chunk > 0 {
		stageEnd = ChunkEnd(stageEnd, in.Chunk, in.Phase)
	}
	graceCut := in.Now.Add(-in.Policy.Grace)
	lateCut := in.Now.Add(-in.MisfireThreshold)
	sk := skips{max: max(in.MaxSkipRecords, 0)}

	s := in.Schedule.Next(in.NextFireAt.Add(-roundingSlack))

	// Expired slots: walk (and count) them, up to maxWalk. A longer
	// stretch gets one jump to an estimate of where its last
	// MaxSkipRecords slots begin, and, should that walk run long too, a
	// jump to the grace boundary; what was jumped over is counted as "at
	// least".
	for jumps, walked, first := 0, 0, s; !s.IsZero() && s.Before(graceCut); {
		if walked == maxWalk {
			p.ExpiredAtLeast = true
			sk.flush()
			target := graceCut
			if jumps == 0 && walked > 1 {
				period := max(s.Sub(first)/time.Duration(walked), time.Nanosecond)
				if t := graceCut.Add(-period * time.Duration(2*sk.max+2)); t.After(s) {
					target = t
				}
			}
			jumps++
			if jumps > 1 {
				target = graceCut
			}
			s = in.Schedule.Next(target.Add(-time.Nanosecond))
			walked, first = 0, s
			continue
		}
		sk.add(Skip{At: s, Kind: SkipExpired})
		p.Expired++
		walked++
		s = in.Schedule.Next(s)
	}

	// Missed slots: keep the most recent `keep` in a ring; the ones pushed
	// out (all of them under SKIP) are skipped by the policy.
	keep := min(in.Policy.Keep(), maxSlots)
	ring := make([]time.Time, 0, keep)
	head := 0
	for !s.IsZero() && s.Before(lateCut) {
		if keep > 0 {
			if len(ring) < keep {
				ring = append(ring, s)
			} else {
				sk.add(Skip{At: ring[head], Kind: SkipPolicy})
				ring[head] = s
				head = (head + 1) % keep
				p.Missed++
			}
		} else {
			sk.add(Skip{At: s, Kind: SkipPolicy})
			p.Missed++
		}
		s = in.Schedule.Next(s)
	}
	for i := range ring {
		p.Slots = append(p.Slots, Slot{At: ring[(head+i)%len(ring)], CatchUp: true})
	}

	for !s.IsZero() && !s.After(stageEnd) && len(p.Slots) < maxSlots {
		p.Slots = append(p.Slots, Slot{At: s})
		s = in.Schedule.Next(s)
	}
	p.Next = s
	p.Skipped = sk.list()
	p.Summary = sk.summary
	if p.Summary != nil && p.ExpiredAtLeast {
		p.Summary.AtLeast = true
	}
	return p
}
