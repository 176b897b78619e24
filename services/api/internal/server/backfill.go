package server

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

const (
	// DefaultBackfillMaxSlots is the slot cap when a request sets none.
	DefaultBackfillMaxSlots = 10_000
	// MaxBackfillSlots is the highest cap a request may set.
	MaxBackfillSlots = 100_000
)

// BackfillJob fires the job once for every slot of its schedule in
// [start_time, end_time], a range wholly in the past by the database clock,
// through the outbox like any firing. Each slot's execution id is the one
// the prefetcher gives it (firing.ExecutionID), so a slot that already ran
// is recognised by the worker (done marker) and not fired again; firings
// are marked catch-up with origin BACKFILL, and their fire instants are
// paced at rate_per_second from now. dry_run lists the slots and writes
// nothing.
func (s *JobService) BackfillJob(ctx context.Context, req *sundialv1.BackfillJobRequest) (*sundialv1.BackfillJobResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id, err := jobID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	var vs []jobspec.FieldViolation
	var start, end time.Time
	switch ts := req.GetStartTime(); {
	case ts == nil:
		vs = append(vs, jobspec.FieldViolation{Field: "start_time", Description: "is required"})
	case ts.CheckValid() != nil:
		vs = append(vs, jobspec.FieldViolation{Field: "start_time", Description: "is not a valid timestamp"})
	default:
		start = ts.AsTime()
	}
	switch ts := req.GetEndTime(); {
	case ts == nil:
		vs = append(vs, jobspec.FieldViolation{Field: "end_time", Description: "is required"})
	case ts.CheckValid() != nil:
		vs = append(vs, jobspec.FieldViolation{Field: "end_time", Description: "is not a valid timestamp"})
	default:
		end = ts.AsTime()
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		vs = append(vs, jobspec.FieldViolation{Field: "end_time", Description: "must not be before start_time"})
	}
	rate, v := rateOf("rate_per_second", req.GetRatePerSecond())
	if v != nil {
		vs = append(vs, *v)
	}
	maxSlots := int(req.GetMaxSlots())
	switch {
	case maxSlots == 0:
		maxSlots = DefaultBackfillMaxSlots
	case maxSlots < 0 || maxSlots > MaxBackfillSlots:
		vs = append(vs, jobspec.FieldViolation{Field: "max_slots", Description: fmt.Sprintf("must be between 1 and %d (0 means %d), got %d", MaxBackfillSlots, DefaultBackfillMaxSlots, maxSlots)})
	}
	if len(vs) > 0 {
		return nil, invalid(vs...)
	}

	actor := actorOf(ctx, tenant)
	// Each backfilled firing is a trace of its own (sampled at the firing
	// ratio), linked to this call: a backfill of thousands of slots is not
	// one giant trace. A dry run stages nothing and traces nothing.
	var st *tracing.Stager
	if !req.GetDryRun() {
		st = tracing.NewStager(ctx, s.tracer)
	}
	ctx, err = s.preloadJobCalendars(ctx, id, nil)
	if err != nil {
		return nil, s.statusOf(ctx, "BackfillJob", err)
	}
	res, err := s.store.Stage(ctx, tenant, id, req.GetDryRun(), func(now time.Time, job *sundialv1.Job) (store.StagePlan, error) {
		if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
			return store.StagePlan{}, reject(codes.FailedPrecondition, "job is deleted")
		}
		if end.After(now) {
			return store.StagePlan{}, rejectErr(invalidf("end_time", "must not be in the future: it is %s, now is %s by the database clock; the schedule fires slots from now on itself",
				end.UTC().Format(time.RFC3339Nano), now.Format(time.RFC3339Nano)))
		}
		// The calendar as it is now: a backfill fires the slots the job
		// would fire today over that range.
		sch, err := s.scheduleOf(ctx, tenant, job, job.GetCreateTime().AsTime())
		if err != nil {
			return store.StagePlan{}, err
		}
		var slots []time.Time
		// Next is strictly after its argument; start itself is in range.
		for t := sch.Next(start.Add(-time.Nanosecond)); !t.IsZero() && !t.After(end); t = sch.Next(t) {
			if len(slots) == maxSlots {
				return store.StagePlan{}, rejectErr(invalidf("max_slots", "the range holds more than %d slots of the schedule; narrow start_time..end_time or raise max_slots (at most %d)", maxSlots, MaxBackfillSlots))
			}
			slots = append(slots, t)
		}
		jobUUID := uuid.MustParse(job.GetId())
		plan := store.StagePlan{Firings: make([]store.Staged, len(slots))}
		for i, slot := range slots {
			fire := s.pacer.fireAt(now, i, rate)
			f := firing.New(job, firing.Attempt{
				Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_BACKFILL, ExecutionID: firing.ExecutionID(jobUUID, slot).String(),
				Scheduled: slot, Fire: fire, Number: 1, FirstAttempt: 1, CatchUp: true, Staged: now,
			})
			st.Stage(f)
			plan.Firings[i] = store.Staged{Firing: f, PublishAt: outbox.PublishAt(fire, s.pacer.lead, now)}
		}
		if n := stagedBytes(plan.Firings); n > maxStagedBytes {
			return store.StagePlan{}, rejectErr(invalidf("max_slots", "%d slots of this job are about %d MiB of firings, more than %d MiB at once; backfill a narrower range at a time",
				len(slots), n>>20, maxStagedBytes>>20))
		}
		detail := map[string]any{
			"start_time":      start.UTC().Format(time.RFC3339Nano),
			"end_time":        end.UTC().Format(time.RFC3339Nano),
			"slots":           len(slots),
			"rate_per_second": rate,
		}
		if len(slots) > 0 {
			detail["last_release_time"] = plan.Firings[len(slots)-1].Firing.GetFireTime().AsTime().Format(time.RFC3339Nano)
		}
		plan.Audit = &store.Audit{Actor: actor, Action: store.ActionBackfill, Detail: detail}
		return plan, nil
	})
	st.End(err)
	if err != nil {
		return nil, s.statusOf(ctx, "BackfillJob", err)
	}

	resp := &sundialv1.BackfillJobResponse{DryRun: req.GetDryRun()}
	firings := res.Inserted
	if req.GetDryRun() {
		firings = make([]*sundialv1.Firing, len(res.Plan.Firings))
		for i, st := range res.Plan.Firings {
			firings[i] = st.Firing
		}
	}
	for _, f := range firings {
		resp.Slots = append(resp.Slots, f.GetScheduledTime())
		resp.ExecutionIds = append(resp.ExecutionIds, f.GetExecutionId())
	}
	resp.Count = int32(len(firings))
	if len(firings) > 0 {
		resp.LastReleaseTime = firings[len(firings)-1].GetFireTime()
	}
	mode := "staged"
	if req.GetDryRun() {
		mode = "dry_run"
	} else {
		s.metrics.backfillFirings.Add(float64(len(firings)))
		s.logger.InfoContext(ctx, "job backfilled", "tenant", tenant, "job", id, "slots", len(res.Plan.Firings), "staged", len(firings),
			"rate_per_second", rate)
	}
	s.metrics.backfills.WithLabelValues(mode).Inc()
	return resp, nil
}
