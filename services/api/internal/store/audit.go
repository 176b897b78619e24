package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Audit actions the api writes. The prefetcher and workers add their own
// (complete, purge) to the same table.
const (
	ActionCreate   = "create"
	ActionUpdate   = "update"
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionDelete   = "delete"
	ActionTrigger  = "trigger"
	ActionBackfill = "backfill"
	ActionRedrive  = "redrive"
)

// Audit is one job_audit row a change appends inside its own transaction,
// so the trail holds exactly the changes that committed.
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

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, jobID string, version int64, now time.Time, a Audit) error {
	args, err := auditArgs(tenant, jobID, version, now, a)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, auditSQL, args...); err != nil {
		return fmt.Errorf("store: insert audit row: %w", err)
	}
	return nil
}

const auditSQL = `
		INSERT INTO job_audit (job_id, tenant, actor, action, version, at, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`

func auditArgs(tenant, jobID string, version int64, now time.Time, a Audit) ([]any, error) {
	if a.Detail == nil {
		a.Detail = map[string]any{}
	}
	detail, err := json.Marshal(a.Detail)
	if err != nil {
		return nil, fmt.Errorf("store: encode audit detail: %w", err)
	}
	return []any{jobID, tenant, a.Actor, a.Action, version, now, detail}, nil
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
// is purged), so it does not look at jobs. The tenant-wide trail walks the
// table's primary key backwards and keeps the tenant's rows: cheap while
// the tenant's changes are a fair share of recent ones.
func (s *Store) ListAudit(ctx context.Context, tenant string, q AuditQuery) ([]AuditEntry, error) {
	sql := `SELECT id, job_id::text, tenant, actor, action, version, at, detail::text
	          FROM job_audit WHERE tenant = $1`
	args := []any{tenant, q.Limit}
	if q.JobID != "" {
		args = append(args, q.JobID)
		sql += fmt.Sprintf(` AND job_id = $%d`, len(args))
	}
	if q.Before > 0 {
		args = append(args, q.Before)
		sql += fmt.Sprintf(` AND id < $%d`, len(args))
	}
	sql += ` ORDER BY id DESC LIMIT $2`
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var (
			e  AuditEntry
			at time.Time
			ae sundialv1.AuditEntry
		)
		if err := r.Scan(&e.Seq, &ae.JobId, &ae.Tenant, &ae.Actor, &ae.Action, &ae.Version, &at, &ae.Detail); err != nil {
			return e, err
		}
		ae.Time = timestamppb.New(at)
		e.Entry = &ae
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list audit: %w", err)
	}
	return out, nil
}
