package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/domain/forecast"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// ForecastCount is one row of forecast_schedules (migration 00027): how
// many active jobs of a tenant and priority share a schedule and jitter.
type ForecastCount struct {
	Tenant   string
	Priority sundialv1.Priority
	// Schedule and Jitter are the encoded fields of the jobs' specs.
	Schedule, Jitter []byte
	// Anchor is the creation second of an anchored schedule's jobs, nil
	// otherwise; JobID, for a schedule with H, one of the jobs, whose H
	// lands where all of theirs do (the fold keys them so), nil otherwise.
	Anchor *time.Time
	JobID  *uuid.UUID
	Jobs   int64
	// Sample is up to 20 of the jobs.
	Sample []uuid.UUID
}

// forecastFoldLock serialises folds, so a forecast that folds after
// another sees every change that one moved (see ForEachForecastCount).
const forecastFoldLock = `SELECT pg_advisory_xact_lock(hashtextextended('sundial.forecast/fold', 0))`

// foldedChange is the net of the changes of one forecast_schedules key.
type foldedChange struct {
	tenant, status   string
	priority         int16
	digest, schedule []byte
	jitter           []byte
	anchor           *time.Time
	jobID            *uuid.UUID
	jobs             int64
	added, removed   []uuid.UUID
}

// The fold's three statements, each over every key changed (parallel
// arrays, one element per key, in key order, so two folds would take the
// rows' locks in the same order): the jobs removed leave the rows'
// samples, the net changes are added (with up to 20 of the jobs added,
// while there is room), and rows left with no jobs are deleted. A sample
// travels as its ids joined by commas: arrays of arrays must be even.
const (
	foldUnsampleSQL = `
UPDATE forecast_schedules AS f
   SET sample = ARRAY(SELECT x FROM unnest(f.sample) AS x WHERE x <> ALL(string_to_array(u.removed, ',')::uuid[]))
  FROM unnest($1::text[], $2::text[], $3::int2[], $4::bytea[], $5::text[]) AS u(tenant, status, priority, digest, removed)
 WHERE f.tenant = u.tenant AND f.status = u.status AND f.priority = u.priority AND f.digest = u.digest`
	foldAddSQL = `
INSERT INTO forecast_schedules AS f (tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, sample, h_resolved)
SELECT u.tenant, u.status, u.priority, u.digest, u.schedule, u.jitter, u.anchor, u.job_id, u.jobs,
       coalesce(string_to_array(nullif(u.sample, ''), ',')::uuid[], '{}'), u.h_resolved
  FROM unnest($1::text[], $2::text[], $3::int2[], $4::bytea[], $5::bytea[], $6::bytea[], $7::timestamptz[], $8::uuid[], $9::int8[], $10::text[], $11::bool[])
       WITH ORDINALITY AS u(tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, sample, h_resolved, n)
 ORDER BY u.n
ON CONFLICT (tenant, status, priority, digest) DO UPDATE
   SET jobs = f.jobs + EXCLUDED.jobs,
       sample = (f.sample || EXCLUDED.sample)[1:20]`
	foldDropSQL = `
DELETE FROM forecast_schedules AS f
 USING unnest($1::text[], $2::text[], $3::int2[], $4::bytea[]) AS u(tenant, status, priority, digest)
 WHERE f.tenant = u.tenant AND f.status = u.status AND f.priority = u.priority AND f.digest = u.digest AND f.jobs <= 0`
)

// ForEachForecastCount calls fn with each row of forecast_schedules for
// tenant's (every tenant's for AllTenants) active jobs, of priority when
// it is not UNSPECIFIED. It first folds the changes the jobs' triggers
// recorded since the last forecast into the counts, in the same
// transaction, so the rows count every job committed before it began.
func (s *Store) ForEachForecastCount(ctx context.Context, tenant string, priority sundialv1.Priority, fn func(ForecastCount) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := foldForecastChanges(ctx, tx); err != nil {
			return err
		}
		sql := `SELECT tenant, priority, schedule, jitter, anchor, job_id, jobs, sample
		          FROM forecast_schedules WHERE status = 'active' AND jobs > 0`
		args := []any{}
		if tenant != AllTenants {
			args = append(args, tenant)
			sql += fmt.Sprintf(` AND tenant = $%d`, len(args))
		}
		if priority != sundialv1.Priority_PRIORITY_UNSPECIFIED {
			args = append(args, int16(priority))
			sql += fmt.Sprintf(` AND priority = $%d`, len(args))
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("store: forecast counts: %w", err)
		}
		defer rows.Close()
		var c ForecastCount
		var prio int16
		for rows.Next() {
			if err := rows.Scan(&c.Tenant, &prio, &c.Schedule, &c.Jitter, &c.Anchor, &c.JobID, &c.Jobs, &c.Sample); err != nil {
				return fmt.Errorf("store: forecast counts: %w", err)
			}
			c.Priority = sundialv1.Priority(prio)
			if err := fn(c); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: forecast counts: %w", err)
		}
		return nil
	})
}

// foldBatch is how many change rows one round of the fold drains: a
// range of the changes' primary key (no read of the whole queue, however
// long it grew), and a bounded amount in memory.
const foldBatch = 1000

// foldKeys is how many keys' sums the fold holds before writing them.
const foldKeys = 5000

// foldForecastChanges moves forecast_schedule_changes into
// forecast_schedules, foldBatch changes at a time in the order they were
// written: each key's changes summed, written in key order (two folds
// never wait on each other in a cycle), rows left at no jobs deleted.
//
// The triggers key a job whose cron has H by the job itself (its H is
// hashed from its id, which their SQL does not do); the fold keys it by
// where its H lands (hashedKey), so the jobs whose H lands on the same
// values share one row and a fleet of H jobs is read as at most one row
// per place its H can land. Rows of H jobs still keyed by the job —
// written before migration 00032 — are re-keyed first, so a job's
// removal, keyed the new way, always finds the row its addition went to.
func foldForecastChanges(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, forecastFoldLock); err != nil {
		return fmt.Errorf("store: forecast fold lock: %w", err)
	}
	dec := forecast.NewDecoder(nil)
	// The rounds' sums are written when they span foldKeys keys or
	// everything is read: a fleet of H jobs, a change row per job, lands
	// on a few thousand keys at most, each written once instead of once a
	// round. Each round starts past the last one's rows: the entries it
	// deleted stay in the index until this transaction ends, and a round
	// starting from the head would walk them all again.
	byKey := map[string]*foldedChange{}
	flush := func(all bool) error {
		if !all && len(byKey) < foldKeys {
			return nil
		}
		err := applyFolded(ctx, tx, byKey)
		clear(byKey)
		return err
	}
	// Rows of H jobs keyed by the job, first: their additions are summed
	// (and written) before any removal the queue holds for the same jobs.
	var from rowKey
	for {
		n, last, err := rekeyHashedRows(ctx, tx, dec, from, byKey)
		if err == nil {
			err = flush(false)
		}
		if err != nil {
			return err
		}
		if n < foldBatch {
			break
		}
		from = last
	}
	after := int64(-1)
	for {
		n, last, err := foldForecastBatch(ctx, tx, dec, after, byKey)
		if err == nil {
			err = flush(n < foldBatch)
		}
		if err != nil || n < foldBatch {
			return err
		}
		after = last
	}
}

// rowKey is a forecast_schedules row's primary key.
type rowKey struct {
	tenant, status string
	priority       int16
	digest         []byte
}

func (k rowKey) compare(o rowKey) int {
	return cmp.Or(cmp.Compare(k.tenant, o.tenant), cmp.Compare(k.status, o.status),
		cmp.Compare(k.priority, o.priority), slices.Compare(k.digest, o.digest))
}

// rekeyHashedRows takes up to foldBatch rows of H jobs keyed by the job,
// after the key from, out of forecast_schedules and sums them into byKey
// keyed by where their H lands; it says how many it took and the last
// one's key.
func rekeyHashedRows(ctx context.Context, tx pgx.Tx, dec *forecast.Decoder, from rowKey, byKey map[string]*foldedChange) (int, rowKey, error) {
	rows, err := tx.Query(ctx, `DELETE FROM forecast_schedules
		WHERE (tenant, status, priority, digest) IN (
		      SELECT tenant, status, priority, digest FROM forecast_schedules
		       WHERE job_id IS NOT NULL AND NOT h_resolved AND (tenant, status, priority, digest) > ($2, $3, $4, $5)
		       ORDER BY tenant, status, priority, digest LIMIT $1)
		RETURNING tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, sample`,
		foldBatch, from.tenant, from.status, from.priority, append([]byte{}, from.digest...)) // never NULL: a NULL compares as nothing
	if err != nil {
		return 0, from, fmt.Errorf("store: forecast fold: re-key H rows: %w", err)
	}
	read, last := 0, from
	for rows.Next() {
		read++
		var c foldedChange
		if err := rows.Scan(&c.tenant, &c.status, &c.priority, &c.digest, &c.schedule, &c.jitter, &c.anchor, &c.jobID, &c.jobs, &c.added); err != nil {
			rows.Close()
			return 0, from, fmt.Errorf("store: forecast fold: re-key H rows: %w", err)
		}
		if k := (rowKey{c.tenant, c.status, c.priority, c.digest}); k.compare(last) > 0 {
			last = k
		}
		add(byKey, dec, c, c.added)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, from, fmt.Errorf("store: forecast fold: re-key H rows: %w", err)
	}
	return read, last, nil
}

// foldForecastBatch takes the oldest foldBatch changes after the change
// numbered after out of the queue, sums them into byKey, and says how
// many there were and the last one's number.
func foldForecastBatch(ctx context.Context, tx pgx.Tx, dec *forecast.Decoder, after int64, byKey map[string]*foldedChange) (int, int64, error) {
	rows, err := tx.Query(ctx, `DELETE FROM forecast_schedule_changes
		WHERE seq = ANY(ARRAY(SELECT seq FROM forecast_schedule_changes WHERE seq > $2 ORDER BY seq LIMIT $1))
		RETURNING seq, tenant, status, priority, digest, schedule, jitter, anchor, job_id, jobs, ids`, foldBatch, after)
	if err != nil {
		return 0, 0, fmt.Errorf("store: forecast fold: %w", err)
	}
	read := 0
	last := after
	for rows.Next() {
		read++
		var c foldedChange
		var ids []uuid.UUID
		var seq int64
		if err := rows.Scan(&seq, &c.tenant, &c.status, &c.priority, &c.digest, &c.schedule, &c.jitter, &c.anchor, &c.jobID, &c.jobs, &ids); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("store: forecast fold: %w", err)
		}
		last = max(last, seq)
		add(byKey, dec, c, ids)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("store: forecast fold: %w", err)
	}
	return read, last, nil
}

// add sums a change of c.jobs jobs (ids: the ones it names) into byKey,
// under its key — for H jobs, where their H lands.
func add(byKey map[string]*foldedChange, dec *forecast.Decoder, c foldedChange, ids []uuid.UUID) {
	delta := c.jobs
	if c.jobID != nil {
		c.digest = hashedDigest(dec, c)
	}
	k := fmt.Sprintf("%s\x00%s\x00%d\x00%s", c.tenant, c.status, c.priority, c.digest)
	f := byKey[k]
	if f == nil {
		f = &c
		f.jobs, f.added, f.removed = 0, nil, nil
		byKey[k] = f
	}
	f.jobs += delta
	if delta > 0 {
		f.added = append(f.added, ids...)
	} else {
		f.removed = append(f.removed, ids...)
	}
}

// hashedDigest is the key of the H job c names: the SHA-256 of its
// schedule, jitter and anchor, as the triggers', with where its H lands
// (forecast.Decoder.HashedKey) in place of the job's id, so every job of
// that schedule whose H lands there shares it. A schedule the decoder
// cannot read keeps the triggers' key, one row per job, which the
// forecast counts as failed; it is not re-keyed again (every row of H
// jobs the fold writes is h_resolved).
func hashedDigest(dec *forecast.Decoder, c foldedChange) []byte {
	hk, err := dec.HashedKey(c.schedule, c.jobID.String())
	if err != nil || hk == "" {
		return c.digest
	}
	h := sha256.New()
	h.Write([]byte("h\x00"))
	h.Write(c.schedule)
	h.Write([]byte{0})
	h.Write(c.jitter)
	h.Write([]byte{0})
	if c.anchor != nil {
		fmt.Fprint(h, c.anchor.Unix())
	}
	h.Write([]byte{0})
	h.Write([]byte(hk))
	return h.Sum(nil)
}

// applyFolded writes the summed changes of byKey: the jobs removed leave
// the rows' samples, the net changes are added, rows left with no jobs
// are deleted — in key order.
func applyFolded(ctx context.Context, tx pgx.Tx, byKey map[string]*foldedChange) error {
	if len(byKey) == 0 {
		return nil
	}
	folded := make([]*foldedChange, 0, len(byKey))
	for _, f := range byKey {
		folded = append(folded, f)
	}
	slices.SortFunc(folded, func(a, b *foldedChange) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.status, b.status),
			cmp.Compare(a.priority, b.priority), slices.Compare(a.digest, b.digest))
	})
	n := len(folded)
	var (
		tenants, statuses = make([]string, n), make([]string, n)
		priorities        = make([]int16, n)
		digests, scheds   = make([][]byte, n), make([][]byte, n)
		jitters           = make([][]byte, n)
		anchors           = make([]*time.Time, n)
		jobIDs            = make([]*uuid.UUID, n)
		jobs              = make([]int64, n)
		samples, removals = make([]string, n), make([]string, n)
		resolved          = make([]bool, n)
		unsample          bool
	)
	for i, f := range folded {
		removed := make(map[uuid.UUID]bool, len(f.removed))
		for _, id := range f.removed {
			removed[id] = true
		}
		var sample []string
		for _, id := range f.added {
			if !removed[id] && len(sample) < 20 {
				sample = append(sample, id.String())
			}
		}
		var gone []string
		for id := range removed {
			gone = append(gone, id.String())
		}
		unsample = unsample || len(gone) > 0
		tenants[i], statuses[i], priorities[i], digests[i] = f.tenant, f.status, f.priority, f.digest
		scheds[i], jitters[i], anchors[i], jobIDs[i], jobs[i] = f.schedule, f.jitter, f.anchor, f.jobID, f.jobs
		// Every row of H jobs the fold writes is keyed by where their H
		// lands (or, undecodable, stays the one job's and is final).
		samples[i], removals[i], resolved[i] = strings.Join(sample, ","), strings.Join(gone, ","), f.jobID != nil
	}
	if unsample {
		if _, err := tx.Exec(ctx, foldUnsampleSQL, tenants, statuses, priorities, digests, removals); err != nil {
			return fmt.Errorf("store: forecast fold: samples: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, foldAddSQL, tenants, statuses, priorities, digests, scheds, jitters, anchors, jobIDs, jobs, samples, resolved); err != nil {
		return fmt.Errorf("store: forecast fold: counts: %w", err)
	}
	if _, err := tx.Exec(ctx, foldDropSQL, tenants, statuses, priorities, digests); err != nil {
		return fmt.Errorf("store: forecast fold: empty rows: %w", err)
	}
	return nil
}

// JobNames returns the names of the jobs ids that exist, by id.
func (s *Store) JobNames(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	names := make(map[uuid.UUID]string, len(ids))
	if len(ids) == 0 {
		return names, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, name FROM jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: job names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("store: job names: %w", err)
		}
		names[id] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: job names: %w", err)
	}
	return names, nil
}

// LoadCalendar reads one of tenant's business calendars
// (calendarstore.ErrNotFound when it has none of that name).
func (s *Store) LoadCalendar(ctx context.Context, tenant, name string) (*sundialv1.Calendar, error) {
	return calendarstore.Load(ctx, s.pool, tenant, name)
}
