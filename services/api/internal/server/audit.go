package server

import (
	"context"
	"errors"

	"github.com/sundialhq/sundial/pkg/audittrail"
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
	q := store.AuditQuery{JobID: id, Limit: size + 1}
	if tok := req.GetPageToken(); tok != "" {
		// The token's scope is the job it pages through ("" for all).
		c, err := audittrail.Decode(tok, map[string]string{"j": id})
		switch {
		case errors.Is(err, audittrail.ErrOtherScope):
			return nil, invalidf("page_token", "was issued for another job")
		case err != nil:
			return nil, invalidf("page_token", "is not a token this server issued")
		}
		q.Before = c.Seq
	}
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
	if len(entries) > size {
		entries = entries[:size]
		resp.NextPageToken = audittrail.Cursor{Seq: entries[size-1].Seq, Scope: map[string]string{"j": id}}.Encode()
	}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, e.Entry)
	}
	return resp, nil
}
