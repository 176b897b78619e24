package forecast

import (
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Count is how many jobs of one tenant and priority share a schedule and
// a jitter: one row of the api's forecast_schedules table (migration
// 00027), which the database keeps from every write of jobs, so a
// forecast reads one row per distinct schedule instead of one per job.
type Count struct {
	Tenant   string
	Priority sundialv1.Priority
	// Schedule and Jitter are the encodings of the jobs' schedule and
	// max_jitter fields as stored in their specs (Jitter empty: none).
	Schedule, Jitter []byte
	// Anchor is the jobs' creation second when the schedule counts from
	// it (an interval or recurrence rule without start_time); zero
	// otherwise.
	Anchor time.Time
	// JobID is the one job of a schedule with H, whose values are hashed
	// from it; empty otherwise.
	JobID string
	// Jobs is how many jobs; Sample the ids of a few of them, for a
	// herd's listing (names are the caller's to fill in).
	Jobs   int
	Sample []string
}

// Count is the forecast's view of the jobs of c: a Job standing for all
// of them (its ID and Name empty unless c is one job's H schedule), and
// the sample as Jobs to list. An error means c.Schedule or c.Jitter is
// not an encoding of the field.
func (d *Decoder) Count(c Count) (Job, []Job, error) {
	ds, err := d.schedule(c.Schedule)
	if err != nil {
		return Job{}, nil, err
	}
	j, err := d.job(ds, c.Schedule, c.Jitter, c.JobID, c.Tenant, c.Priority, c.Anchor)
	if err != nil {
		return Job{}, nil, err
	}
	sample := make([]Job, 0, len(c.Sample))
	for _, id := range c.Sample {
		s := j
		s.ID, s.Build = id, nil
		sample = append(sample, s)
	}
	return j, sample, nil
}
