// Package calendarstore is the calendars table and its calendar_audit
// trail, which only this package writes: a tenant's business calendars
// (sundial.v1.Calendar, checked by package calendar) created, read,
// updated and deleted. Update also pulls the next_fire_at of the tenant's
// active jobs that use the calendar back to their first unstaged instant,
// so an instant the edit brings back (a holiday removed) is not passed
// over; Delete refuses a calendar jobs still use. The prefetcher reads a
// calendar with Load inside its staging transaction, so an edit applies to
// every instant staged after the edit commits.
package calendarstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

var (
	// ErrNotFound: the tenant has no calendar of that name (another
	// tenant's calendar is reported exactly so).
	ErrNotFound = errors.New("calendar: not found")
	// ErrExists: the tenant already has a calendar of that name.
	ErrExists = errors.New("calendar: already exists")
	// ErrVersion: an update's expected version is not the stored one.
	ErrVersion = errors.New("calendar: version mismatch")
	// ErrTooMany: the tenant has MaxPerTenant calendars already.
	ErrTooMany = errors.New("calendar: too many calendars")
)

// MaxPerTenant bounds a tenant's calendars, so one tenant cannot fill the
// table (each holds up to calendar.MaxHolidays dates).
const MaxPerTenant = 1000

// InUseError refuses deleting a calendar that jobs still use.
type InUseError struct {
	// Jobs are some of the jobs (ids) that use it; Count is how many.
	Jobs  []string
	Count int
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("calendar: used by %d job(s) that are not deleted, e.g. %v", e.Count, e.Jobs)
}

// Querier is what Load needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Load reads one of tenant's calendars. The prefetcher calls it inside its
// staging transaction.
func Load(ctx context.Context, q Querier, tenant, name string) (*sundialv1.Calendar, error) {
	var (
		spec             []byte
		version          int64
		created, updated time.Time
	)
	err := q.QueryRow(ctx, `SELECT spec, version, created_at, updated_at FROM calendars WHERE tenant = $1 AND name = $2`,
		tenant, name).Scan(&spec, &version, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("calendar: load %s: %w", name, err)
	}
	return decode(tenant, name, spec, version, created, updated)
}

func decode(tenant, name string, spec []byte, version int64, created, updated time.Time) (*sundialv1.Calendar, error) {
	c := &sundialv1.Calendar{}
	if err := proto.Unmarshal(spec, c); err != nil {
		return nil, fmt.Errorf("calendar: decode %s: %w", name, err)
	}
	c.Name, c.Tenant, c.Version = name, tenant, version
	c.CreateTime, c.UpdateTime = timestamppb.New(created), timestamppb.New(updated)
	return c, nil
}

// encode keeps only what the columns do not say.
func encode(c *sundialv1.Calendar) ([]byte, error) {
	s := &sundialv1.Calendar{Description: c.GetDescription(), Holidays: c.GetHolidays(), Weekend: c.GetWeekend()}
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}

// Audit says who makes a change and what the caller adds to its
// calendar_audit row (an import: that it was one). Detail must not hold
// secrets; a calendar holds none.
type Audit struct {
	Actor  string
	Detail map[string]any
}

// Audit actions: what a calendar_audit row records.
const (
	ActionCreate = "create"
	ActionUpdate = "update"
	ActionDelete = "delete"
)

func insertAudit(ctx context.Context, tx pgx.Tx, tenant, name, action string, version int64, a Audit, detail map[string]any) error {
	all := make(map[string]any, len(a.Detail)+len(detail))
	maps.Copy(all, a.Detail)
	maps.Copy(all, detail)
	if err := audittrail.Append(ctx, tx, audittrail.Record{Kind: audittrail.KindCalendar, Tenant: tenant, Subject: name,
		Actor: a.Actor, Action: action, Version: version, Detail: all}); err != nil {
		return fmt.Errorf("calendar: %w", err)
	}
	return nil
}

// AuditEntry is a row of calendar_audit.
type AuditEntry struct {
	// Seq orders the trail (and pages it).
	Seq      int64
	Calendar string
	Actor    string
	Action   string
	Version  int64
	At       time.Time
	// Detail is the row's JSON object.
	Detail string
}

// ListAudit returns up to limit of tenant's calendar audit rows (of the
// calendar name; "" for all), newest first, those before seq (0: from
// the newest).
func (s *Store) ListAudit(ctx context.Context, tenant, name string, before int64, limit int) ([]AuditEntry, error) {
	es, err := audittrail.Trail(ctx, s.pool, audittrail.KindCalendar, tenant, name, before, limit)
	if err != nil {
		return nil, fmt.Errorf("calendar: list audit: %w", err)
	}
	out := make([]AuditEntry, len(es))
	for i, e := range es {
		out[i] = AuditEntry{Seq: e.Seq, Calendar: e.Subject, Actor: e.Actor, Action: e.Action, Version: e.Version, At: e.At, Detail: e.Detail}
	}
	return out, nil
}

// Store writes and reads the calendars table and calendar_audit (the one
// writer of both).
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a store over pool (whose search_path picks the schema).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Create stores a new calendar of tenant, with its audit row, in one
// transaction; calendar.Validate it first.
func (s *Store) Create(ctx context.Context, tenant string, c *sundialv1.Calendar, a Audit) (*sundialv1.Calendar, error) {
	spec, err := encode(c)
	if err != nil {
		return nil, err
	}
	var created time.Time
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The count and the insert are one statement; two creates racing
		// past the limit together can overshoot it by one each, which is
		// harmless.
		err := tx.QueryRow(ctx, `INSERT INTO calendars (tenant, name, spec)
SELECT $1, $2, $3 WHERE (SELECT count(*) FROM calendars WHERE tenant = $1) < $4
RETURNING created_at`, tenant, c.GetName(), spec, MaxPerTenant).Scan(&created)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return ErrExists
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %d is the limit per tenant", ErrTooMany, MaxPerTenant)
		}
		if err != nil {
			return fmt.Errorf("calendar: create: %w", err)
		}
		return insertAudit(ctx, tx, tenant, c.GetName(), ActionCreate, 1, a, map[string]any{"holidays": len(c.GetHolidays())})
	})
	if err != nil {
		return nil, err
	}
	return decode(tenant, c.GetName(), spec, 1, created, created)
}

// Get reads one calendar of tenant.
func (s *Store) Get(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error) {
	return Load(ctx, s.pool, tenant, name)
}

// List returns up to limit of tenant's calendars with names after `after`,
// in name order.
func (s *Store) List(ctx context.Context, tenant, after string, limit int) ([]*sundialv1.Calendar, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, spec, version, created_at, updated_at FROM calendars
 WHERE tenant = $1 AND name > $2 ORDER BY name LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("calendar: list: %w", err)
	}
	var out []*sundialv1.Calendar
	for rows.Next() {
		var (
			name             string
			spec             []byte
			version          int64
			created, updated time.Time
		)
		if err := rows.Scan(&name, &spec, &version, &created, &updated); err != nil {
			return nil, fmt.Errorf("calendar: list: %w", err)
		}
		c, err := decode(tenant, name, spec, version, created, updated)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("calendar: list: %w", err)
	}
	return out, nil
}

// UpdateFunc turns the stored calendar into the new one (calendar.Validate the
// result); returning an error aborts the update.
type UpdateFunc func(cur *sundialv1.Calendar) (*sundialv1.Calendar, error)

// Update replaces one of tenant's calendars with what fn returns, bumps its
// version, and pulls back the next_fire_at of tenant's active jobs that use
// it to their first unstaged instant from now (see pullBack), all in one
// transaction with its audit row. expectedVersion 0 accepts any version.
func (s *Store) Update(ctx context.Context, tenant, name string, expectedVersion int64, a Audit, fn UpdateFunc) (*sundialv1.Calendar, int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("calendar: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var (
		spec             []byte
		version          int64
		created, updated time.Time
	)
	err = tx.QueryRow(ctx, `SELECT spec, version, created_at, updated_at FROM calendars WHERE tenant = $1 AND name = $2 FOR UPDATE`,
		tenant, name).Scan(&spec, &version, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("calendar: update: %w", err)
	}
	if expectedVersion != 0 && expectedVersion != version {
		return nil, 0, fmt.Errorf("%w: stored version is %d, expected %d", ErrVersion, version, expectedVersion)
	}
	cur, err := decode(tenant, name, spec, version, created, updated)
	if err != nil {
		return nil, 0, err
	}
	next, err := fn(cur)
	if err != nil {
		return nil, 0, err
	}
	if spec, err = encode(next); err != nil {
		return nil, 0, err
	}
	err = tx.QueryRow(ctx, `UPDATE calendars SET spec = $3, version = version + 1, updated_at = now()
 WHERE tenant = $1 AND name = $2 RETURNING version, updated_at`, tenant, name, spec).Scan(&version, &updated)
	if err != nil {
		return nil, 0, fmt.Errorf("calendar: update: %w", err)
	}
	users, _, err := usersOf(ctx, tx, tenant, name, true)
	if err != nil {
		return nil, 0, err
	}
	pulled, err := pullBack(ctx, tx, users)
	if err != nil {
		return nil, 0, err
	}
	if err := insertAudit(ctx, tx, tenant, name, ActionUpdate, version, a, map[string]any{"holidays": len(next.GetHolidays()), "jobs_rescheduled": pulled}); err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, fmt.Errorf("calendar: update: commit: %w", err)
	}
	out, err := decode(tenant, name, spec, version, created, updated)
	return out, pulled, err
}

// Delete removes one of tenant's calendars unless a job that is not
// deleted uses it (*InUseError), with its audit row.
func (s *Store) Delete(ctx context.Context, tenant, name string, a Audit) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("calendar: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var version int64
	err = tx.QueryRow(ctx, `SELECT version FROM calendars WHERE tenant = $1 AND name = $2 FOR UPDATE`, tenant, name).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("calendar: delete: %w", err)
	}
	users, n, err := usersOf(ctx, tx, tenant, name, false)
	if err != nil {
		return err
	}
	if n > 0 {
		ids := make([]string, 0, len(users))
		for _, u := range users {
			ids = append(ids, u.String())
		}
		return &InUseError{Jobs: ids, Count: n}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM calendars WHERE tenant = $1 AND name = $2`, tenant, name); err != nil {
		return fmt.Errorf("calendar: delete: %w", err)
	}
	if err := insertAudit(ctx, tx, tenant, name, ActionDelete, version, a, nil); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("calendar: delete: commit: %w", err)
	}
	return nil
}

// maxListedUsers bounds the job ids an InUseError carries.
const maxListedUsers = 5

// usersOf finds tenant's jobs whose schedule names the calendar: active
// ones only, or every one not deleted. The calendar is inside each job's
// serialized spec, so this reads the tenant's jobs; calendar edits are
// rare and a tenant's jobs are bounded by its quota. It returns every
// active user (activeOnly) or the first few, and the count.
func usersOf(ctx context.Context, tx pgx.Tx, tenant, name string, activeOnly bool) ([]uuid.UUID, int, error) {
	q := `SELECT id, spec FROM jobs WHERE tenant = $1 AND status <> '` + firing.JobDeletedSQL + `'`
	if activeOnly {
		q = `SELECT id, spec FROM jobs WHERE tenant = $1 AND status = '` + firing.JobActiveSQL + `' AND next_fire_at IS NOT NULL`
	}
	rows, err := tx.Query(ctx, q, tenant)
	if err != nil {
		return nil, 0, fmt.Errorf("calendar: jobs using %s: %w", name, err)
	}
	defer rows.Close()
	var (
		out []uuid.UUID
		n   int
	)
	for rows.Next() {
		var (
			id   uuid.UUID
			spec []byte
		)
		if err := rows.Scan(&id, &spec); err != nil {
			return nil, 0, fmt.Errorf("calendar: jobs using %s: %w", name, err)
		}
		job := &sundialv1.Job{}
		if err := proto.Unmarshal(spec, job); err != nil {
			return nil, 0, fmt.Errorf("calendar: job %s: decode spec: %w", id, err)
		}
		if job.GetSchedule().GetCalendar() != name {
			continue
		}
		n++
		if activeOnly || len(out) < maxListedUsers {
			out = append(out, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("calendar: jobs using %s: %w", name, err)
	}
	return out, n, nil
}

// pullBack sets each job's next_fire_at to the later of now and just after
// its last staged slot, when that is earlier. The prefetcher then claims
// the job at once and stages from its first instant under the new calendar
// that is not staged yet (slots.Compute looks for the first slot at or
// after next_fire_at): an instant the edit removed or moved is not fired
// from a stale next_fire_at, and one it restored (a holiday taken out) is
// not passed over. Instants already staged are kept, and nothing before
// now is replayed.
func pullBack(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `UPDATE jobs
   SET next_fire_at = GREATEST(last_slot_at + interval '1 microsecond', now())
 WHERE id = ANY($1::uuid[]) AND status = '`+firing.JobActiveSQL+`' AND next_fire_at IS NOT NULL
   AND next_fire_at > GREATEST(last_slot_at + interval '1 microsecond', now())`, ids)
	if err != nil {
		return 0, fmt.Errorf("calendar: pull back next_fire_at: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
