package hostguard

// Breaker is one host's circuit breaker: the state machine both the
// per-process Breakers and the cluster's breaker in Redis (package limits,
// its admit and report scripts) run, with the same fields and the same
// transitions; times are Unix µs.
//
//	closed ──(Failures consecutive failures)──▶ open
//	open ──(Cooldown after OpenedAt, an attempt arrives)──▶ half-open, that attempt the probe
//	half-open ──(a failure)──▶ open        half-open ──(a success)──▶ closed
//
// While half-open, attempts other than the probe are refused until the
// probe reports or its deadline passes (a probe that never reports, its
// worker dead, does not hold the breaker forever). A success anywhere
// closes the breaker and forgets its failures; a neutral outcome (see
// Unhealthy) only ends a probe.
type Breaker struct {
	State      State
	Failures   int64
	OpenedAt   int64
	Probe      string // the probe's attempt, while half-open
	ProbeUntil int64  // the probe's deadline
}

// Admission is what Admit decided for one attempt.
type Admission struct {
	// Denied: the attempt fails fast; RetryAt is when a probe may go (the
	// cool-down's end, or the probe's deadline while half-open).
	Denied  bool
	RetryAt int64
	// Probe: the attempt is the half-open probe. Dirty: the breaker is
	// closed but counting failures, so a success has something to reset.
	Probe, Dirty bool
	// Before is the state before the attempt was admitted.
	Before State
}

// Outcome of an attempt, as the breaker counts it.
type Outcome int

const (
	Success Outcome = iota
	Failure
	Neutral
)

// Admit decides whether attempt may go at now, given the cool-down (µs);
// an attempt that becomes the probe holds it until probeUntil.
func (b *Breaker) Admit(now int64, attempt string, cooldown, probeUntil int64) Admission {
	a := Admission{Before: b.State}
	switch b.State {
	case Open:
		if at := b.OpenedAt + cooldown; now < at {
			return Admission{Denied: true, RetryAt: at, Before: b.State}
		}
		b.State, b.Probe, b.ProbeUntil = HalfOpen, attempt, probeUntil
		a.Probe = true
	case HalfOpen:
		if b.Probe != "" && b.Probe != attempt && b.ProbeUntil > now {
			return Admission{Denied: true, RetryAt: b.ProbeUntil, Before: b.State}
		}
		b.Probe, b.ProbeUntil = attempt, probeUntil
		a.Probe = true
	default:
		a.Dirty = b.Failures > 0
	}
	return a
}

// Report counts attempt's outcome at now: a failure while half-open, or
// the threshold's reached while closed, opens the breaker; a success
// closes it and forgets its failures (the zero Breaker again); a neutral
// outcome only ends the attempt's probe. It returns the state before.
func (b *Breaker) Report(now int64, attempt string, o Outcome, threshold int64) State {
	before := b.State
	if b.Probe == attempt {
		b.Probe, b.ProbeUntil = "", 0
	}
	switch o {
	case Failure:
		b.Failures++
		if b.State == HalfOpen || (b.State == Closed && b.Failures >= threshold) {
			b.State, b.OpenedAt = Open, now
			b.Probe, b.ProbeUntil = "", 0
		}
	case Success:
		*b = Breaker{}
	}
	return before
}
