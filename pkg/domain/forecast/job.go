package forecast

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// CalendarLookup returns the engine form of a tenant's business calendar,
// as the prefetcher applies it. It is called once per distinct schedule.
type CalendarLookup func(tenant, name string) (*schedule.Calendar, error)

// FromJob is the forecast's view of a stored job, created being its
// creation instant (it anchors intervals and recurrence rules without a
// start_time, as in jobspec.Schedule). cal resolves a named calendar; nil
// ignores calendars (the forecast then counts the instants a calendar
// would remove).
func FromJob(job *sundialv1.Job, created time.Time, cal CalendarLookup) Job {
	s := job.GetSchedule()
	j := Job{
		ID: job.GetId(), Tenant: job.GetTenant(), Name: job.GetName(),
		Priority: job.GetPriority(), Jitter: job.GetMaxJitter().AsDuration(),
		Zone: cmpOr(s.GetTimezone(), "UTC"), Expr: describe(s),
	}
	if j.Priority == sundialv1.Priority_PRIORITY_UNSPECIFIED {
		j.Priority = jobspec.DefaultPriority
	}
	if c, ok := s.GetSpec().(*sundialv1.Schedule_Cron); ok && len(s.GetAdditionalSchedules()) == 0 && len(s.GetExclusions()) == 0 {
		j.Cron = strings.TrimSpace(c.Cron)
	}
	j.Key = key(s, job.GetTenant(), created, cal != nil)
	if jobspec.Hashed(s) {
		// H resolves per job (schedule.Options.HashSeed). Keyed by what
		// it resolves to, the jobs whose H lands on the same values share
		// one schedule, so a fleet of "H * * * *" jobs is at most 60
		// schedules to count, not one per job.
		j.Key += "\x00h" + resolvedCrons(hashedCrons(s), job.GetId())
	}
	tenant := job.GetTenant()
	j.Build = func() (schedule.Schedule, error) {
		sch, err := jobspec.Schedule(job, created) // H hashed from the job's id
		if err != nil {
			return nil, err
		}
		if name := s.GetCalendar(); name != "" && cal != nil {
			ec, err := cal(tenant, name)
			if err != nil {
				return nil, fmt.Errorf("calendar %q: %w", name, err)
			}
			return calendar.ApplyEngine(sch, s, ec)
		}
		return sch, nil
	}
	return j
}

// key is equal for schedules with equal firings: the schedule's
// deterministic encoding, plus what else decides its instants — the
// creation second for an interval or rule counting from it, the tenant
// when a calendar (a per-tenant name) applies.
func key(s *sundialv1.Schedule, tenant string, created time.Time, calendars bool) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		b = []byte(s.String())
	}
	h := sha256.New()
	h.Write(b)
	if anchored(s) && s.GetStartTime() == nil {
		var sec [8]byte
		binary.BigEndian.PutUint64(sec[:], uint64(created.Unix()))
		h.Write(sec[:])
	}
	if calendars && s.GetCalendar() != "" {
		h.Write([]byte{0})
		h.Write([]byte(tenant))
	}
	return string(h.Sum(nil))
}

// hashedCrons are the crons of s with H: its own, then its additional
// schedules'.
func hashedCrons(s *sundialv1.Schedule) []string {
	var out []string
	for _, x := range append([]*sundialv1.Schedule{s}, s.GetAdditionalSchedules()...) {
		if c := x.GetCron(); jobspec.Hashed(&sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: c}}) {
			out = append(out, c)
		}
	}
	return out
}

// anchored reports whether any of s's schedules counts from the job's
// creation: an interval or a recurrence rule without a start_time.
func anchored(s *sundialv1.Schedule) bool {
	for _, x := range append([]*sundialv1.Schedule{s}, s.GetAdditionalSchedules()...) {
		switch x.GetSpec().(type) {
		case *sundialv1.Schedule_Interval, *sundialv1.Schedule_Rrule:
			return true
		}
	}
	return false
}

// describe is the schedule as an operator would write it.
func describe(s *sundialv1.Schedule) string {
	var out string
	switch spec := s.GetSpec().(type) {
	case *sundialv1.Schedule_Cron:
		out = strings.TrimSpace(spec.Cron)
	case *sundialv1.Schedule_Interval:
		out = "every " + spec.Interval.AsDuration().String()
	case *sundialv1.Schedule_Once:
		out = "once at " + spec.Once.AsTime().UTC().Format(time.RFC3339)
	case *sundialv1.Schedule_Rrule:
		out = strings.TrimSpace(spec.Rrule)
	}
	if n := len(s.GetAdditionalSchedules()); n > 0 {
		out += fmt.Sprintf(" (+%d more)", n)
	}
	if n := len(s.GetExclusions()); n > 0 {
		out += fmt.Sprintf(" (less %d exclusions)", n)
	}
	if c := s.GetCalendar(); c != "" {
		out += " (calendar " + c + ")"
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
