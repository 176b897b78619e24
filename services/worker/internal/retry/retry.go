// Package retry decides what follows a finished attempt: success, another
// attempt after a backoff, or death (the dead-letter queue). It is pure —
// the executor and the settle package do the writing — so every rule of
// the policy is a table test.
//
// The budget is the job's retry.max_attempts, counted from the envelope's
// first_attempt, so a re-driven execution (which keeps its execution id and
// continues the attempt numbers) gets a fresh round. Outcomes that may
// succeed later are retried while the budget lasts: timeouts, connection
// errors, 5xx, 408, 429, an open circuit breaker, a failed produce. The
// rest are permanent and die at once: other 4xx, a refused address, a
// missing secret, a malformed target.
//
// Backoff before attempt first+k+1 (k = retries so far):
//
//	FIXED                    initial
//	EXPONENTIAL              min(max, initial·2^k)
//	EXPONENTIAL_WITH_JITTER  a point in [d/2, d] of the exponential d,
//	                         chosen by a hash of (execution, attempt)
//
// The jitter is deterministic, so writing the same retry twice (a crash
// between the write and the marker) stages the same instant. A target's
// Retry-After (429 and 5xx) replaces the backoff, capped by the job's max
// delay.
package retry

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"

	"github.com/sundialhq/sundial/services/worker/internal/target"
)

// Decision is what follows an attempt.
type Decision struct {
	// Status is the attempt's final ledger status: SUCCEEDED,
	// RETRY_SCHEDULED or DEAD.
	Status sundialv1.ExecutionStatus
	// Class is the failure class ("" on success).
	Class string
	// Attempts is how many attempts this round has made, this one included.
	Attempts int32
	// Delay and NextFire say when the next attempt fires (RETRY_SCHEDULED).
	Delay    time.Duration
	NextFire time.Time
	// Reason explains the decision for the ledger.
	Reason string
}

// Policy is the envelope's retry policy with the job defaults applied.
func Policy(f *sundialv1.Firing) (maxAttempts int32, backoff sundialv1.Backoff, initial, maxDelay time.Duration) {
	r := f.GetRetry()
	maxAttempts = r.GetMaxAttempts()
	if maxAttempts <= 0 {
		maxAttempts = firing.DefaultMaxAttempts
	}
	backoff = r.GetBackoff()
	if backoff == sundialv1.Backoff_BACKOFF_UNSPECIFIED {
		backoff = firing.DefaultBackoff
	}
	initial = firing.DefaultInitialDelay
	if d := r.GetInitialDelay(); d != nil && d.AsDuration() >= 0 {
		initial = d.AsDuration()
	}
	maxDelay = firing.DefaultMaxDelay
	if d := r.GetMaxDelay(); d != nil && d.AsDuration() >= 0 {
		maxDelay = d.AsDuration()
	}
	maxDelay = max(maxDelay, initial)
	return maxAttempts, backoff, initial, maxDelay
}

// AttemptsMade is how many attempts the round of f has made including f.
func AttemptsMade(f *sundialv1.Firing) int32 {
	first := max(f.GetFirstAttempt(), 1)
	attempt := max(f.GetAttempt(), 1)
	if attempt < first {
		return 1
	}
	return attempt - first + 1
}

// Decide maps an attempt's result to what follows it; now is the
// (corrected) instant the attempt finished.
func Decide(f *sundialv1.Firing, res target.Result, now time.Time) Decision {
	made := AttemptsMade(f)
	if res.OK {
		return Decision{Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED, Attempts: made}
	}
	class := res.Class
	permanent := res.Permanent
	if class == "" {
		// A delivery that did not classify its failure: judge by status.
		class, permanent = target.ClassConnection, false
		if res.HTTPStatus > 0 {
			class, permanent = target.ClassifyStatus(res.HTTPStatus)
		}
	}
	maxAttempts, backoff, initial, maxDelay := Policy(f)
	d := Decision{Class: class, Attempts: made}
	switch {
	case permanent:
		d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD
		d.Reason = fmt.Sprintf("%s is permanent; dead-lettered after %s", class, plural(made, "attempt"))
	case made >= maxAttempts:
		d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_DEAD
		d.Reason = fmt.Sprintf("%s; attempts exhausted (%d of %d); dead-lettered", class, made, maxAttempts)
	default:
		d.Status = sundialv1.ExecutionStatus_EXECUTION_STATUS_RETRY_SCHEDULED
		d.Delay = Backoff(backoff, initial, maxDelay, int(made-1), f.GetExecutionId(), f.GetAttempt())
		via := ""
		if res.HasRetryAfter {
			d.Delay = min(max(res.RetryAfter, 0), maxDelay)
			via = ", from Retry-After"
		}
		d.NextFire = now.Add(d.Delay)
		d.Reason = fmt.Sprintf("%s; attempt %d of %d at %s (in %s%s)", class, made+1, maxAttempts,
			d.NextFire.UTC().Format(time.RFC3339Nano), d.Delay, via)
	}
	return d
}

// Backoff is the delay before the retry that follows k earlier retries.
func Backoff(kind sundialv1.Backoff, initial, maxDelay time.Duration, k int, executionID string, attempt int32) time.Duration {
	if kind == sundialv1.Backoff_BACKOFF_FIXED || initial <= 0 {
		return min(initial, maxDelay)
	}
	d := initial
	for range k {
		if d > maxDelay/2 {
			// Doubling again would pass the max (or, for a max near
			// the largest duration, overflow into a negative delay).
			d = maxDelay
			break
		}
		d *= 2
	}
	d = min(d, maxDelay)
	if kind == sundialv1.Backoff_BACKOFF_EXPONENTIAL_WITH_JITTER {
		d = d/2 + time.Duration(fraction(executionID, attempt)*float64(d-d/2))
	}
	return d
}

// fraction is a deterministic number in [0, 1) from (execution, attempt).
func fraction(executionID string, attempt int32) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(executionID))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(strconv.Itoa(int(attempt))))
	return float64(h.Sum64()>>11) / float64(1<<53)
}

func plural(n int32, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(int(n)) + " " + what + "s"
}
