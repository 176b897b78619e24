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
	// JobID is, for a schedule with H, one of the jobs: their H values
	// are hashed from their ids and land where this one's do (HashedKey);
	// empty otherwise.
	JobID string
	// Jobs is how many jobs; Sample the ids of a few of them, for a
	// herd's listing (names are the caller's to fill in).
	Jobs   int
	Sample []string
}

// Count is the forecast's view of the jobs of c: a Job standing for all
// of them (its Name empty, its ID c.JobID: empty but for an H schedule), and
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

// HashedKey says where the H of the schedule encoded as schedule lands
// for the job id: its crons with H, hashed from id, in the engine's
// canonical form (as the prefetcher fires them), joined; empty when the
// schedule has no H. Two jobs of one encoded schedule with equal keys
// fire at the same instants, so the api's fold counts them on one row of
// forecast_schedules instead of a row per job. An error means schedule
// is not a Schedule's encoding.
func (d *Decoder) HashedKey(schedule []byte, id string) (string, error) {
	ds, err := d.schedule(schedule)
	if err != nil || !ds.hashed {
		return "", err
	}
	return resolvedCrons(ds.hashedCrons, id), nil
}
