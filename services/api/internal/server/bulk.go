package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// jobFilter is the filter ListJobs and BulkJobAction share.
type jobFilter struct {
	status                        sundialv1.JobStatus
	labels                        map[string]string
	nameContains                  string
	priority                      sundialv1.Priority
	nextFireAfter, nextFireBefore *timestamppb.Timestamp
}

// query checks f and returns the store query it means, with a digest that
// page tokens carry so a token is not replayed against another filter.
func (f jobFilter) query() (store.ListQuery, string, error) {
	var vs []jobspec.FieldViolation
	if _, ok := sundialv1.JobStatus_name[int32(f.status)]; !ok {
		vs = append(vs, jobspec.FieldViolation{Field: "status", Description: fmt.Sprintf("unknown value %d", f.status)})
	}
	if err := jobspec.ValidateLabels("labels", f.labels); err != nil {
		var jerr *jobspec.Error
		if errors.As(err, &jerr) {
			vs = append(vs, jerr.Violations...)
		}
	}
	if n := utf8.RuneCountInString(f.nameContains); n > 256 {
		vs = append(vs, jobspec.FieldViolation{Field: "name_contains", Description: fmt.Sprintf("at most 256 characters, got %d", n)})
	}
	if _, ok := sundialv1.Priority_name[int32(f.priority)]; !ok {
		vs = append(vs, jobspec.FieldViolation{Field: "priority", Description: fmt.Sprintf("unknown value %d", f.priority)})
	}
	q := store.ListQuery{Status: f.status, Labels: f.labels, NameContains: f.nameContains, Priority: f.priority}
	for _, b := range []struct {
		field string
		ts    *timestamppb.Timestamp
		into  *time.Time
	}{{"next_fire_after", f.nextFireAfter, &q.NextFireFrom}, {"next_fire_before", f.nextFireBefore, &q.NextFireBefore}} {
		if b.ts == nil {
			continue
		}
		if err := b.ts.CheckValid(); err != nil {
			vs = append(vs, jobspec.FieldViolation{Field: b.field, Description: "is not a valid timestamp"})
			continue
		}
		*b.into = b.ts.AsTime()
	}
	if !q.NextFireFrom.IsZero() && !q.NextFireBefore.IsZero() && !q.NextFireFrom.Before(q.NextFireBefore) {
		vs = append(vs, jobspec.FieldViolation{Field: "next_fire_before", Description: "must be after next_fire_after"})
	}
	if len(vs) > 0 {
		return q, "", invalid(vs...)
	}
	digest := listFilterDigest(f.status, f.labels, f.nameContains)
	if f.priority != sundialv1.Priority_PRIORITY_UNSPECIFIED {
		// Only when set, so tokens issued before the priority filter stay
		// valid.
		h := sha256.New()
		fmt.Fprintf(h, "%s|priority %d", digest, f.priority)
		digest = hex.EncodeToString(h.Sum(nil)[:8])
	}
	if !q.NextFireFrom.IsZero() || !q.NextFireBefore.IsZero() {
		// Only when set, so tokens issued before the bounds stay valid.
		h := sha256.New()
		fmt.Fprintf(h, "%s|%d|%d", digest, q.NextFireFrom.UnixNano(), q.NextFireBefore.UnixNano())
		digest = hex.EncodeToString(h.Sum(nil)[:8])
	}
	return q, digest, nil
}

const (
	defaultBulkLimit = 1000
	maxBulkLimit     = 10000
	// maxBulkCount bounds a dry run's count: counting reads every match,
	// and a confirmation needs "more than 100,000", not the figure. Its
	// cost grows with the cap, not the tenant: 100,000 index entries keep
	// the confirmation of a bulk action over everything of a 10,000,000-job
	// tenant within the console's 200 ms (a cap of 1,000,000 took 78–467 ms).
	maxBulkCount = 100_000
	bulkSample   = 20
)

// BulkJobAction pauses, resumes or deletes the tenant's jobs a filter
// matches, up to limit of them per call in id order (a pause or delete
// changes the jobs another transaction holds after the others), each
// through the same transition as PauseJob, ResumeJob or DeleteJob (its
// version, audit row, dropped firings and published version), so a bulk
// change is exactly the single changes it stands for. A page token carries
// on after the last job of the previous call; since every change is
// idempotent, repeating a call that failed half-way is safe.
func (s *JobService) BulkJobAction(ctx context.Context, req *sundialv1.BulkJobActionRequest) (*sundialv1.BulkJobActionResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	// Pause and delete decide from the job alone, so their changes are
	// grouped: bulkGroup jobs per transaction (store.MutateEach). A resume
	// reads the job's calendars first and goes one job at a time.
	var (
		apply func(ctx context.Context, id string) (*sundialv1.Job, error)
		group *bulkChange
	)
	switch req.GetAction() {
	case sundialv1.BulkAction_BULK_ACTION_PAUSE:
		group = &bulkChange{op: "PauseJob", action: store.ActionPause, reason: pausedReason, fn: pauseJob}
	case sundialv1.BulkAction_BULK_ACTION_RESUME:
		apply = func(ctx context.Context, id string) (*sundialv1.Job, error) {
			r, err := s.ResumeJob(ctx, &sundialv1.ResumeJobRequest{Id: id})
			return r.GetJob(), err
		}
	case sundialv1.BulkAction_BULK_ACTION_DELETE:
		group = &bulkChange{op: "DeleteJob", action: store.ActionDelete, reason: deletedReason, fn: deleteJob}
	default:
		return nil, invalidf("action", "must be pause, resume or delete")
	}
	q, digest, err := jobFilter{status: req.GetStatus(), labels: req.GetLabels(), nameContains: req.GetNameContains(), priority: req.GetPriority(),
		nextFireAfter: req.GetNextFireAfter(), nextFireBefore: req.GetNextFireBefore()}.query()
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, invalidf("limit", "must not be negative, got %d", limit)
	case limit == 0:
		limit = defaultBulkLimit
	case limit > maxBulkLimit:
		limit = maxBulkLimit
	}
	// The action is part of the token's filter: a pause's token does not
	// continue a delete.
	digest += "/" + req.GetAction().String()
	if tok := req.GetPageToken(); tok != "" {
		c, err := decodeCursor(tok, digest)
		if err != nil {
			return nil, err
		}
		q.After = c.After
	}
	if req.GetDryRun() {
		n, err := s.store.Count(ctx, tenant, q, maxBulkCount+1)
		if err != nil {
			return nil, s.statusOf(ctx, "BulkJobAction", err)
		}
		q.Limit = bulkSample
		sample, err := s.store.List(ctx, tenant, q)
		if err != nil {
			return nil, s.statusOf(ctx, "BulkJobAction", err)
		}
		return &sundialv1.BulkJobActionResponse{Matched: min(n, maxBulkCount), CappedCount: n > maxBulkCount, Sample: sample}, nil
	}
	q.Limit = limit + 1
	jobs, err := s.store.List(ctx, tenant, q)
	if err != nil {
		return nil, s.statusOf(ctx, "BulkJobAction", err)
	}
	resp := &sundialv1.BulkJobActionResponse{}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		resp.NextPageToken = encodeCursor(listCursor{After: jobs[limit-1].GetId(), Filter: digest})
	}
	if group == nil {
		for _, j := range jobs {
			if err := ctx.Err(); err != nil {
				return nil, status.FromContextError(err).Err()
			}
			got, err := apply(ctx, j.GetId())
			if err := countBulk(resp, j, got, err); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
	// Grouped: a first pass passes over the jobs another transaction holds
	// (a prefetcher staging their chunk, which takes seconds for thousands
	// of per-second jobs) instead of waiting for it, and a second pass
	// changes those, waiting for their locks then.
	var busy []*sundialv1.Job
	for _, skipLocked := range []bool{true, false} {
		todo := jobs
		if !skipLocked {
			todo = busy
		}
		for from := 0; from < len(todo); from += bulkGroup {
			if err := ctx.Err(); err != nil {
				return nil, status.FromContextError(err).Err()
			}
			part := todo[from:min(from+bulkGroup, len(todo))]
			outs, err := s.bulkGroup(ctx, tenant, *group, part, skipLocked)
			if err != nil {
				return nil, err
			}
			for k, o := range outs {
				if o.busy {
					busy = append(busy, part[k])
					continue
				}
				if err := countBulk(resp, part[k], o.job, o.err); err != nil {
					return nil, err
				}
			}
		}
	}
	return resp, nil
}

// bulkGroup is how many jobs one transaction of a bulk pause or delete
// changes: 3,000 deletes took 19 s one commit each on the 2-core machine.
const bulkGroup = 100

// bulkChange is a bulk pause or delete: the single RPC's name (for its
// errors), audit action, drop reason and decision.
type bulkChange struct {
	op, action string
	reason     func(*sundialv1.Job) string
	fn         store.MutateFunc
}

// bulkOutcome is one job's result: the job as it is now, or the error the
// single RPC would have answered.
type bulkOutcome struct {
	job *sundialv1.Job
	err error
	// busy: passed over, held by another transaction (skipLocked).
	busy bool
}

// bulkGroup applies c to jobs in one transaction and then, for each job
// changed, does what the single RPC does after its commit (the log line,
// the published version).
func (s *JobService) bulkGroup(ctx context.Context, tenant string, c bulkChange, jobs []*sundialv1.Job, skipLocked bool) ([]bulkOutcome, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.GetId()
	}
	muts, err := s.store.MutateEach(ctx, tenant, ids, store.Change{Audit: store.Audit{Actor: actorOf(ctx, tenant), Action: c.action}, DropReason: c.reason, SkipLocked: skipLocked}, c.fn)
	if err != nil {
		return nil, s.statusOf(ctx, "BulkJobAction", err)
	}
	what := strings.ToLower(strings.TrimSuffix(c.op, "Job")) + "d"
	outs := make([]bulkOutcome, len(muts))
	// The announcements go out side by side, bulkAnnounce at a time: one
	// after the other they took a Redis round trip per job.
	var wg sync.WaitGroup
	turn := make(chan struct{}, bulkAnnounce)
	for i, m := range muts {
		if errors.Is(m.Err, store.ErrBusy) {
			outs[i].busy = true
			continue
		}
		if m.Err != nil {
			outs[i].err = s.statusOf(ctx, c.op, m.Err)
			continue
		}
		outs[i].job = m.Mutated.Job
		turn <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-turn }()
			s.changed(ctx, what, m.Mutated)
		}()
	}
	wg.Wait()
	return outs, nil
}

// bulkAnnounce is how many of a group's version announcements are in
// flight at once.
const bulkAnnounce = 16

// countBulk adds one job's outcome to the response (j as listed, got as
// it is now); an error other than a refusal or a job gone ends the call.
func countBulk(resp *sundialv1.BulkJobActionResponse, j, got *sundialv1.Job, err error) error {
	switch status.Code(err) {
	case codes.OK:
		if got.GetVersion() > j.GetVersion() {
			resp.Changed++
		}
	case codes.FailedPrecondition:
		resp.Refused = append(resp.Refused, &sundialv1.BulkJobRefusal{Id: j.GetId(), Name: j.GetName(), Reason: status.Convert(err).Message()})
	case codes.NotFound:
		// Purged since it was listed: nothing left to change.
	default:
		return err
	}
	resp.Matched++
	return nil
}
