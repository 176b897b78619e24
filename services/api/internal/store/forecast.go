package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/calendar"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ForecastJob is one active job as the forecast reads it: the columns that
// are authoritative (id, tenant, priority, creation) and the stored spec.
type ForecastJob struct {
	ID       uuid.UUID
	Tenant   string
	Name     string
	Priority sundialv1.Priority
	Created  time.Time
	Spec     []byte
}

// ForEachActiveJob calls fn with each active job of tenant (every tenant's
// for AllTenants), of priority when it is not UNSPECIFIED, a tenant's in id
// order, streaming: the rows are never all in memory. It stops after limit jobs
// and reports whether more were left.
func (s *Store) ForEachActiveJob(ctx context.Context, tenant string, priority sundialv1.Priority, limit int, fn func(ForecastJob) error) (more bool, err error) {
	// The (tenant, status, id) index serves a tenant's scan; the priority
	// filter rides along (a tenant's non-MEDIUM jobs have their own index,
	// but this reads the tenant's active jobs either way).
	sql := `SELECT id, tenant, name, priority, created_at, spec FROM jobs WHERE status = 'active'`
	args := []any{}
	if tenant != AllTenants {
		args = append(args, tenant)
		sql += fmt.Sprintf(` AND tenant = $%d`, len(args))
	}
	if priority != sundialv1.Priority_PRIORITY_UNSPECIFIED {
		args = append(args, int16(priority))
		sql += fmt.Sprintf(` AND priority = $%d`, len(args))
	}
	if tenant != AllTenants {
		sql += ` ORDER BY id` // the index's order: no sort
	}
	// Every tenant's: no order, so no sort of the whole table; which jobs
	// a cap leaves out is then arbitrary, and the forecast says partial.
	args = append(args, limit+1)
	sql += fmt.Sprintf(` LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("store: forecast jobs: %w", err)
	}
	defer rows.Close()
	n := 0
	var j ForecastJob
	var prio int16
	for rows.Next() {
		if n == limit {
			return true, nil
		}
		if err := rows.Scan(&j.ID, &j.Tenant, &j.Name, &prio, &j.Created, &j.Spec); err != nil {
			return false, fmt.Errorf("store: forecast jobs: %w", err)
		}
		j.Priority = sundialv1.Priority(prio)
		if err := fn(j); err != nil {
			return false, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("store: forecast jobs: %w", err)
	}
	return false, nil
}

// LoadCalendar reads one of tenant's business calendars
// (calendar.ErrNotFound when it has none of that name).
func (s *Store) LoadCalendar(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error) {
	return calendar.Load(ctx, s.pool, tenant, name)
}
