package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// DeadLetter is one row of dead_letters: an execution that exhausted its
// attempts or was poison. Workers write it (and upsert it when a re-driven
// execution dies again); the api lists and re-drives it.
type DeadLetter struct {
	ExecutionID, Tenant, JobID string
	ErrorClass, LastError      string
	HTTPStatus                 int32
	// Attempts made in the round that died, and the number of the last.
	Attempts, LastAttempt int32
	// Envelope is the protobuf Firing of the last attempt.
	Envelope     []byte
	DeadAt       time.Time
	RedriveCount int32
	RedrivenAt   *time.Time
}

// Redriven reports whether the dead letter was re-driven after it died
// (and has not died again since).
func (d DeadLetter) Redriven() bool {
	return d.RedrivenAt != nil && !d.RedrivenAt.Before(d.DeadAt)
}

// DeadLetterFilter narrows a listing or a re-drive; zero fields match all.
type DeadLetterFilter struct {
	JobID string
	// Since and Until bound dead_at: [Since, Until).
	Since, Until time.Time
	ErrorClass   string
	// IncludeRedriven keeps dead letters re-driven since they died.
	IncludeRedriven bool
}

// DeadLetterCursor is where a listing page ended (newest first).
type DeadLetterCursor struct {
	DeadAt      time.Time
	ExecutionID string
}

const deadLetterColumns = `d.execution_id::text, d.tenant, d.job_id::text, d.error_class, d.last_error, d.http_status,
       d.attempts, d.last_attempt, d.envelope, d.dead_at, d.redrive_count, d.redriven_at`

func deadLetterDest(d *DeadLetter) []any {
	return []any{&d.ExecutionID, &d.Tenant, &d.JobID, &d.ErrorClass, &d.LastError, &d.HTTPStatus,
		&d.Attempts, &d.LastAttempt, &d.Envelope, &d.DeadAt, &d.RedriveCount, &d.RedrivenAt}
}

// where appends the filter's conditions on dead_letters d to a WHERE clause
// that already binds the tenant as $1.
func (f DeadLetterFilter) where(sql string, args []any) (string, []any) {
	if f.JobID != "" {
		args = append(args, f.JobID)
		sql += fmt.Sprintf(` AND d.job_id = $%d`, len(args))
	}
	if !f.Since.IsZero() {
		args = append(args, f.Since)
		sql += fmt.Sprintf(` AND d.dead_at >= $%d`, len(args))
	}
	if !f.Until.IsZero() {
		args = append(args, f.Until)
		sql += fmt.Sprintf(` AND d.dead_at < $%d`, len(args))
	}
	if f.ErrorClass != "" {
		args = append(args, f.ErrorClass)
		sql += fmt.Sprintf(` AND d.error_class = $%d`, len(args))
	}
	if !f.IncludeRedriven {
		// Re-driven and not dead again since. A worker that upserts the
		// row when the execution dies again moves dead_at past
		// redriven_at, so the row shows again whether or not it clears
		// redriven_at.
		sql += ` AND (d.redriven_at IS NULL OR d.redriven_at < d.dead_at)`
	}
	return sql, args
}

// AllTenants, as the tenant of ListDeadLetters and GetDeadLetter, reads
// every tenant's dead letters: a platform operator's listing.
const AllTenants = "*"

// deadLetterTenant is the condition on d's tenant, binding $1: the
// tenant's rows, or every row for AllTenants.
func deadLetterTenant(tenant string) string {
	if tenant == AllTenants {
		return `$1::text = '*'`
	}
	return `d.tenant = $1`
}

// ListDeadLetters returns up to limit of the tenant's dead letters (every
// tenant's for AllTenants) matching f, newest first, after the cursor
// (nil for the first page).
func (s *Store) ListDeadLetters(ctx context.Context, tenant string, f DeadLetterFilter, after *DeadLetterCursor, limit int) ([]DeadLetter, error) {
	sql, args := f.where(`SELECT `+deadLetterColumns+` FROM dead_letters d WHERE `+deadLetterTenant(tenant), []any{tenant})
	if after != nil {
		args = append(args, after.DeadAt, after.ExecutionID)
		sql += fmt.Sprintf(` AND (d.dead_at, d.execution_id) < ($%d, $%d::uuid)`, len(args)-1, len(args))
	}
	args = append(args, limit)
	sql += fmt.Sprintf(` ORDER BY d.dead_at DESC, d.execution_id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		return d, r.Scan(deadLetterDest(&d)...)
	})
	if err != nil {
		return nil, fmt.Errorf("store: list dead letters: %w", err)
	}
	return out, nil
}

// GetDeadLetter returns the tenant's dead letter of one execution (any
// tenant's for AllTenants).
func (s *Store) GetDeadLetter(ctx context.Context, tenant, executionID string) (DeadLetter, error) {
	var d DeadLetter
	err := s.pool.QueryRow(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters d WHERE `+deadLetterTenant(tenant)+` AND d.execution_id = $2`,
		tenant, executionID).Scan(deadLetterDest(&d)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrDeadLetterNotFound
	}
	if err != nil {
		return d, fmt.Errorf("store: get dead letter: %w", err)
	}
	return d, nil
}

// RedriveSelection picks the dead letters a re-drive takes: explicit
// execution ids, or else a filter; at most Limit, oldest death first.
type RedriveSelection struct {
	ExecutionIDs []string
	Filter       DeadLetterFilter
	Limit        int
}

// RedriveCandidate is a selected dead letter and its job as stored.
type RedriveCandidate struct {
	DeadLetter DeadLetter
	Job        *sundialv1.Job
}

// RedrivePlan is what a RedriveFunc decided.
type RedrivePlan struct {
	// Firings holds one firing per candidate to re-drive.
	Firings []Staged
	// AuditDetail is added to every job's "redrive" audit row, beside the
	// execution ids the store fills in.
	AuditDetail map[string]any
}

// RedriveFunc plans the re-drive of the selected dead letters (locked for
// the transaction), given the database clock. An error aborts it.
type RedriveFunc func(now time.Time, cands []RedriveCandidate) (RedrivePlan, error)

// RedriveResult is what Redrive did.
type RedriveResult struct {
	Now        time.Time
	Candidates []RedriveCandidate
	Plan       RedrivePlan
	// Redriven are the firings written to the outbox (a firing whose
	// attempt is already staged is not written, and its dead letter is
	// not marked).
	Redriven []*sundialv1.Firing
}

// JobGoneError is returned when a dead letter named by id belongs to a job
// that was purged, so there is nothing to fire it with.
type JobGoneError struct{ ExecutionID, JobID string }

func (e *JobGoneError) Error() string {
	return fmt.Sprintf("store: dead letter %s: job %s no longer exists", e.ExecutionID, e.JobID)
}

// MissingDeadLettersError lists execution ids named in a re-drive that are
// not among the tenant's dead letters.
type MissingDeadLettersError struct{ ExecutionIDs []string }

func (e *MissingDeadLettersError) Error() string {
	return "store: no dead letter for execution " + strings.Join(e.ExecutionIDs, ", ")
}

func (e *MissingDeadLettersError) Unwrap() error { return ErrDeadLetterNotFound }

// Redrive re-drives dead letters in one transaction: it locks the selected
// rows and share-locks their jobs, asks fn for the firings, writes them to
// the outbox, marks the dead letters re-driven (redrive_count+1,
// redriven_at = now), appends one "redrive" audit row per job, and wakes
// the relay. With dryRun it returns the selection and plan and writes
// nothing.
//
// A filter never selects dead letters already re-driven or whose job is
// deleted or purged; explicit ids select what they name, and an id that is
// not the tenant's dead letter, or whose job was purged, aborts the
// re-drive.
func (s *Store) Redrive(ctx context.Context, tenant, actor string, sel RedriveSelection, dryRun bool, fn RedriveFunc) (RedriveResult, error) {
	var res RedriveResult
	err := s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		cands, err := selectForRedrive(ctx, tx, tenant, sel)
		if err != nil {
			return err
		}
		plan, err := fn(now, cands)
		if err != nil {
			return err
		}
		res = RedriveResult{Now: now, Candidates: cands, Plan: plan}
		if dryRun || len(plan.Firings) == 0 {
			return nil
		}
		inserted, err := insertOutbox(ctx, tx, now, plan.Firings)
		if err != nil {
			return err
		}
		res.Redriven = inserted
		if len(inserted) == 0 {
			return nil
		}
		ids := make([]string, len(inserted))
		byJob := map[string][]string{}
		var jobOrder []string
		for i, f := range inserted {
			ids[i] = f.GetExecutionId()
			if _, ok := byJob[f.GetJobId()]; !ok {
				jobOrder = append(jobOrder, f.GetJobId())
			}
			byJob[f.GetJobId()] = append(byJob[f.GetJobId()], f.GetExecutionId())
		}
		_, err = tx.Exec(ctx, `
			UPDATE dead_letters SET redrive_count = redrive_count + 1, redriven_at = $3
			WHERE tenant = $1 AND execution_id = ANY($2::uuid[])`, tenant, ids, now)
		if err != nil {
			return fmt.Errorf("store: mark dead letters re-driven: %w", err)
		}
		versions := map[string]int64{}
		for _, c := range cands {
			versions[c.Job.GetId()] = c.Job.GetVersion()
		}
		for _, jobID := range jobOrder {
			detail := cloneDetail(plan.AuditDetail)
			detail["execution_ids"] = byJob[jobID]
			detail["count"] = len(byJob[jobID])
			if err := insertAudit(ctx, tx, tenant, jobID, versions[jobID], now, Audit{Actor: actor, Action: ActionRedrive, Detail: detail}); err != nil {
				return err
			}
		}
		return notifyRelay(ctx, tx, "redrive")
	})
	return res, err
}

const redriveSelectSQL = `SELECT ` + deadLetterColumns + `,
       j.id::text, j.tenant, j.spec, j.status, j.version, j.next_fire_at, j.created_at, j.updated_at
  FROM dead_letters d JOIN jobs j ON j.id = d.job_id AND j.tenant = d.tenant
 WHERE d.tenant = $1`

func selectForRedrive(ctx context.Context, tx pgx.Tx, tenant string, sel RedriveSelection) ([]RedriveCandidate, error) {
	sql, args := redriveSelectSQL, []any{tenant}
	if len(sel.ExecutionIDs) > 0 {
		args = append(args, sel.ExecutionIDs)
		sql += ` AND d.execution_id = ANY($2::uuid[])`
	} else {
		sql += ` AND j.status <> '` + firing.JobDeletedSQL + `'`
		sql, args = sel.Filter.where(sql, args)
	}
	args = append(args, sel.Limit)
	// Oldest death first, and the same lock order in every re-drive, so
	// two concurrent ones queue rather than deadlock; the second re-reads
	// rows the first changed and skips those it re-drove.
	sql += fmt.Sprintf(` ORDER BY d.dead_at, d.execution_id LIMIT $%d FOR UPDATE OF d FOR SHARE OF j`, len(args))
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: select dead letters: %w", err)
	}
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RedriveCandidate, error) {
		var (
			c                RedriveCandidate
			id, jt, st       string
			spec             []byte
			version          int64
			next             *time.Time
			created, updated time.Time
		)
		dest := append(deadLetterDest(&c.DeadLetter), &id, &jt, &spec, &st, &version, &next, &created, &updated)
		if err := r.Scan(dest...); err != nil {
			return c, err
		}
		job, err := decodeJob(id, jt, spec, st, version, next, created, updated)
		c.Job = job
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: select dead letters: %w", err)
	}
	if len(sel.ExecutionIDs) == 0 {
		return cands, nil
	}
	found := map[string]bool{}
	for _, c := range cands {
		found[c.DeadLetter.ExecutionID] = true
	}
	var missing []string
	for _, id := range sel.ExecutionIDs {
		if !found[id] && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return cands, nil
	}
	// Named but not selected: not the tenant's dead letter, or its job is
	// gone (purged after its retention).
	var execID, jobID string
	err = tx.QueryRow(ctx, `SELECT execution_id::text, job_id::text FROM dead_letters WHERE tenant = $1 AND execution_id = ANY($2::uuid[]) LIMIT 1`,
		tenant, missing).Scan(&execID, &jobID)
	switch {
	case err == nil:
		return nil, &JobGoneError{ExecutionID: execID, JobID: jobID}
	case errors.Is(err, pgx.ErrNoRows):
		return nil, &MissingDeadLettersError{ExecutionIDs: missing}
	default:
		return nil, fmt.Errorf("store: check dead letters: %w", err)
	}
}
