package store

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Audit actions the api writes. The prefetcher and workers add their own
// (complete, purge) to the same trail.
const (
	ActionCreate   = "create"
	ActionUpdate   = "update"
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionDelete   = "delete"
	ActionTrigger  = "trigger"
	ActionBackfill = "backfill"
	ActionRedrive  = "redrive"
	// ActionCancel: a request to cancel one of the job's executions. The
	// request itself lives in Redis beside the execution's lease.
	ActionCancel = "cancel"
)

// Audit is one entry of the job trail a change appends inside its own
// transaction (through pkg/postgres/audittrail), so the trail holds exactly the
// changes that committed.
type Audit struct {
	// Actor is who made the change (auth.ActorFrom).
	Actor string
	// Action is one of the Action constants.
	Action string
	// Detail is what changed, stored as a JSON object. It never holds
	// field values that may be secrets (header values, payloads): an
	// update records the paths it changed, not their contents.
	Detail map[string]any
}

func cloneDetail(d map[string]any) map[string]any {
	out := make(map[string]any, len(d)+2)
	maps.Copy(out, d)
	return out
}

func jobRecord(tenant, jobID string, version int64, now time.Time, a Audit) audittrail.Record {
	return audittrail.Record{Kind: audittrail.KindJob, Tenant: tenant, Subject: jobID, Actor: a.Actor, Action: a.Action,
		Version: version, At: now, Detail: a.Detail}
}

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, jobID string, version int64, now time.Time, a Audit) error {
	if err := audittrail.Append(ctx, tx, jobRecord(tenant, jobID, version, now, a)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// AppendAudit appends one entry to a job's trail on its own, for a
// change recorded outside Postgres (a cancel request, which lives in
// Redis): written after that change, at the database's now(), with the
// job's current version.
func (s *Store) AppendAudit(ctx context.Context, tenant, jobID string, version int64, a Audit) error {
	if err := audittrail.Append(ctx, s.pool, jobRecord(tenant, jobID, version, time.Time{}, a)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// auditSQL and auditArgs are the job trail's append split for a
// pgx.Batch: the statement is the same for every job entry.
var auditSQL = func() string {
	sql, _, err := jobRecord("-", "-", 0, time.Unix(0, 0), Audit{Action: "-"}).Statement()
	if err != nil {
		panic(err)
	}
	return sql
}()

func auditArgs(tenant, jobID string, version int64, now time.Time, a Audit) ([]any, error) {
	_, args, err := jobRecord(tenant, jobID, version, now, a).Statement()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return args, nil
}

// AuditQuery selects a page of one job's audit trail, or of every job's
// of the tenant, newest first.
type AuditQuery struct {
	// JobID is the job; "" for all the tenant's jobs.
	JobID string
	// Before is the id of the last entry of the previous page, 0 for the
	// first page.
	Before int64
	Limit  int
}

// AuditEntry is one row of the trail with its position for paging.
type AuditEntry struct {
	Seq   int64
	Entry *sundialv1.AuditEntry
}

// ListAudit returns up to q.Limit audit entries of the tenant's job (or
// jobs), newest first. The trail outlives the job (it stays when the job
// is purged), so it does not look at jobs.
func (s *Store) ListAudit(ctx context.Context, tenant string, q AuditQuery) ([]AuditEntry, error) {
	es, err := audittrail.Trail(ctx, s.pool, audittrail.KindJob, tenant, q.JobID, q.Before, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{Seq: e.Seq, Entry: &sundialv1.AuditEntry{JobId: e.Subject, Tenant: e.Tenant, Actor: e.Actor,
			Action: e.Action, Version: e.Version, Time: timestamppb.New(e.At), Detail: e.Detail}}
	}
	return out, nil
}

// ListTrails returns a page of the tenant's change trails merged, newest
// first, as q selects (audittrail.List).
func (s *Store) ListTrails(ctx context.Context, q audittrail.Query) ([]audittrail.Entry, error) {
	es, err := audittrail.List(ctx, s.pool, q)
	if err != nil {
		return nil, fmt.Errorf("store: list trails: %w", err)
	}
	return es, nil
}
