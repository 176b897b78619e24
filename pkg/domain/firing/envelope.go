package firing

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// What an envelope carries for a job field that is unset. The api fills
// the same values into every job it stores (jobspec.Normalize, whose
// defaults these are), so they matter for jobs stored before a default
// existed; they live here so that building an envelope needs nothing of
// the job's validation.
const (
	DefaultPriority       = sundialv1.Priority_PRIORITY_MEDIUM
	DefaultAttemptTimeout = 30 * time.Second
	DefaultMaxAttempts    = 1
	DefaultBackoff        = sundialv1.Backoff_BACKOFF_EXPONENTIAL
	DefaultInitialDelay   = time.Second
	DefaultMaxDelay       = time.Minute
	DefaultOverlap        = sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW
	DefaultHTTPMethod     = "POST"
)

// NormalizeRetry fills a retry policy's unset fields with their defaults,
// in place.
func NormalizeRetry(r *sundialv1.RetryPolicy) {
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Backoff == sundialv1.Backoff_BACKOFF_UNSPECIFIED {
		r.Backoff = DefaultBackoff
	}
	if r.InitialDelay == nil {
		r.InitialDelay = durationpb.New(DefaultInitialDelay)
	}
	if r.MaxDelay == nil {
		r.MaxDelay = durationpb.New(DefaultMaxDelay)
	}
}

// Attempt is what an envelope says beyond its job's definition: which
// attempt of which execution it is, when it fires, and why it was staged.
type Attempt struct {
	Origin sundialv1.FiringOrigin
	// ExecutionID names the execution: ExecutionID of the job and slot
	// for a scheduled slot or a backfill, TriggerExecutionID for a manual
	// trigger, the dead execution's own id for a re-drive.
	ExecutionID string
	// Scheduled is the slot (a trigger's instant); Fire the instant the
	// worker fires it: the slot plus Jitter, a paced release instant, or
	// the trigger's instant.
	Scheduled, Fire time.Time
	// Number is the attempt, 1 for an execution's first.
	Number int32
	// FirstAttempt is the first attempt of this round of retries (a
	// re-drive starts a new round above the dead one); 0 leaves it unset.
	FirstAttempt int32
	// CatchUp marks a missed slot fired late; a backfill's firings always
	// are.
	CatchUp bool
	// LastSlot marks the schedule's last slot: the job completes when its
	// execution ends.
	LastSlot bool
	// Staged is when the firing was staged, by the database clock; zero
	// leaves staged_time unset.
	Staged time.Time
}

// New builds the complete envelope of attempt a of job: the message the
// relay publishes and the worker fires. Every producer builds its firings
// here (the prefetcher its slots; the api triggers, backfills and
// re-drives), so a firing carries the same fields whoever staged it, and
// nobody patches one afterwards; a retry is NextAttempt of the envelope
// that failed.
//
// The envelope copies what it takes from job, with the defaults above for
// fields the job never had, except Payload, which it shares: neither may
// be modified while the other is in use.
func New(job *sundialv1.Job, a Attempt) *sundialv1.Firing {
	f := &sundialv1.Firing{
		ExecutionId:    a.ExecutionID,
		JobId:          job.GetId(),
		Tenant:         job.GetTenant(),
		JobVersion:     job.GetVersion(),
		Attempt:        a.Number,
		FirstAttempt:   a.FirstAttempt,
		Priority:       job.GetPriority(),
		ScheduledTime:  timestamppb.New(a.Scheduled),
		FireTime:       timestamppb.New(a.Fire),
		CatchUp:        a.CatchUp || a.Origin == sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL,
		LastSlot:       a.LastSlot,
		Payload:        job.GetPayload(),
		Overlap:        job.GetOverlap(),
		MaxConcurrency: job.GetMaxConcurrency(),
		CallbackUrl:    job.GetCallbackUrl(),
		Origin:         a.Origin,
	}
	if !a.Staged.IsZero() {
		f.StagedTime = timestamppb.New(a.Staged)
	}
	if f.Priority == sundialv1.Priority_PRIORITY_UNSPECIFIED {
		f.Priority = DefaultPriority
	}
	if f.Overlap == sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		f.Overlap = DefaultOverlap
	}
	if t := job.GetTarget(); t != nil {
		f.Target = proto.Clone(t).(*sundialv1.Target)
		if h := f.Target.GetHttp(); h != nil {
			if h.Method == "" {
				h.Method = DefaultHTTPMethod
			}
			h.Method = strings.ToUpper(h.Method)
		}
	}
	if d := job.GetAttemptTimeout(); d != nil {
		f.AttemptTimeout = durationpb.New(d.AsDuration())
	} else {
		f.AttemptTimeout = durationpb.New(DefaultAttemptTimeout)
	}
	if m := job.GetMisfire(); m != nil {
		// The worker judges a late SCHEDULE firing by the policy it was
		// staged under (unset: the defaults), without reading the job.
		f.Misfire = proto.Clone(m).(*sundialv1.MisfirePolicy)
	}
	if r := job.GetRetry(); r != nil {
		f.Retry = proto.Clone(r).(*sundialv1.RetryPolicy)
	} else {
		f.Retry = &sundialv1.RetryPolicy{}
	}
	NormalizeRetry(f.Retry)
	return f
}

// NextAttempt is the envelope of the retry of f, the attempt after it,
// firing at fire and staged at now: the same execution and job version,
// in the same round of retries.
func NextAttempt(f *sundialv1.Firing, fire, now time.Time) *sundialv1.Firing {
	next := proto.Clone(f).(*sundialv1.Firing)
	next.Attempt = max(f.GetAttempt(), 1) + 1
	next.FirstAttempt = max(f.GetFirstAttempt(), 1)
	next.FireTime = timestamppb.New(fire)
	next.StagedTime = timestamppb.New(now)
	next.Origin = sundialv1.FiringOrigin_FIRING_ORIGIN_RETRY
	return next
}
