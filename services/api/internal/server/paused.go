package server

import (
	"context"
	"fmt"
	"strconv"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// MaxPausedRecords is how many of the slots that fell in a pause a resume
// records in the ledger one by one, as SKIPPED with reason "paused": the
// most recent ones. The older ones share one summary row, at the first of
// them, saying how many there were and from when to when; so a pause of a
// per-second job for a month costs a bounded number of rows.
const MaxPausedRecords = 1000

// maxPausedWalk bounds the slots a resume walks to count the summarized
// ones (about a tenth of a second of Next calls); a longer pause is jumped
// over to an estimate of where its last MaxPausedRecords slots begin, and
// the summary's count becomes "at least".
const maxPausedWalk = 100_000

// PausedReason is the ledger's reason on a slot that fell in a pause.
const PausedReason = "paused"

// nexter is the part of a schedule pausedSlots needs.
type nexter interface {
	Next(after time.Time) time.Time
}

// pausedSlots lists the slots of sch in (after, before) — before zero: to
// the schedule's end — as skips: the most recent max one by one, and one
// summary skip at the first of the older ones. walk bounds the Next calls
// spent counting before a jump.
func pausedSlots(sch nexter, after, before time.Time, max, walk int) []store.Skip {
	in := func(t time.Time) bool { return !t.IsZero() && (before.IsZero() || t.Before(before)) }
	ring := make([]time.Time, 0, max)
	head := 0
	var sumFirst, sumLast time.Time
	summarized, atLeast := 0, false
	s := sch.Next(after)
	for jumps, walked, first := 0, 0, s; in(s); {
		if walked == walk && max > 0 {
			if before.IsZero() || jumps > 0 {
				// No end to estimate towards, or a second jump: what is
				// left is only counted as "at least".
				atLeast = true
				break
			}
			period := s.Sub(first) / time.Duration(walked)
			target := before.Add(-period * time.Duration(2*max+2))
			jumps++
			walked, first = 0, s
			if target.After(s) {
				atLeast = true
				// The slots in the ring are older than the jump: they join
				// the summary.
				for i := range ring {
					t := ring[(head+i)%len(ring)]
					if summarized == 0 {
						sumFirst = t
					}
					sumLast = t
					summarized++
				}
				ring, head = ring[:0], 0
				s = sch.Next(target)
				continue
			}
		}
		walked++
		if len(ring) < max {
			ring = append(ring, s)
		} else {
			old := s
			if max > 0 {
				old, ring[head] = ring[head], s
				head = (head + 1) % max
			}
			if summarized == 0 {
				sumFirst = old
			}
			sumLast = old
			summarized++
		}
		s = sch.Next(s)
	}
	var out []store.Skip
	if summarized > 0 {
		n := strconv.Itoa(summarized)
		if atLeast {
			n = "at least " + n
		}
		out = append(out, store.Skip{At: sumFirst, Reason: fmt.Sprintf(
			"paused: %s slots from %s to %s fell in the pause (only the most recent %d are recorded one by one)",
			n, sumFirst.UTC().Format(time.RFC3339Nano), sumLast.UTC().Format(time.RFC3339Nano), max)})
	}
	for i := range ring {
		out = append(out, store.Skip{At: ring[(head+i)%len(ring)], Reason: PausedReason})
	}
	return out
}

// pausedSkips is ResumeJob's store.SkippedFunc: the slots of the resumed
// job's schedule after the last one staged and before the first it will
// fire (up to now, for a job the resume completes: it has none after),
// which never ran because the job was paused.
func (s *JobService) pausedSkips(ctx context.Context, tenant string) store.SkippedFunc {
	return func(lastStaged, now time.Time, next *sundialv1.Job) ([]store.Skip, error) {
		sch, err := s.scheduleOf(ctx, tenant, next, next.GetCreateTime().AsTime())
		if err != nil {
			return nil, err
		}
		before := now.Add(time.Nanosecond) // a slot at now itself fell in the pause
		if next.GetStatus() == sundialv1.JobStatus_JOB_STATUS_ACTIVE {
			before = next.GetNextFireTime().AsTime()
		}
		return pausedSlots(sch, lastStaged, before, MaxPausedRecords, maxPausedWalk), nil
	}
}
