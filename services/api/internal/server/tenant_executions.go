package server

import (
	"context"
	"errors"
	"time"

	"github.com/sundialhq/sundial/pkg/store/ledger"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TenantExecutionReader lists a tenant's executions across its jobs
// (history.Lazy, over ledger.Reader.ListByTenant). An ExecutionReader that
// does not implement it answers ListTenantExecutions Unavailable.
type TenantExecutionReader interface {
	ListByTenant(ctx context.Context, q ledger.TenantQuery) ([]*sundialv1.ExecutionAttempt, string, error)
}

// Default range of ListTenantExecutions.
const (
	// tenantExecutionsAhead: the default end, ahead of now, covers slots
	// recorded before they fire (skips, staged states).
	tenantExecutionsAhead = time.Hour
	// tenantExecutionsSpan is the default range's length.
	tenantExecutionsSpan = 24 * time.Hour
)

// ListTenantExecutions lists the caller's tenant's attempts of every job
// whose slot is in the request's range, newest first, optionally of some
// statuses only. The tenant is the token's: the ledger's by-tenant table
// holds only the tenant's rows, so nothing needs Postgres.
func (s *JobService) ListTenantExecutions(ctx context.Context, req *sundialv1.ListTenantExecutionsRequest) (*sundialv1.ListTenantExecutionsResponse, error) {
	tenant, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	q, err := tenantExecutionsQuery(tenant, req, s.clock.Now())
	if err != nil {
		return nil, err
	}
	r, ok := s.executions.(TenantExecutionReader)
	if !ok || s.executions == nil {
		return nil, errNoLedger
	}
	attempts, next, err := r.ListByTenant(ctx, q)
	if err != nil {
		if errors.Is(err, ledger.ErrInvalidPageToken) {
			return nil, invalidf("page_token", "is not a token this server issued for this tenant and these statuses")
		}
		return nil, s.ledgerStatus(ctx, "ListTenantExecutions", err)
	}
	return &sundialv1.ListTenantExecutionsResponse{Attempts: attempts, NextPageToken: next}, nil
}

// tenantExecutionsQuery checks a request and fills its defaults; every
// refusal names its field.
func tenantExecutionsQuery(tenant string, req *sundialv1.ListTenantExecutionsRequest, now time.Time) (ledger.TenantQuery, error) {
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return ledger.TenantQuery{}, err
	}
	end := now.Add(tenantExecutionsAhead)
	if t := req.GetEndTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			return ledger.TenantQuery{}, invalidf("end_time", "%v", err)
		}
		end = t.AsTime()
	}
	start := end.Add(-tenantExecutionsSpan)
	if t := req.GetStartTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			return ledger.TenantQuery{}, invalidf("start_time", "%v", err)
		}
		start = t.AsTime()
	}
	switch {
	case !start.Before(end):
		return ledger.TenantQuery{}, invalidf("start_time", "must be before end_time (%s), got %s", end.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339))
	case end.Sub(start) > ledger.MaxTenantRange:
		return ledger.TenantQuery{}, invalidf("start_time", "the range may span at most %s (31 days), got %s", ledger.MaxTenantRange, end.Sub(start))
	}
	for _, st := range req.GetStatuses() {
		if _, known := sundialv1.ExecutionStatus_name[int32(st)]; !known || st == sundialv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
			return ledger.TenantQuery{}, invalidf("statuses", "%d is not an execution status", int32(st))
		}
	}
	return ledger.TenantQuery{Tenant: tenant, From: start, To: end, Statuses: req.GetStatuses(), PageSize: size, PageToken: req.GetPageToken()}, nil
}
