package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// ListJobAudit returns a job's audit trail (without an id, the trail of
// every job of the tenant), newest first: every committed change (create,
// update with the paths it changed, pause, resume, delete, trigger,
// backfill, redrive, cancel of an execution, and the platform's complete
// and purge), who made it and the version it produced. The trail outlives the job, so a
// purged job's trail is still readable.
func (s *JobService) ListJobAudit(ctx context.Context, req *sundialv1.ListJobAuditRequest) (*sundialv1.ListJobAuditResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	// No id: the tenant's whole trail.
	id := ""
	if req.GetId() != "" {
		if id, err = jobID("id", req.GetId()); err != nil {
			return nil, err
		}
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The token's scope is the job it pages through ("" for all).
	scope := map[string]string{"j": id}
	c, err := auditCursor(req.GetPageToken(), scope, false, "another job")
	if err != nil {
		return nil, err
	}
	q := store.AuditQuery{JobID: id, Before: c.Seq, Limit: size + 1}
	entries, err := s.store.ListAudit(ctx, tenant, q)
	if err != nil {
		return nil, s.statusOf(ctx, "ListJobAudit", err)
	}
	if len(entries) == 0 && q.Before == 0 && id != "" {
		// No trail: tell a job without changes from one that is not the
		// tenant's (NotFound either way for another tenant's job).
		if _, err := s.store.Get(ctx, tenant, id); err != nil {
			return nil, s.statusOf(ctx, "ListJobAudit", err)
		}
	}
	resp := &sundialv1.ListJobAuditResponse{}
	entries, resp.NextPageToken = auditPage(entries, size, func(e store.AuditEntry) audittrail.Cursor {
		return audittrail.Cursor{Seq: e.Seq, Scope: scope}
	})
	for _, e := range entries {
		resp.Entries = append(resp.Entries, e.Entry)
	}
	return resp, nil
}

// AuditStore is what the AuditService reads; *store.Store implements it.
type AuditStore interface {
	// ListTrails reads a page of the merged trails (audittrail.List).
	ListTrails(ctx context.Context, q audittrail.Query) ([]audittrail.Entry, error)
	// Get reads a job, to tell a job without changes from one that is
	// not the tenant's.
	Get(ctx context.Context, tenant, id string) (*sundialv1.Job, error)
}

// AuditConfig is what an AuditService needs.
type AuditConfig struct {
	Store   AuditStore
	Logger  *slog.Logger
	Metrics *Metrics
}

// AuditService implements sundial.v1.AuditService: every change trail of
// the tenant as one view, over pkg/postgres/audittrail's merged read, the view the
// console's audit page shows.
type AuditService struct {
	sundialv1.UnimplementedAuditServiceServer
	cfg AuditConfig
}

// NewAuditService checks cfg and returns the service.
func NewAuditService(cfg AuditConfig) (*AuditService, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: AuditConfig.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &AuditService{cfg: cfg}, nil
}

// trailReads names, for each trail, the call whose role rule reading that
// trail follows: a role reads in the merged view exactly the trails it
// may read one by one (a read-only token no token trail).
var trailReads = map[audittrail.Kind]string{
	audittrail.KindJob:        "/sundial.v1.JobService/ListJobAudit",
	audittrail.KindToken:      "/sundial.v1.TokenService/ListTokenAudit",
	audittrail.KindSigningKey: "/sundial.v1.SigningKeyService/ListSigningKeyAudit",
	audittrail.KindCalendar:   "/sundial.v1.CalendarService/ListCalendarAudit",
}

// TrailReadable says whether role may read trail k: nil, or
// PermissionDenied naming the role and the trail.
func TrailReadable(role auth.Role, k audittrail.Kind) error {
	if auth.Allowed(role, trailReads[k]) != nil {
		return status.Errorf(codes.PermissionDenied, "kinds: role %s may not read the %s trail", role, k)
	}
	return nil
}

// ReadableTrails returns those of kinds (every trail when none) that role
// may read, in order.
func ReadableTrails(role auth.Role, kinds []audittrail.Kind) []audittrail.Kind {
	if len(kinds) == 0 {
		kinds = audittrail.Kinds
	}
	var out []audittrail.Kind
	for _, k := range kinds {
		if TrailReadable(role, k) == nil {
			out = append(out, k)
		}
	}
	return out
}

// auditKinds maps the wire's kinds to the trails' and back.
var auditKinds = map[sundialv1.AuditKind]audittrail.Kind{
	sundialv1.AuditKind_AUDIT_KIND_JOB:         audittrail.KindJob,
	sundialv1.AuditKind_AUDIT_KIND_TOKEN:       audittrail.KindToken,
	sundialv1.AuditKind_AUDIT_KIND_SIGNING_KEY: audittrail.KindSigningKey,
	sundialv1.AuditKind_AUDIT_KIND_CALENDAR:    audittrail.KindCalendar,
}

// AuditKindOf returns the wire's kind of trail k (UNSPECIFIED for none).
func AuditKindOf(k audittrail.Kind) sundialv1.AuditKind {
	for w, t := range auditKinds {
		if t == k {
			return w
		}
	}
	return sundialv1.AuditKind_AUDIT_KIND_UNSPECIFIED
}

// maxAuditActor bounds the actor filter: longer than any actor a trail
// records (a tenant, a token name and a separator).
const maxAuditActor = 512

// auditQuery checks req's filters, each error naming its field, and
// returns the store query (without its limit and cursor) and the scope a
// page token of it is valid for.
func auditQuery(tenant string, role auth.Role, req *sundialv1.ListAuditRequest) (audittrail.Query, map[string]string, error) {
	q := audittrail.Query{Tenant: tenant, Actor: req.GetActor(), Subject: req.GetSubject()}
	seen := map[audittrail.Kind]bool{}
	for _, w := range req.GetKinds() {
		k, ok := auditKinds[w]
		if !ok {
			return q, nil, invalidf("kinds", "%v is not a trail (AUDIT_KIND_JOB, AUDIT_KIND_TOKEN, AUDIT_KIND_SIGNING_KEY, AUDIT_KIND_CALENDAR)", w)
		}
		if err := TrailReadable(role, k); err != nil {
			return q, nil, err
		}
		if !seen[k] {
			seen[k] = true
			q.Kinds = append(q.Kinds, k)
		}
	}
	if len(q.Kinds) == 0 {
		if q.Kinds = ReadableTrails(role, nil); len(q.Kinds) == 0 {
			return q, nil, status.Errorf(codes.PermissionDenied, "kinds: role %s may read no trail", role)
		}
	}
	if len(q.Actor) > maxAuditActor {
		return q, nil, invalidf("actor", "is %d bytes, at most %d", len(q.Actor), maxAuditActor)
	}
	if a := req.GetAction(); a != "" {
		if err := audittrail.CheckAction(a); err != nil {
			return q, nil, invalidf("action", "%v", err)
		}
		q.Action = a
	}
	if q.Subject != "" {
		if len(req.GetKinds()) == 0 || len(q.Kinds) != 1 {
			return q, nil, invalidf("subject", "needs exactly one kind (what %q names depends on the trail)", q.Subject)
		}
		if q.Kinds[0] == audittrail.KindJob {
			id, err := jobID("subject", q.Subject)
			if err != nil {
				return q, nil, err
			}
			q.Subject = id
		}
	}
	for _, ts := range []struct {
		field string
		in    *timestamppb.Timestamp
		out   *time.Time
	}{{"start_time", req.GetStartTime(), &q.Since}, {"end_time", req.GetEndTime(), &q.Until}} {
		if ts.in == nil {
			continue
		}
		if err := ts.in.CheckValid(); err != nil {
			return q, nil, invalidf(ts.field, "is not a valid timestamp: %v", err)
		}
		*ts.out = ts.in.AsTime()
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return q, nil, invalidf("end_time", "%s is not after start_time %s", q.Until.Format(time.RFC3339Nano), q.Since.Format(time.RFC3339Nano))
	}
	kinds := make([]string, len(q.Kinds))
	for i, k := range q.Kinds {
		kinds[i] = string(k)
	}
	slices.Sort(kinds)
	scope := map[string]string{"t": tenant, "ks": strings.Join(kinds, ","), "ac": q.Actor, "s": q.Subject, "an": q.Action}
	if !q.Since.IsZero() {
		scope["from"] = q.Since.Format(time.RFC3339Nano)
	}
	if !q.Until.IsZero() {
		scope["to"] = q.Until.Format(time.RFC3339Nano)
	}
	return q, scope, nil
}

// ListAudit implements sundialv1.AuditServiceServer: a page of the
// tenant's trails the filters select, merged, newest first.
func (s *AuditService) ListAudit(ctx context.Context, req *sundialv1.ListAuditRequest) (*sundialv1.ListAuditResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no principal for this call")
	}
	q, scope, err := auditQuery(tenant, p.Role, req)
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	q.Limit = size + 1
	if q.After, err = auditCursor(req.GetPageToken(), scope, true,
		"another tenant or other filters; pass the filters it was issued with, or start without it"); err != nil {
		return nil, err
	}
	entries, err := s.cfg.Store.ListTrails(ctx, q)
	if err != nil {
		return nil, statusOf(ctx, s.cfg.Logger, s.cfg.Metrics, "ListAudit", err)
	}
	if len(entries) == 0 && req.GetPageToken() == "" && q.Subject != "" && q.Kinds[0] == audittrail.KindJob {
		// No trail: tell a job without changes from one that is not the
		// tenant's (NotFound either way for another tenant's job).
		if _, err := s.cfg.Store.Get(ctx, tenant, q.Subject); err != nil {
			return nil, statusOf(ctx, s.cfg.Logger, s.cfg.Metrics, "ListAudit", err)
		}
	}
	resp := &sundialv1.ListAuditResponse{}
	entries, resp.NextPageToken = auditPage(entries, size, func(e audittrail.Entry) audittrail.Cursor { return e.Cursor(scope) })
	for _, e := range entries {
		resp.Entries = append(resp.Entries, &sundialv1.AuditTrailEntry{Kind: AuditKindOf(e.Kind), Subject: e.Subject, Tenant: e.Tenant,
			Actor: e.Actor, Action: e.Action, Time: timestamppb.New(e.At), Version: e.Version, Detail: e.Detail})
	}
	return resp, nil
}
