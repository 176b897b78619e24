package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// DeadLetterStore is the dead-letter storage the DeadLetterService uses;
// *store.Store implements it.
type DeadLetterStore interface {
	ListDeadLetters(ctx context.Context, tenant string, f store.DeadLetterFilter, after *store.DeadLetterCursor, limit int) ([]store.DeadLetter, error)
	GetDeadLetter(ctx context.Context, tenant, executionID string) (store.DeadLetter, error)
	Redrive(ctx context.Context, tenant, actor string, sel store.RedriveSelection, dryRun bool, fn store.RedriveFunc) (store.RedriveResult, error)
}

// DeadLetterConfig is what a DeadLetterService needs.
type DeadLetterConfig struct {
	Store   DeadLetterStore
	Logger  *slog.Logger
	Metrics *Metrics
	// ReleaseLead: see Config.ReleaseLead.
	ReleaseLead time.Duration
	// Tracer: see Config.Tracer.
	Tracer trace.Tracer
}

// DeadLetterService implements sundial.v1.DeadLetterService: listing the
// tenant's dead letters (executions that exhausted their attempts or were
// poison, recorded by workers in Postgres) and re-driving them.
type DeadLetterService struct {
	sundialv1.UnimplementedDeadLetterServiceServer

	store   DeadLetterStore
	logger  *slog.Logger
	metrics *Metrics
	pacer   pacer
	tracer  trace.Tracer
}

// NewDeadLetterService checks cfg and returns the service.
func NewDeadLetterService(cfg DeadLetterConfig) (*DeadLetterService, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: DeadLetterConfig.Store is required")
	}
	s := &DeadLetterService{store: cfg.Store, logger: cfg.Logger, metrics: cfg.Metrics, pacer: pacer{lead: cfg.ReleaseLead}, tracer: cfg.Tracer}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	if s.pacer.lead <= 0 {
		s.pacer.lead = DefaultReleaseLead
	}
	return s, nil
}

const (
	// DefaultRedriveLimit is how many dead letters one re-drive takes when
	// the request sets no limit.
	DefaultRedriveLimit = 1000
	// MaxRedriveLimit is the highest limit a request may set.
	MaxRedriveLimit = 100_000
)

// filterOf checks a request's filter (field names under prefix) and turns
// it into the store's.
func filterOf(prefix string, f *sundialv1.DeadLetterFilter) (store.DeadLetterFilter, []jobspec.FieldViolation) {
	var (
		out store.DeadLetterFilter
		vs  []jobspec.FieldViolation
	)
	if f == nil {
		return out, nil
	}
	if f.GetJobId() != "" {
		u, err := uuid.Parse(f.GetJobId())
		if err != nil {
			vs = append(vs, jobspec.FieldViolation{Field: prefix + "job_id", Description: fmt.Sprintf("must be a UUID, got %q", f.GetJobId())})
		} else {
			out.JobID = u.String()
		}
	}
	if ts := f.GetSince(); ts != nil {
		if ts.CheckValid() != nil {
			vs = append(vs, jobspec.FieldViolation{Field: prefix + "since", Description: "is not a valid timestamp"})
		} else {
			out.Since = ts.AsTime()
		}
	}
	if ts := f.GetUntil(); ts != nil {
		if ts.CheckValid() != nil {
			vs = append(vs, jobspec.FieldViolation{Field: prefix + "until", Description: "is not a valid timestamp"})
		} else {
			out.Until = ts.AsTime()
		}
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Until.After(out.Since) {
		vs = append(vs, jobspec.FieldViolation{Field: prefix + "until", Description: "must be after since"})
	}
	if c := f.GetErrorClass(); len(c) > 64 {
		vs = append(vs, jobspec.FieldViolation{Field: prefix + "error_class", Description: "is longer than 64 bytes"})
	} else {
		out.ErrorClass = c
	}
	out.IncludeRedriven = f.GetIncludeRedriven()
	return out, vs
}

// deadLetterTenant is the tenant whose dead letters a call reads or
// re-drives. A tenant's token: its own (a request's tenant field may name
// only that). A platform operator: the tenant the field or the
// sundial-tenant header names; naming none, every tenant's for a read
// (store.AllTenants), and InvalidArgument for a re-drive, which is always
// one tenant's.
func deadLetterTenant(ctx context.Context, named string, redrive bool) (string, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return "", err
	}
	header, operator := auth.OperatorTenant(ctx)
	if !operator {
		if named != "" && named != tenant {
			return "", status.Errorf(codes.PermissionDenied, "tenant: a tenant's token reads and re-drives its own dead letters only (%s), not %s", tenant, named)
		}
		return tenant, nil
	}
	switch {
	case named != "" && !auth.ValidName(named, false):
		return "", invalidf("tenant", "%q is not a tenant name", named)
	case named != "":
		return named, nil
	case header != "":
		return header, nil
	case redrive:
		return "", invalidf("tenant", "is required of a platform operator: a re-drive is one tenant's")
	}
	return store.AllTenants, nil
}

// deadLetterCursor is what a ListDeadLetters page token carries: where the
// previous page ended, and a digest of the filter it was issued for.
type deadLetterCursor struct {
	DeadAt string `json:"t"`
	Exec   string `json:"e"`
	Filter string `json:"f"`
}

func deadLetterFilterDigest(f store.DeadLetterFilter) string {
	b, _ := json.Marshal([]any{f.JobID, f.Since.UnixNano(), f.Until.UnixNano(), f.ErrorClass, f.IncludeRedriven})
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:8])
}

// ListDeadLetters pages through the tenant's dead letters, newest death
// first. Dead letters re-driven since they died are left out unless the
// filter includes them.
func (s *DeadLetterService) ListDeadLetters(ctx context.Context, req *sundialv1.ListDeadLettersRequest) (*sundialv1.ListDeadLettersResponse, error) {
	tenant, err := deadLetterTenant(ctx, req.GetTenant(), false)
	if err != nil {
		return nil, err
	}
	f, vs := filterOf("filter.", req.GetFilter())
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if len(vs) > 0 {
		return nil, invalid(vs...)
	}
	digest := deadLetterFilterDigest(f)
	var after *store.DeadLetterCursor
	if tok := req.GetPageToken(); tok != "" {
		var c deadLetterCursor
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || json.Unmarshal(b, &c) != nil || uuid.Validate(c.Exec) != nil {
			return nil, invalidf("page_token", "is not a token this server issued")
		}
		t, err := time.Parse(time.RFC3339Nano, c.DeadAt)
		if err != nil {
			return nil, invalidf("page_token", "is not a token this server issued")
		}
		if c.Filter != digest {
			return nil, invalidf("page_token", "was issued for a different filter; repeat the query's filter, or start over without a token")
		}
		after = &store.DeadLetterCursor{DeadAt: t, ExecutionID: c.Exec}
	}
	rows, err := s.store.ListDeadLetters(ctx, tenant, f, after, size+1)
	if err != nil {
		return nil, statusOf(ctx, s.logger, s.metrics, "ListDeadLetters", err)
	}
	resp := &sundialv1.ListDeadLettersResponse{}
	if len(rows) > size {
		rows = rows[:size]
		last := rows[size-1]
		b, _ := json.Marshal(deadLetterCursor{DeadAt: last.DeadAt.UTC().Format(time.RFC3339Nano), Exec: last.ExecutionID, Filter: digest})
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString(b)
	}
	for _, d := range rows {
		resp.DeadLetters = append(resp.DeadLetters, s.toProto(ctx, d))
	}
	s.metrics.deadLettersListed.Add(float64(len(resp.DeadLetters)))
	return resp, nil
}

// GetDeadLetter returns one of the tenant's dead letters by execution id.
func (s *DeadLetterService) GetDeadLetter(ctx context.Context, req *sundialv1.GetDeadLetterRequest) (*sundialv1.GetDeadLetterResponse, error) {
	tenant, err := deadLetterTenant(ctx, req.GetTenant(), false)
	if err != nil {
		return nil, err
	}
	id, err := jobID("execution_id", req.GetExecutionId())
	if err != nil {
		return nil, err
	}
	d, err := s.store.GetDeadLetter(ctx, tenant, id)
	if err != nil {
		return nil, statusOf(ctx, s.logger, s.metrics, "GetDeadLetter", err)
	}
	s.metrics.deadLettersListed.Inc()
	return &sundialv1.GetDeadLetterResponse{DeadLetter: s.toProto(ctx, d)}, nil
}

// toProto is the API form of a stored dead letter. The envelope holds the
// target's headers as stored ({{secret:…}} references, never resolved
// values: workers resolve them only in the request they send).
func (s *DeadLetterService) toProto(ctx context.Context, d store.DeadLetter) *sundialv1.DeadLetter {
	f, err := firing.Decode(d.Envelope)
	if err != nil {
		// Still list it, with what the columns say, so it can be found
		// and re-driven (a re-drive builds a fresh envelope from the job).
		s.logger.WarnContext(ctx, "dead letter envelope does not decode", "execution", d.ExecutionID, "err", err)
		f = &sundialv1.Firing{ExecutionId: d.ExecutionID, JobId: d.JobID, Tenant: d.Tenant, Attempt: d.LastAttempt}
	}
	out := &sundialv1.DeadLetter{
		Firing:       f,
		LastError:    d.LastError,
		ErrorClass:   d.ErrorClass,
		DeadTime:     timestamppb.New(d.DeadAt),
		HttpStatus:   d.HTTPStatus,
		Attempts:     d.Attempts,
		RedriveCount: d.RedriveCount,
	}
	if d.RedrivenAt != nil {
		out.RedriveTime = timestamppb.New(*d.RedrivenAt)
	}
	return out
}

// RedriveDeadLetters re-drives the dead letters the request selects —
// explicit execution ids, or a filter (which skips dead letters already
// re-driven, and those of deleted jobs) — at most limit, oldest death
// first. Each keeps its execution id, so the target can still dedupe, and
// gets a fresh round of attempts: attempt = the dead round's last attempt
// + 1, which is also the round's first_attempt (the retry budget counts
// from it). The firing is built from the job as it is now (its current
// version, target and retry policy: a fix made since the failure applies)
// with the original slot and catch-up flag, origin REDRIVE, fire instants
// paced at rate_per_second. dry_run says what would be re-driven.
func (s *DeadLetterService) RedriveDeadLetters(ctx context.Context, req *sundialv1.RedriveDeadLettersRequest) (*sundialv1.RedriveDeadLettersResponse, error) {
	tenant, err := deadLetterTenant(ctx, req.GetTenant(), true)
	if err != nil {
		return nil, err
	}
	var vs []jobspec.FieldViolation
	f, fvs := filterOf("filter.", req.GetFilter())
	vs = append(vs, fvs...)
	ids := make([]string, 0, len(req.GetExecutionIds()))
	for i, raw := range req.GetExecutionIds() {
		u, err := uuid.Parse(raw)
		if err != nil {
			vs = append(vs, jobspec.FieldViolation{Field: fmt.Sprintf("execution_ids[%d]", i), Description: fmt.Sprintf("must be a UUID, got %q", raw)})
			continue
		}
		ids = append(ids, u.String())
	}
	switch {
	case req.GetFilter() != nil && len(req.GetExecutionIds()) > 0:
		vs = append(vs, jobspec.FieldViolation{Field: "execution_ids", Description: "give either a filter or execution ids, not both"})
	case req.GetFilter() == nil && len(req.GetExecutionIds()) == 0:
		vs = append(vs, jobspec.FieldViolation{Field: "filter", Description: "is required without execution_ids (an empty filter selects every dead letter not yet re-driven)"})
	}
	if f.IncludeRedriven {
		vs = append(vs, jobspec.FieldViolation{Field: "filter.include_redriven", Description: "applies to listing only; name already re-driven executions in execution_ids to re-drive them again"})
	}
	rate, v := rateOf("rate_per_second", req.GetRatePerSecond())
	if v != nil {
		vs = append(vs, *v)
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = DefaultRedriveLimit
	case limit < 0 || limit > MaxRedriveLimit:
		vs = append(vs, jobspec.FieldViolation{Field: "limit", Description: fmt.Sprintf("must be between 1 and %d (0 means %d), got %d", MaxRedriveLimit, DefaultRedriveLimit, limit)})
	}
	if len(ids) > limit && limit > 0 {
		vs = append(vs, jobspec.FieldViolation{Field: "execution_ids", Description: fmt.Sprintf("names %d executions, more than limit (%d)", len(ids), limit)})
	}
	if len(vs) > 0 {
		return nil, invalid(vs...)
	}

	sel := store.RedriveSelection{ExecutionIDs: ids, Filter: f, Limit: limit}
	// Like a backfill: each re-driven firing is a trace of its own, linked
	// to this call.
	var st *tracing.Stager
	if !req.GetDryRun() {
		st = tracing.NewStager(ctx, s.tracer)
	}
	res, err := s.store.Redrive(ctx, tenant, actorOf(ctx, tenant), sel, req.GetDryRun(), func(now time.Time, cands []store.RedriveCandidate) (store.RedrivePlan, error) {
		plan := store.RedrivePlan{
			Firings:     make([]store.Staged, 0, len(cands)),
			AuditDetail: map[string]any{"rate_per_second": rate},
		}
		for i, c := range cands {
			d, job := c.DeadLetter, c.Job
			if job.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
				// Only named ids get here; a filter skips deleted jobs.
				return plan, reject(codes.FailedPrecondition, "execution %s: job %s is deleted", d.ExecutionID, job.GetId())
			}
			scheduled, catchUp, last := d.DeadAt, false, d.LastAttempt
			if old, err := firing.Decode(d.Envelope); err == nil && old.GetScheduledTime() != nil {
				scheduled, catchUp = old.GetScheduledTime().AsTime(), old.GetCatchUp()
				// Above every attempt the dead round made, whichever
				// record says more: the worker treats an attempt at or
				// below its finished one as a duplicate.
				last = max(last, old.GetAttempt())
			}
			attempt := last + 1
			fire := s.pacer.fireAt(now, i, rate)
			nf := firing.New(job, firing.Attempt{
				Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_REDRIVE, ExecutionID: d.ExecutionID,
				Scheduled: scheduled, Fire: fire, Number: attempt, FirstAttempt: attempt, CatchUp: catchUp, Staged: now,
			})
			st.Stage(nf)
			plan.Firings = append(plan.Firings, store.Staged{Firing: nf, PublishAt: outbox.PublishAt(fire, s.pacer.lead, now)})
		}
		if n := stagedBytes(plan.Firings); n > maxStagedBytes {
			return plan, rejectErr(invalidf("limit", "%d re-driven firings are about %d MiB, more than %d MiB at once; re-drive fewer at a time",
				len(plan.Firings), n>>20, maxStagedBytes>>20))
		}
		return plan, nil
	})
	st.End(err)
	if err != nil {
		return nil, statusOf(ctx, s.logger, s.metrics, "RedriveDeadLetters", err)
	}

	resp := &sundialv1.RedriveDeadLettersResponse{DryRun: req.GetDryRun()}
	firings := res.Redriven
	if req.GetDryRun() {
		firings = make([]*sundialv1.Firing, len(res.Plan.Firings))
		for i, st := range res.Plan.Firings {
			firings[i] = st.Firing
		}
	}
	for _, f := range firings {
		resp.ExecutionIds = append(resp.ExecutionIds, f.GetExecutionId())
	}
	resp.Count = int32(len(firings))
	if len(firings) > 0 {
		resp.LastReleaseTime = firings[len(firings)-1].GetFireTime()
	}
	mode := "dry_run"
	if !req.GetDryRun() {
		mode = "staged"
		s.metrics.deadLettersRedriven.Add(float64(len(firings)))
		s.logger.InfoContext(ctx, "dead letters re-driven", "tenant", tenant, "selected", len(res.Candidates), "redriven", len(firings),
			"rate_per_second", rate)
	}
	s.metrics.redrives.WithLabelValues(mode).Inc()
	return resp, nil
}
