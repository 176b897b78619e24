package jobspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // every service resolves zones the same way, whatever the host has installed

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Defaults for unset fields. Those a firing carries are pkg/domain/firing's, so
// that a job's defaults and its envelope's are one value.
const (
	DefaultPriority       = firing.DefaultPriority
	DefaultAttemptTimeout = firing.DefaultAttemptTimeout
	DefaultMaxAttempts    = firing.DefaultMaxAttempts
	DefaultBackoff        = firing.DefaultBackoff
	DefaultInitialDelay   = firing.DefaultInitialDelay
	DefaultMaxDelay       = firing.DefaultMaxDelay
	DefaultMisfireAction  = sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE
	DefaultMisfireGrace   = time.Hour
	DefaultMaxCatchUp     = 10
	DefaultOverlap        = firing.DefaultOverlap
	DefaultTimezone       = "UTC"
	DefaultDstGap         = sundialv1.DstGapPolicy_DST_GAP_POLICY_SHIFT
	DefaultDstRepeat      = sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_FIRST
	DefaultHTTPMethod     = firing.DefaultHTTPMethod
)

// Normalize fills every unset field of job with its default, in place, and
// upper-cases the HTTP method, so a stored job says explicitly how it
// behaves. It does not validate; call Validate first.
func Normalize(job *sundialv1.Job) {
	if job == nil {
		return
	}
	if job.Priority == sundialv1.Priority_PRIORITY_UNSPECIFIED {
		job.Priority = DefaultPriority
	}
	if job.AttemptTimeout == nil {
		job.AttemptTimeout = durationpb.New(DefaultAttemptTimeout)
	}
	if job.Retry == nil {
		job.Retry = &sundialv1.RetryPolicy{}
	}
	firing.NormalizeRetry(job.Retry)
	if job.Misfire == nil {
		job.Misfire = &sundialv1.MisfirePolicy{}
	}
	m := job.Misfire
	if m.Action == sundialv1.MisfireAction_MISFIRE_ACTION_UNSPECIFIED {
		m.Action = DefaultMisfireAction
	}
	if m.Grace == nil {
		m.Grace = durationpb.New(DefaultMisfireGrace)
	}
	if m.MaxCatchUp == 0 {
		m.MaxCatchUp = DefaultMaxCatchUp
	}
	if job.Overlap == sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED {
		job.Overlap = DefaultOverlap
	}
	if s := job.Schedule; s != nil {
		if s.Timezone == "" {
			s.Timezone = DefaultTimezone
		}
		if s.DstGap == sundialv1.DstGapPolicy_DST_GAP_POLICY_UNSPECIFIED {
			s.DstGap = DefaultDstGap
		}
		if s.DstRepeat == sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_UNSPECIFIED {
			s.DstRepeat = DefaultDstRepeat
		}
		normalizeSpec(s)
		// An additional schedule states its zone and policies too: the
		// primary's zone when it named none.
		for _, a := range s.AdditionalSchedules {
			if a == nil {
				continue
			}
			if a.Timezone == "" {
				a.Timezone = s.Timezone
			}
			if a.DstGap == sundialv1.DstGapPolicy_DST_GAP_POLICY_UNSPECIFIED {
				a.DstGap = DefaultDstGap
			}
			if a.DstRepeat == sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_UNSPECIFIED {
				a.DstRepeat = DefaultDstRepeat
			}
			normalizeSpec(a)
		}
	}
	if h := job.GetTarget().GetHttp(); h != nil {
		if h.Method == "" {
			h.Method = DefaultHTTPMethod
		}
		h.Method = strings.ToUpper(h.Method)
	}
}

func normalizeSpec(s *sundialv1.Schedule) {
	switch spec := s.Spec.(type) {
	case *sundialv1.Schedule_Cron:
		spec.Cron = strings.TrimSpace(spec.Cron)
	case *sundialv1.Schedule_Rrule:
		spec.Rrule = strings.TrimSpace(spec.Rrule)
	}
}

// Schedule builds the engine schedule of a job. created anchors an interval
// schedule that has no start_time (pass the job's creation instant, so every
// service computes the same slots).
//
// Hashed cron values (H) resolve from the job's id (schedule.Options.
// HashSeed): every service computes the same slots from the stored job.
func Schedule(job *sundialv1.Job, created time.Time) (schedule.Schedule, error) {
	return fromProto(job.GetSchedule(), created, job.GetId())
}

// FromProto builds the engine schedule of s; created anchors an interval
// without start_time. With additional_schedules it is their union with s
// (schedule.Union), with exclusions the union less them
// (schedule.Excluded); a calendar (pkg/domain/calendar) goes under the
// exclusions. It fails on a schedule Validate would reject.
// A cron with H is refused naming the field: it has no job to hash (see
// Schedule).
func FromProto(s *sundialv1.Schedule, created time.Time) (schedule.Schedule, error) {
	return fromProto(s, created, "")
}

// fromProto is FromProto with H hashed from seed.
func fromProto(s *sundialv1.Schedule, created time.Time, seed string) (schedule.Schedule, error) {
	primary, err := fromSpec(s, "schedule", created, seed)
	if err != nil || (len(s.GetAdditionalSchedules()) == 0 && len(s.GetExclusions()) == 0) {
		return primary, err
	}
	members := []schedule.Schedule{primary}
	for i, a := range s.GetAdditionalSchedules() {
		m, err := fromSpec(inheritZone(a, s), fmt.Sprintf("schedule.additional_schedules[%d]", i), created, seed)
		if err != nil {
			return nil, err
		}
		members = append(members, m)
	}
	u, err := schedule.NewUnion(members...)
	if err != nil {
		return nil, fmt.Errorf("jobspec: schedule.additional_schedules: %w", err)
	}
	excl, err := Exclusions(s)
	if err != nil {
		return nil, fmt.Errorf("jobspec: %w", err)
	}
	loc, _ := location(s.GetTimezone())
	out, err := schedule.NewExcluded(u, excl, loc)
	if err != nil {
		return nil, &Error{Violations: []FieldViolation{{Field: "schedule.exclusions", Description: err.Error()}}}
	}
	return out, nil
}

// fromSpec builds one schedule of a job (the primary, or one of its
// additional schedules, named by field in errors).
func fromSpec(s *sundialv1.Schedule, field string, created time.Time, seed string) (schedule.Schedule, error) {
	if s == nil {
		return nil, fmt.Errorf("jobspec: %s is not set", field)
	}
	loc, err := location(s.GetTimezone())
	if err != nil {
		return nil, fmt.Errorf("jobspec: %s.timezone: %w", field, err)
	}
	opts := schedule.Options{
		Location: loc,
		Gap:      gapPolicy(s.GetDstGap()),
		Repeat:   repeatPolicy(s.GetDstRepeat()),
		HashSeed: seed,
	}
	if ts := s.GetStartTime(); ts != nil {
		opts.Start = ts.AsTime()
	}
	if ts := s.GetEndTime(); ts != nil {
		opts.End = ts.AsTime()
	}
	switch spec := s.GetSpec().(type) {
	case *sundialv1.Schedule_Cron:
		sch, err := schedule.Parse(strings.TrimSpace(spec.Cron), opts)
		if err != nil {
			return nil, fmt.Errorf("jobspec: %s.cron: %s", field, cronProblem(err))
		}
		return sch, nil
	case *sundialv1.Schedule_Once:
		return schedule.Once(spec.Once.AsTime(), opts), nil
	case *sundialv1.Schedule_Interval:
		sch, err := schedule.Every(spec.Interval.AsDuration(), anchorFor(s, created), opts)
		if err != nil {
			return nil, fmt.Errorf("jobspec: %s.interval: %w", field, err)
		}
		return sch, nil
	case *sundialv1.Schedule_Rrule:
		sch, err := schedule.ParseRRule(spec.Rrule, anchorFor(s, created), opts)
		if err != nil {
			return nil, &Error{Violations: []FieldViolation{{Field: field + ".rrule", Description: rruleProblem(err)}}}
		}
		return sch, nil
	default:
		return nil, fmt.Errorf("jobspec: %s: set one of cron, once, interval or rrule", field)
	}
}

// anchorFor is where an interval schedule counts from, and a recurrence
// rule's DTSTART: the schedule's start_time, or
// the job's creation truncated to the second (slots are whole seconds
// apart, and a creation instant's microseconds would otherwise leak into
// every slot and execution id).
func anchorFor(s *sundialv1.Schedule, created time.Time) time.Time {
	if ts := s.GetStartTime(); ts != nil {
		return ts.AsTime()
	}
	return created.Truncate(time.Second)
}

func gapPolicy(p sundialv1.DstGapPolicy) schedule.GapPolicy {
	if p == sundialv1.DstGapPolicy_DST_GAP_POLICY_SKIP {
		return schedule.GapSkip
	}
	return schedule.GapShift
}

func repeatPolicy(p sundialv1.DstRepeatPolicy) schedule.RepeatPolicy {
	switch p {
	case sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_LAST:
		return schedule.RepeatLast
	case sundialv1.DstRepeatPolicy_DST_REPEAT_POLICY_BOTH:
		return schedule.RepeatBoth
	default:
		return schedule.RepeatFirst
	}
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// Hashed reports whether any cron of s (its own or an additional schedule's)
// has a hashed value (H): its instants depend on the job's id, so two jobs
// with the same schedule fire together only if H lands alike for both.
func Hashed(s *sundialv1.Schedule) bool {
	for _, x := range append([]*sundialv1.Schedule{s}, s.GetAdditionalSchedules()...) {
		for _, field := range strings.Fields(x.GetCron()) {
			for _, item := range strings.Split(field, ",") {
				if item != "" && (item[0] == 'H' || item[0] == 'h') {
					return true
				}
			}
		}
	}
	return false
}
