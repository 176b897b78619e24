package forecast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The fields of sundial.v1.Job a forecast reads from a stored spec.
const (
	jobFieldSchedule  protowire.Number = 5
	jobFieldMaxJitter protowire.Number = 13
)

// Decoder turns stored job specs (the encoded sundial.v1.Job of the jobs
// table) into forecast Jobs, decoding each distinct schedule once. A spec
// is scanned for its schedule and max_jitter fields only; its target,
// payload and the rest are skipped unread, and a schedule whose encoding
// was seen before is not decoded again. This is what makes the api's read
// of millions of jobs cost little more than the rows themselves
// (docs/benchmarks.md); FromJob is the same view of a decoded job.
//
// A Decoder holds every distinct schedule it met; it is for one forecast
// and not safe for concurrent use.
type Decoder struct {
	cal       CalendarLookup
	schedules map[string]*decoded
}

// decoded is one distinct schedule encoding, decoded.
type decoded struct {
	spec                           *sundialv1.Schedule
	expr, cron, zone               string
	anchored, hashed, withCalendar bool
	build                          func() (schedule.Schedule, error) // for schedules with no per-job part
	// hashedCrons are the crons with H (its own, then its additional
	// schedules'), resolved per job into its key.
	hashedCrons []string
}

// NewDecoder returns a Decoder resolving calendars with cal (nil: ignore
// calendars, as FromJob).
func NewDecoder(cal CalendarLookup) *Decoder {
	return &Decoder{cal: cal, schedules: map[string]*decoded{}}
}

// Job is the forecast's view of the job whose stored spec is spec; id,
// tenant, name, priority and created come from the row's columns, which
// are authoritative. An error means the spec is not a job's encoding.
func (d *Decoder) Job(spec []byte, id, tenant, name string, priority sundialv1.Priority, created time.Time) (Job, error) {
	var sched, jitter []byte
	for b := spec; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Job{}, fmt.Errorf("forecast: job spec: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == jobFieldSchedule || num == jobFieldMaxJitter) {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return Job{}, fmt.Errorf("forecast: job spec: %w", protowire.ParseError(m))
			}
			// A message field met twice is the merge of both, which is
			// what decoding their concatenation gives (protobuf's rule).
			if num == jobFieldSchedule {
				sched = merged(sched, v)
			} else {
				jitter = merged(jitter, v)
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return Job{}, fmt.Errorf("forecast: job spec: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	ds, err := d.schedule(sched)
	if err != nil {
		return Job{}, err
	}
	j, err := d.job(ds, sched, jitter, id, tenant, priority, created)
	if err != nil {
		return Job{}, err
	}
	j.Name = name
	return j, nil
}

// schedule is the distinct schedule encoded as sched, decoded once.
func (d *Decoder) schedule(sched []byte) (*decoded, error) {
	ds, ok := d.schedules[string(sched)]
	if ok {
		return ds, nil
	}
	s := &sundialv1.Schedule{}
	if err := proto.Unmarshal(sched, s); err != nil {
		return nil, fmt.Errorf("forecast: job spec: schedule: %w", err)
	}
	ds = &decoded{spec: s, expr: describe(s), zone: cmpOr(s.GetTimezone(), "UTC"),
		anchored: anchored(s) && s.GetStartTime() == nil, hashed: jobspec.Hashed(s), withCalendar: s.GetCalendar() != "" && d.cal != nil}
	if c, ok := s.GetSpec().(*sundialv1.Schedule_Cron); ok && len(s.GetAdditionalSchedules()) == 0 && len(s.GetExclusions()) == 0 {
		ds.cron = strings.TrimSpace(c.Cron)
	}
	if ds.hashed {
		ds.hashedCrons = hashedCrons(s)
	}
	d.schedules[string(sched)] = ds
	return ds, nil
}

// job is the forecast's view of a job of schedule ds (encoded as sched)
// and max_jitter encoded as jitter (nil: none).
func (d *Decoder) job(ds *decoded, sched, jitter []byte, id, tenant string, priority sundialv1.Priority, created time.Time) (Job, error) {
	if priority == sundialv1.Priority_PRIORITY_UNSPECIFIED {
		priority = sundialv1.Priority_PRIORITY_MEDIUM
	}
	j := Job{ID: id, Tenant: tenant, Priority: priority, Expr: ds.expr, Cron: ds.cron, Zone: ds.zone}
	if len(jitter) > 0 {
		var err error
		if j.Jitter, err = duration(jitter); err != nil {
			return Job{}, fmt.Errorf("forecast: job spec: max_jitter: %w", err)
		}
	}
	key := string(sched)
	if ds.hashed {
		// Keyed by what H resolves to for this job, as FromJob keys it: the
		// jobs whose H lands on the same values share the schedule.
		key += "\x00h" + resolvedCrons(ds.hashedCrons, id)
	}
	if ds.anchored {
		var sec [8]byte
		binary.BigEndian.PutUint64(sec[:], uint64(created.Unix()))
		key += "\x00a" + string(sec[:])
	}
	if ds.withCalendar {
		key += "\x00c" + tenant
	}
	j.Key = key
	switch {
	case ds.hashed:
		// Built only for the first job of its key, so the job's own view
		// is made then, not for each of a fleet's jobs.
		spec, cal := ds.spec, d.cal
		j.Build = func() (schedule.Schedule, error) {
			return FromJob(&sundialv1.Job{Id: id, Tenant: tenant, Schedule: spec}, created, cal).Build()
		}
	case ds.build == nil || ds.anchored || ds.withCalendar:
		// What FromJob builds, for this job's anchor and tenant.
		b := FromJob(&sundialv1.Job{Id: id, Tenant: tenant, Schedule: ds.spec}, created, d.cal).Build
		if !ds.anchored && !ds.withCalendar {
			ds.build = b
		}
		j.Build = b
	default:
		j.Build = ds.build
	}
	return j, nil
}

// resolvedCrons is crons with H hashed from seed, each in the engine's
// canonical form, joined: equal for two seeds exactly when H lands on the
// same values in every one of them. A cron that does not parse keeps the
// seed itself, so its job shares with no other.
func resolvedCrons(crons []string, seed string) string {
	var b strings.Builder
	for _, c := range crons {
		s, err := schedule.Parse(c, schedule.Options{HashSeed: seed})
		if err != nil {
			return "\x01" + seed
		}
		b.WriteString(s.String())
		b.WriteByte(0)
	}
	return b.String()
}

// merged is the encoding of a message field met again: the earlier bytes
// followed by v, copied so the spec is never written to.
func merged(earlier, v []byte) []byte {
	if earlier == nil {
		return v
	}
	return append(append(make([]byte, 0, len(earlier)+len(v)), earlier...), v...)
}

// duration reads an encoded google.protobuf.Duration.
func duration(b []byte) (time.Duration, error) {
	var sec, nanos int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			if num == 1 {
				sec = int64(v)
			} else {
				nanos = int64(int32(v))
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, protowire.ParseError(m)
		}
		b = b[m:]
	}
	if sec < 0 || (sec == 0 && nanos < 0) {
		return 0, nil // never valid; the forecast counts it as no jitter, as the worker does
	}
	if sec > 1<<32 {
		return 0, errors.New("out of range")
	}
	return time.Duration(sec)*time.Second + time.Duration(nanos), nil
}
