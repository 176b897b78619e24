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
// next_fire_at becomes the first slot after the window, or none.
package slots

import (
	"encoding/binary"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Schedule is the part of schedule.Schedule the planner needs.
type Schedule interface {
	// Next is the first slot strictly after the instant; zero when none.
	Next(after time.Time) time.Time
}

// Policy is a job's misfire policy with defaults applied.
type Policy struct {
	Action     sundialv1.MisfireAction
	Grace      time.Duration
	MaxCatchUp int
}

// PolicyOf reads the misfire policy of a (normalized or not) job.
func PolicyOf(job *sundialv1.Job) Policy {
	m := job.GetMisfire()
	p := Policy{Action: m.GetAction(), Grace: time.Hour, MaxCatchUp: int(m.GetMaxCatchUp())}
	if p.Action == sundialv1.MisfireAction_MISFIRE_ACTION_UNSPECIFIED {
		p.Action = sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE
	}
	if m.GetGrace() != nil {
		p.Grace = m.GetGrace().AsDuration()
	}
	if p.MaxCatchUp <= 0 {
		p.MaxCatchUp = 10
	}
	return p
}

// keep is how many of the missed slots the policy stages.
func (p Policy) keep() int {
	switch p.Action {
	case sundialv1.MisfireAction_MISFIRE_ACTION_SKIP:
		return 0
	case sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ALL:
		return p.MaxCatchUp
	default:
		return 1
	}
}

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
	// MisfireThreshold: a slot is missed only when older than Now minus
	// this.
	MisfireThreshold time.Duration
	Policy           Policy
	// MaxSlots bounds the slots one pass stages for one job, so a
	// pathological schedule cannot blow up a transaction; the rest are
	// staged by the next pass (next_fire_at stops at the first unstaged).
	MaxSlots int
}

// Slot is one slot to stage.
type Slot struct {
	At      time.Time
	CatchUp bool
}

// Plan is the outcome of a pass.
type Plan struct {
	// Slots to stage, in order.
	Slots []Slot
	// Next is the job's new next_fire_at; zero when the schedule has no
	// more slots.
	Next time.Time
	// Missed counts slots inside the grace that the policy did not stage.
	Missed int
	// Expired is true when slots older than the grace were passed over
	// (they are not counted: enumerating a long outage of a frequent job
	// would cost more than it tells).
	Expired bool
	// ExpiredUntil is the first slot at or after the grace boundary that
	// the pass resumed from, when Expired.
	ExpiredUntil time.Time
}

// roundingSlack covers Postgres's microsecond rounding of next_fire_at.
const roundingSlack = time.Microsecond

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
	windowEnd := in.Now.Add(in.Window)
	graceCut := in.Now.Add(-in.Policy.Grace)
	lateCut := in.Now.Add(-in.MisfireThreshold)

	s := in.Schedule.Next(in.NextFireAt.Add(-roundingSlack))
	if !s.IsZero() && s.Before(graceCut) {
		// Jump over the expired stretch without walking it.
		s = in.Schedule.Next(graceCut.Add(-time.Nanosecond))
		p.Expired, p.ExpiredUntil = true, s
	}

	// Missed slots: keep the most recent `keep` in a ring.
	keep := min(in.Policy.keep(), maxSlots)
	ring := make([]time.Time, 0, keep)
	head := 0
	for !s.IsZero() && s.Before(lateCut) {
		if keep > 0 {
			if len(ring) < keep {
				ring = append(ring, s)
			} else {
				ring[head] = s
				head = (head + 1) % keep
				p.Missed++
			}
		} else {
			p.Missed++
		}
		s = in.Schedule.Next(s)
	}
	for i := range ring {
		p.Slots = append(p.Slots, Slot{At: ring[(head+i)%len(ring)], CatchUp: true})
	}

	for !s.IsZero() && !s.After(windowEnd) && len(p.Slots) < maxSlots {
		p.Slots = append(p.Slots, Slot{At: s})
		s = in.Schedule.Next(s)
	}
	p.Next = s
	return p
}

// Jitter is the deterministic offset of job's slot: uniform in
// [0, maxJitter) at millisecond granularity, derived from the slot's
// execution id (a SHA-1 of job and slot), so restaging a slot yields the
// same fire instant and neighbouring slots of one job spread independently.
func Jitter(jobID uuid.UUID, slot time.Time, maxJitter time.Duration) time.Duration {
	ms := uint64(maxJitter / time.Millisecond)
	if ms == 0 {
		return 0
	}
	id := firing.ExecutionID(jobID, slot)
	return time.Duration(binary.BigEndian.Uint64(id[8:16])%ms) * time.Millisecond
}
