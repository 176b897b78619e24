// Package store is the api's Postgres access: jobs, the outbox rows the api
// writes itself (manual triggers, backfills, re-drives), dead letters, the
// audit trail, and the ledger_pending rows that record firings a change
// dropped.
//
// Each exported operation is one transaction. The decisions inside it (what
// a new job looks like, what a change does, which firing a trigger stages)
// belong to the caller, passed in as a function that receives the database
// clock's reading for that transaction: Postgres now() is the clock for every
// scheduling decision, so two api replicas with skewed clocks still compute
// the same next_fire_at.
//
// A job is stored as its protobuf definition (jobs.spec) plus the columns
// queries filter, order or lock on. The columns are authoritative for status,
// version, next_fire_at and the timestamps: the prefetcher advances
// next_fire_at and completes jobs without rewriting spec, so the store
// overlays those columns on the decoded spec when it reads a job.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// notifyIfScheduled wakes the prefetcher for an active job with a slot.
func notifyIfScheduled(ctx context.Context, tx jobwake.Execer, job *sundialv1.Job) error {
	if job.GetStatus() != sundialv1.JobStatus_JOB_STATUS_ACTIVE || job.GetNextFireTime() == nil {
		return nil
	}
	return jobwake.Notify(ctx, tx, job.GetId())
}

// ErrNotFound is returned when no job with the id belongs to the tenant.
var ErrNotFound = errors.New("store: job not found")

// ErrDeadLetterNotFound is returned when no dead letter with the execution
// id belongs to the tenant.
var ErrDeadLetterNotFound = errors.New("store: dead letter not found")

// Store is the Postgres-backed job store.
type Store struct {
	pool *pgxpool.Pool
	// shift maps the database clock's reading to the one transactions use;
	// the identity but in tests (WithClockShift).
	shift func(time.Time) time.Time
	// onCreate runs in each create's transaction (WithCreateHook).
	onCreate CreateHook
}

// CreateHook runs inside the transaction of every create that inserts a
// job, after the insert: what a tenant needs from its first job on is made
// there, committed with the job or not at all. An error aborts the create.
type CreateHook func(ctx context.Context, tx pgx.Tx, tenant string) error

// WithCreateHook runs fn in every create's transaction. The api gives the
// signing keys' (signingkey.Store.EnsureTx): a tenant's first job makes
// its signing key, so no request of it is signed with a shared secret.
func WithCreateHook(fn CreateHook) Option {
	return func(s *Store) { s.onCreate = fn }
}

// Option configures a Store.
type Option func(*Store)

// WithClockShift makes every transaction see shift(now()) instead of the
// database clock's reading, for what the store decides from it (creation
// instants, idempotency-key expiry, the now handed to decision functions).
// It exists so tests can move time forward, hours at once, without
// sleeping; SQL that calls now() itself is not shifted.
func WithClockShift(shift func(time.Time) time.Time) Option {
	return func(s *Store) { s.shift = shift }
}

// New returns a store over pool; the pool's search_path picks the schema.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, shift: func(t time.Time) time.Time { return t }}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ping checks Postgres answers (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// jobColumns is what every job read selects, in scanJob's order.
const jobColumns = `id::text, tenant, spec, status, version, next_fire_at, created_at, updated_at, ` + runsColumn

type rowScanner interface{ Scan(dest ...any) error }

func scanJob(r rowScanner) (*sundialv1.Job, error) {
	var (
		id, tenant, status string
		spec               []byte
		version            int64
		next               *time.Time
		created, updated   time.Time
		runs               int64
	)
	if err := r.Scan(&id, &tenant, &spec, &status, &version, &next, &created, &updated, &runs); err != nil {
		return nil, err
	}
	job, err := decodeJob(id, tenant, spec, status, version, next, created, updated)
	if err != nil {
		return nil, err
	}
	setRemainingRuns(job, runs)
	return job, nil
}

// decodeJob is the job of jobColumns' values: spec with the authoritative
// columns overlaid.
func decodeJob(id, tenant string, spec []byte, status string, version int64, next *time.Time, created, updated time.Time) (*sundialv1.Job, error) {
	job := &sundialv1.Job{}
	if err := proto.Unmarshal(spec, job); err != nil {
		return nil, fmt.Errorf("store: job %s: decode spec: %w", id, err)
	}
	job.Id, job.Tenant, job.Version = id, tenant, version
	job.Status = firing.JobStatusFromSQL(status)
	job.CreateTime, job.UpdateTime = timestamppb.New(created), timestamppb.New(updated)
	job.NextFireTime = nil
	if next != nil {
		job.NextFireTime = timestamppb.New(*next)
	}
	return job, nil
}

// encodeSpec is the jobs.spec of job (jobspec.StoredSpec).
func encodeSpec(job *sundialv1.Job) ([]byte, error) {
	b, err := jobspec.StoredSpec(job)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return b, nil
}

func nullableTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx, now time.Time) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return fmt.Errorf("store: read database clock: %w", err)
		}
		return fn(tx, s.shift(now).UTC())
	})
}

// BuildFunc returns the complete job to insert, given the database clock's
// reading and the tenant's usage (counted only as far as CreateOptions.Usage
// asks): id, tenant, status, version, times and next_fire_time included. An
// error aborts the transaction, so a refused create (a quota) writes
// nothing.
type BuildFunc func(now time.Time, usage Usage) (*sundialv1.Job, error)

// UsageQuery says what a create counts for the tenant's quotas. Zero fields
// count nothing.
type UsageQuery struct {
	// JobsUpTo counts the tenant's jobs that are not deleted, stopping at
	// this many (a tenant far below its limit costs a short count).
	JobsUpTo int
	// CreatedWithin and CreatedUpTo count the tenant's jobs created in the
	// last CreatedWithin (by the database clock), stopping at CreatedUpTo.
	CreatedWithin time.Duration
	CreatedUpTo   int
}

// Usage is what UsageQuery counted, under the tenant's quota lock.
type Usage struct {
	Jobs            int
	CreatedRecently int
}

// CreateOptions are a create's parameters beside the job.
type CreateOptions struct {
	// IdempotencyKey, if not empty, makes a repeated create return the job
	// the first one made, for IdempotencyTTL from that create.
	IdempotencyKey string
	// RequestHash identifies the request that used IdempotencyKey: a
	// repeat whose hash differs is refused with *IdempotencyMismatchError.
	// Empty: not compared.
	RequestHash []byte
	// IdempotencyTTL is how long a key lasts from the create that used
	// it; after that the key is free to create another job. Required with
	// a key.
	IdempotencyTTL time.Duration
	// Actor is recorded in the job's audit trail.
	Actor string
	// Usage is what to count for the quotas before Build runs.
	Usage UsageQuery
}

// quotaLock serializes a tenant's creates across every api replica for the
// rest of the transaction, so two creates cannot both see room for one more
// job. It is a transaction-level advisory lock on a hash of the tenant.
const quotaLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('sundial.quota/' || $1, 0))`

// IdempotencyMismatchError refuses a create whose idempotency key the
// tenant used, within the key's lifetime, for a different request.
type IdempotencyMismatchError struct {
	// JobID is the job the key created; CreatedAt when, and ExpiresAt
	// when the key becomes free.
	JobID                string
	CreatedAt, ExpiresAt time.Time
}

func (e *IdempotencyMismatchError) Error() string {
	return fmt.Sprintf("store: idempotency key already created job %s with a different request", e.JobID)
}

// Create inserts the job build returns, with its "create" audit row, in one
// transaction. With a non-empty idempotency key that the tenant used less
// than opts.IdempotencyTTL ago, it returns the job that key created and
// existed=true, without calling build or writing anything (a replay is not
// subject to quotas) — or, when the request hashes differ, an
// *IdempotencyMismatchError. A key older than that is taken off the job it
// created (which is otherwise untouched) and creates a new one.
func (s *Store) Create(ctx context.Context, tenant string, opts CreateOptions, build BuildFunc) (job *sundialv1.Job, existed bool, err error) {
	idempotencyKey := opts.IdempotencyKey
	if idempotencyKey != "" && opts.IdempotencyTTL <= 0 {
		return nil, false, fmt.Errorf("store: an idempotency key needs a positive TTL, got %s", opts.IdempotencyTTL)
	}
	err = s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		// Keys created at or before this instant have expired.
		expiredAt := now.Add(-opts.IdempotencyTTL)
		if idempotencyKey != "" {
			prev, err := s.lookUpKey(ctx, tx, tenant, idempotencyKey, expiredAt, opts)
			if err == nil {
				job, existed = prev, true
				return nil
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		usage, err := countUsage(ctx, tx, tenant, opts.Usage)
		if err != nil {
			return err
		}
		j, err := build(now, usage)
		if err != nil {
			return err
		}
		if j.GetTenant() != tenant {
			return fmt.Errorf("store: built job belongs to %q, not %q", j.GetTenant(), tenant)
		}
		id, err := uuid.Parse(j.GetId())
		if err != nil {
			return fmt.Errorf("store: built job id: %w", err)
		}
		args, err := insertJobArgs(tenant, j, id, idempotencyKey, opts.RequestHash, now)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, insertJobSQL, args...)
		if err != nil {
			return fmt.Errorf("store: insert job: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A concurrent create with the same key committed first; ON
			// CONFLICT waited for it, so the row is visible now. Build
			// ran for nothing, but wrote nothing either.
			prev, err := s.lookUpKey(ctx, tx, tenant, idempotencyKey, expiredAt, opts)
			if err != nil {
				return err
			}
			job, existed = prev, true
			return nil
		}
		if err := insertAudit(ctx, tx, tenant, j.GetId(), j.GetVersion(), now, createAudit(opts.Actor, idempotencyKey, j)); err != nil {
			return err
		}
		if s.onCreate != nil {
			if err := s.onCreate(ctx, tx, tenant); err != nil {
				return err
			}
		}
		job = j
		return notifyIfScheduled(ctx, tx, j)
	})
	if err != nil {
		return nil, false, err
	}
	return job, existed, nil
}

// insertJobSQL inserts one new job; a live idempotency key another
// transaction holds makes it insert nothing (ON CONFLICT waits for that
// transaction, so its row is visible afterwards).
const insertJobSQL = `
	INSERT INTO jobs (id, tenant, name, labels, spec, priority, status, version, partition,
	                  next_fire_at, idempotency_key, idempotency_hash, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13)
	ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`

// insertJobArgs stamps the built job j with its creation instant (which
// anchors interval schedules, so spec carries it) and returns
// insertJobSQL's arguments: key and hash are stored only when key is set.
func insertJobArgs(tenant string, j *sundialv1.Job, id uuid.UUID, key string, hash []byte, now time.Time) ([]any, error) {
	j.CreateTime, j.UpdateTime = timestamppb.New(now), timestamppb.New(now)
	spec, err := encodeSpec(j)
	if err != nil {
		return nil, err
	}
	var keyArg *string
	var hashArg []byte
	if key != "" {
		keyArg = &key
		if len(hash) > 0 {
			hashArg = hash
		}
	}
	return []any{id, tenant, j.GetName(), jobspec.StoredLabels(j), spec, int16(j.GetPriority()), firing.JobStatusSQL(j.GetStatus()),
		j.GetVersion(), firing.Partition(id), nullableTime(j.GetNextFireTime()), keyArg, hashArg, now}, nil
}

// createAudit is the audit row of a new job.
func createAudit(actor, key string, j *sundialv1.Job) Audit {
	detail := map[string]any{"status": firing.JobStatusSQL(j.GetStatus())}
	if key != "" {
		detail["idempotency_key"] = key
	}
	return Audit{Actor: actor, Action: ActionCreate, Detail: detail}
}

// countUsage takes the tenant's quota lock and counts what q asks for.
// Nothing is locked or counted for an empty query.
func countUsage(ctx context.Context, tx pgx.Tx, tenant string, q UsageQuery) (Usage, error) {
	var u Usage
	if q.JobsUpTo <= 0 && q.CreatedUpTo <= 0 {
		return u, nil
	}
	if _, err := tx.Exec(ctx, quotaLockSQL, tenant); err != nil {
		return u, fmt.Errorf("store: quota lock: %w", err)
	}
	if q.JobsUpTo > 0 {
		err := tx.QueryRow(ctx, `
			SELECT count(*) FROM (SELECT 1 FROM jobs WHERE tenant = $1 AND status <> '`+firing.JobDeletedSQL+`' LIMIT $2) AS j`,
			tenant, q.JobsUpTo).Scan(&u.Jobs)
		if err != nil {
			return u, fmt.Errorf("store: count jobs: %w", err)
		}
	}
	if q.CreatedUpTo > 0 && q.CreatedWithin > 0 {
		// jobs_tenant_created makes this a short index range scan.
		err := tx.QueryRow(ctx, `
			SELECT count(*) FROM (SELECT 1 FROM jobs WHERE tenant = $1 AND created_at > now() - $2::bigint * interval '1 microsecond' LIMIT $3) AS j`,
			tenant, q.CreatedWithin.Microseconds(), q.CreatedUpTo).Scan(&u.CreatedRecently)
		if err != nil {
			return u, fmt.Errorf("store: count recent creations: %w", err)
		}
	}
	return u, nil
}

// lookUpKey returns the job the tenant's idempotency key created, if the
// key has not expired (created after expiredAt) and the request hashes
// agree; ErrNotFound if no live job holds the key, *IdempotencyMismatchError
// if the hashes differ. A job holding the key past its expiry loses it
// here (see lookUpKeys).
func (s *Store) lookUpKey(ctx context.Context, tx pgx.Tx, tenant, key string, expiredAt time.Time, opts CreateOptions) (*sundialv1.Job, error) {
	held, err := lookUpKeys(ctx, tx, tenant, []string{key}, expiredAt)
	if err != nil {
		return nil, err
	}
	k, ok := held[key]
	if !ok {
		return nil, ErrNotFound
	}
	return k.replay(opts.RequestHash, opts.IdempotencyTTL)
}

// keyedJob is a live job holding an idempotency key, with the hash of the
// request that created it.
type keyedJob struct {
	job  *sundialv1.Job
	hash []byte
}

// replay is the job a create with the key and request hash gets back, or
// *IdempotencyMismatchError when the hashes differ. A NULL hash is a key
// used before hashes were kept: nothing to compare, so it replays as it
// always did.
func (k keyedJob) replay(hash []byte, ttl time.Duration) (*sundialv1.Job, error) {
	if k.hash != nil && len(hash) > 0 && !bytes.Equal(k.hash, hash) {
		created := k.job.GetCreateTime().AsTime()
		return nil, &IdempotencyMismatchError{JobID: k.job.GetId(), CreatedAt: created, ExpiresAt: created.Add(ttl)}
	}
	return k.job, nil
}

// lookUpKeys returns the live jobs (created after expiredAt) holding any of
// the tenant's keys, by key. Jobs holding one of the keys past its expiry
// lose it first (the key's two columns cleared, nothing else: no version
// bump, no audit row), so the unique index lets the caller insert with it;
// the UPDATE locks those jobs' rows until the transaction ends.
func lookUpKeys(ctx context.Context, tx pgx.Tx, tenant string, keys []string, expiredAt time.Time) (map[string]keyedJob, error) {
	_, err := tx.Exec(ctx, `
		UPDATE jobs SET idempotency_key = NULL, idempotency_hash = NULL
		 WHERE tenant = $1 AND idempotency_key = ANY($2) AND created_at <= $3`, tenant, keys, expiredAt)
	if err != nil {
		return nil, fmt.Errorf("store: expire idempotency key: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+jobColumns+`, idempotency_key, idempotency_hash FROM jobs
		WHERE tenant = $1 AND idempotency_key = ANY($2) AND created_at > $3`, tenant, keys, expiredAt)
	if err != nil {
		return nil, fmt.Errorf("store: read jobs by idempotency key: %w", err)
	}
	defer rows.Close()
	held := map[string]keyedJob{}
	for rows.Next() {
		var (
			key  string
			hash []byte
		)
		job, err := scanJob(scanFunc(func(dest ...any) error { return rows.Scan(append(dest, &key, &hash)...) }))
		if err != nil {
			return nil, fmt.Errorf("store: read job by idempotency key: %w", err)
		}
		held[key] = keyedJob{job: job, hash: hash}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read jobs by idempotency key: %w", err)
	}
	return held, nil
}

// scanFunc adapts a function to rowScanner.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// Get returns the tenant's job id, deleted ones included.
func (s *Store) Get(ctx context.Context, tenant, id string) (*sundialv1.Job, error) {
	job, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = $2`, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get job: %w", err)
	}
	return job, nil
}

// ListQuery selects a page of a tenant's jobs in id order (creation order,
// ids being UUIDv7).
type ListQuery struct {
	// Status filters by status; unspecified means every status but deleted.
	Status sundialv1.JobStatus
	// Labels keeps jobs carrying every one of these labels.
	Labels map[string]string
	// NameContains keeps jobs whose name contains it, ignoring case.
	NameContains string
	// Priority keeps jobs of that priority; unspecified keeps every one.
	Priority sundialv1.Priority
	// NextFireFrom and NextFireBefore, when set, keep jobs whose
	// next_fire_at is in [NextFireFrom, NextFireBefore). Jobs without one
	// (paused, deleted, completed) never match a bound.
	NextFireFrom, NextFireBefore time.Time
	// After is the last id of the previous page, "" for the first.
	After string
	// Limit is the most jobs to return.
	Limit int
}

// listSQL is List's query. It orders by jobs.id, qualified: a bare "id"
// in ORDER BY names the output column, which is id::text, and sorting by
// that cannot use the (tenant, id) index — every page became a scan and
// sort of the tenant's jobs (80 ms at 200,000 jobs, seconds at millions).
func listSQL(tenant string, q ListQuery) (string, []any) {
	where, args := listWhere(tenant, q)
	sql := `SELECT ` + jobColumns + ` FROM jobs WHERE ` + where
	args = append(args, q.Limit)
	sql += fmt.Sprintf(` ORDER BY jobs.id LIMIT $%d`, len(args))
	return sql, args
}

// listWhere is the condition List and Count share: q's filters and its
// keyset position.
func listWhere(tenant string, q ListQuery) (string, []any) {
	sql := `tenant = $1`
	args := []any{tenant}
	if q.Status == sundialv1.JobStatus_JOB_STATUS_UNSPECIFIED {
		sql += ` AND status <> '` + firing.JobDeletedSQL + `'`
	} else {
		args = append(args, firing.JobStatusSQL(q.Status))
		sql += fmt.Sprintf(` AND status = $%d`, len(args))
	}
	if len(q.Labels) > 0 {
		args = append(args, q.Labels)
		sql += fmt.Sprintf(` AND labels @> $%d`, len(args))
	}
	if q.NameContains != "" {
		// LIKE with % _ \ escaped, so the text is matched as written; the
		// form lower(name) LIKE is what the trigram index jobs_name_trgm
		// serves (migration 00010), which strpos could not use.
		args = append(args, "%"+likeEscaper.Replace(strings.ToLower(q.NameContains))+"%")
		sql += fmt.Sprintf(` AND lower(name) LIKE $%d`, len(args))
	}
	if q.Priority != sundialv1.Priority_PRIORITY_UNSPECIFIED {
		// A literal, not a parameter: jobs_tenant_priority (00014) leaves
		// MEDIUM out, and the planner can use a partial index only where
		// it can prove the predicate, which a generic plan of "$n" cannot.
		sql += fmt.Sprintf(` AND priority = %d`, int16(q.Priority))
	}
	if !q.NextFireFrom.IsZero() {
		args = append(args, q.NextFireFrom)
		sql += fmt.Sprintf(` AND next_fire_at >= $%d`, len(args))
	}
	if !q.NextFireBefore.IsZero() {
		args = append(args, q.NextFireBefore)
		sql += fmt.Sprintf(` AND next_fire_at < $%d`, len(args))
	}
	if q.After != "" {
		args = append(args, q.After)
		sql += fmt.Sprintf(` AND jobs.id > $%d`, len(args))
	}
	return sql, args
}

// NameIndexable says whether the trigram index jobs_name_trgm can find
// the jobs whose name contains text. pg_trgm reads a LIKE pattern's
// trigrams from its runs of letters and digits, so a text without three
// of them in a row ("ab", "-1", "a.b") gives the index nothing to look
// up: the search would read the whole index or walk the tenant's jobs.
// Such a search goes through ListBounded instead.
func NameIndexable(text string) bool {
	run := 0
	for _, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			run++
			if run == 3 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// boundedSQL is ListBounded's query. The inner select takes the next scan
// jobs matching every filter but the name and the priority, in id order
// from the keyset position (an index range scan of (tenant, id), or of
// (tenant, status, id) with a status); the outer keeps those whose name
// and priority match, plus the last of the window (n = scan), which says
// where the next page resumes. Both stop early: the outer LIMIT ends the
// walk once the page is full.
func boundedSQL(tenant string, q ListQuery, scan int) (string, []any) {
	name, priority := q.NameContains, q.Priority
	q.NameContains, q.Priority = "", sundialv1.Priority_PRIORITY_UNSPECIFIED
	where, args := listWhere(tenant, q)
	hit := []string{"true"}
	if name != "" {
		args = append(args, "%"+likeEscaper.Replace(strings.ToLower(name))+"%")
		hit = append(hit, fmt.Sprintf(`lower(name) LIKE $%d`, len(args)))
	}
	if priority != sundialv1.Priority_PRIORITY_UNSPECIFIED {
		hit = append(hit, fmt.Sprintf(`priority = %d`, int16(priority)))
	}
	args = append(args, scan, q.Limit)
	scanArg, limitArg := len(args)-1, len(args)
	sql := fmt.Sprintf(`SELECT id::text, tenant, spec, status, version, next_fire_at, created_at, updated_at, runs_staged, hit, n = $%[1]d
FROM (SELECT jobs.id, tenant, spec, status, version, next_fire_at, created_at, updated_at, runs_staged,
             (%[4]s) AS hit, row_number() OVER (ORDER BY jobs.id) AS n
      FROM jobs WHERE %[3]s ORDER BY jobs.id LIMIT $%[1]d) AS w
WHERE hit OR n = $%[1]d
ORDER BY w.id LIMIT $%[2]d`, scanArg, limitArg, where, strings.Join(hit, " AND "))
	return sql, args
}

// ListBounded is List for a name search the trigram index cannot serve
// (NameIndexable false), and for the MEDIUM priority, which
// jobs_tenant_priority leaves out: it examines at most scan of the jobs matching q's other
// filters, in id order after q.After, and returns the matches
// among them (up to q.Limit). When it stopped at the bound, resume is the
// last id it examined, where the next page carries on; "" when it reached
// the tenant's last job or filled the page (the caller pages from the
// last job then). So a page costs at most scan rows however rare the
// text, and may hold fewer than q.Limit jobs, or none, before the end.
func (s *Store) ListBounded(ctx context.Context, tenant string, q ListQuery, scan int) (jobs []*sundialv1.Job, resume string, err error) {
	sql, args := boundedSQL(tenant, q, scan)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, tenant, status string
			spec               []byte
			version            int64
			next               *time.Time
			created, updated   time.Time
			runs               int64
			hit, last          bool
		)
		if err := rows.Scan(&id, &tenant, &spec, &status, &version, &next, &created, &updated, &runs, &hit, &last); err != nil {
			return nil, "", fmt.Errorf("store: list jobs: %w", err)
		}
		if hit && len(jobs) < q.Limit {
			j, err := decodeJob(id, tenant, spec, status, version, next, created, updated)
			if err != nil {
				return nil, "", fmt.Errorf("store: list jobs: %w", err)
			}
			setRemainingRuns(j, runs)
			jobs = append(jobs, j)
		}
		if last {
			resume = id
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: list jobs: %w", err)
	}
	if len(jobs) == q.Limit {
		resume = ""
	}
	return jobs, resume, nil
}

// likeEscaper escapes LIKE's wildcards and its escape character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Count returns how many of the tenant's jobs match q (its Limit and After
// included), counting no further than upTo: a count over every job of a
// large tenant reads them all, and a confirmation only needs to say "more
// than upTo".
func (s *Store) Count(ctx context.Context, tenant string, q ListQuery, upTo int) (int64, error) {
	where, args := listWhere(tenant, q)
	args = append(args, upTo)
	var n int64
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM jobs WHERE %s LIMIT $%d) AS j`, where, len(args)), args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count jobs: %w", err)
	}
	return n, nil
}

// List returns up to q.Limit jobs of tenant matching q, ids above q.After.
func (s *Store) List(ctx context.Context, tenant string, q ListQuery) ([]*sundialv1.Job, error) {
	sql, args := listSQL(tenant, q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	defer rows.Close()
	var jobs []*sundialv1.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list jobs: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list jobs: %w", err)
	}
	return jobs, nil
}

// MutateFunc decides a change to a job, given the database clock and the
// job as stored (locked for the transaction). It returns the job to store,
// or nil to leave the job untouched (an idempotent no-op, such as pausing a
// paused job). The store bumps the version and sets update_time itself.
type MutateFunc func(now time.Time, current *sundialv1.Job) (*sundialv1.Job, error)

// Change describes a change beside its decision: who makes it and why the
// firings it drops do not run.
type Change struct {
	// Audit is the job_audit row the change appends (its version is the
	// job's new one). The store adds "dropped_firings" to its detail, and
	// "status" {"from", "to"} when the status changes.
	Audit Audit
	// DropReason is the ledger's reason for each unpublished firing the
	// change drops, given the job as changed ("job paused").
	DropReason func(next *sundialv1.Job) string
	// ExpectedVersion, when not 0, is the version the caller read the job
	// at: Mutate refuses with a *VersionMismatchError, writing nothing, if
	// the locked row has another one (optimistic concurrency).
	ExpectedVersion int64
	// Skipped, when set, names slots that never ran which the change
	// records as SKIPPED in ledger_pending, in its transaction (a resume:
	// the slots that fell in the pause; see paused.go).
	Skipped SkippedFunc
	// SkipLocked, in MutateEach, passes over the jobs another transaction
	// holds (a prefetcher staging their chunk) instead of waiting for it:
	// each is reported with ErrBusy and nothing of it is written, for the
	// caller to change later.
	SkipLocked bool
}

// ErrBusy is MutateEach's report of a job another transaction held while
// Change.SkipLocked was set: nothing of it was written.
var ErrBusy = errors.New("store: job locked by another transaction")

// VersionMismatchError is Mutate's refusal of a change made against a
// version the job is no longer (or never was) at.
type VersionMismatchError struct {
	Expected, Current int64
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("store: job is at version %d, not the expected %d", e.Current, e.Expected)
}

// Mutated is the outcome of Mutate.
type Mutated struct {
	Job *sundialv1.Job
	// Changed is false when the MutateFunc returned nil.
	Changed bool
	// DroppedFirings is how many unpublished outbox rows of the job were
	// deleted.
	DroppedFirings int64
}

// Mutate changes the tenant's job id in one transaction: it locks the row,
// asks fn what the job becomes, writes it with version+1, deletes the job's
// outbox rows not yet published (workers skip the already-published ones by
// version), records each deleted firing as SKIPPED in ledger_pending with
// the change's reason, and appends the change's audit row. Every update,
// pause, resume and delete goes through it; a no-op writes nothing, and so
// does a change whose Change.ExpectedVersion the job is not at (even one
// that would have been a no-op).
func (s *Store) Mutate(ctx context.Context, tenant, id string, change Change, fn MutateFunc) (Mutated, error) {
	var out Mutated
	err := s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		var err error
		out, err = mutate(ctx, tx, now, tenant, id, change, fn)
		return err
	})
	return out, err
}

// Mutation is one job's outcome in MutateEach: Err is ErrNotFound or the
// error fn refused the job with (nothing of that job was written), else
// nil and Mutated says what changed.
type Mutation struct {
	ID      string
	Mutated Mutated
	Err     error
}

// MutateEach applies the same change to each of the tenant's jobs ids, in
// that order, exactly as Mutate would to each (row lock, version+1, run
// count, outbox rows dropped and recorded, audit row), in one transaction
// and four round trips in all: the rows locked with one statement, then
// every job's writes sent as one batch, then the ledger rows and audit rows
// as another. Deleting 3,000 jobs one Mutate each took 19 s on the 2-core
// machine, most of it round trips. A job fn refuses or that is gone is
// reported in its Mutation and the others go on; any other error rolls the
// whole call back, and repeating it is safe since each change is
// idempotent. It is for changes decided from the job alone (a pause, a
// delete): a change naming skipped slots, or one that completes a paused
// job, is refused.
func (s *Store) MutateEach(ctx context.Context, tenant string, ids []string, change Change, fn MutateFunc) ([]Mutation, error) {
	if change.Skipped != nil {
		return nil, errors.New("store: MutateEach does not record skipped slots; use Mutate")
	}
	var out []Mutation
	err := s.inTx(ctx, func(tx pgx.Tx, now time.Time) error {
		out = make([]Mutation, len(ids))
		lock := "FOR UPDATE"
		if change.SkipLocked {
			lock = "FOR UPDATE SKIP LOCKED"
		}
		rows, err := tx.Query(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = ANY($2::uuid[]) ORDER BY id `+lock, tenant, ids)
		if err != nil {
			return fmt.Errorf("store: lock jobs: %w", err)
		}
		locked := map[string]*sundialv1.Job{}
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("store: lock jobs: %w", err)
			}
			locked[j.GetId()] = j
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: lock jobs: %w", err)
		}
		type write struct {
			i         int
			cur, next *sundialv1.Job
			staged    int64
			dropped   []outbox.Dropped
		}
		var ws []*write
		writes := &pgx.Batch{}
		for i, id := range ids {
			out[i].ID = id
			cur := locked[id]
			if cur == nil {
				// Skipped rows are reported busy: a job that is gone
				// too is found so when it is changed without skipping.
				out[i].Err = ErrNotFound
				if change.SkipLocked {
					out[i].Err = ErrBusy
				}
				continue
			}
			if change.ExpectedVersion != 0 && change.ExpectedVersion != cur.GetVersion() {
				out[i].Err = &VersionMismatchError{Expected: change.ExpectedVersion, Current: cur.GetVersion()}
				continue
			}
			next, err := fn(now, proto.Clone(cur).(*sundialv1.Job))
			if err != nil {
				out[i].Err = err
				continue
			}
			if next == nil {
				out[i].Mutated = Mutated{Job: cur}
				continue
			}
			if completesPaused(cur, next) {
				return fmt.Errorf("store: job %s: MutateEach does not complete paused jobs; use Mutate", id)
			}
			next.Id, next.Tenant, next.CreateTime = cur.Id, cur.Tenant, cur.CreateTime
			next.Version = cur.Version + 1
			next.UpdateTime = timestamppb.New(now)
			spec, err := encodeSpec(next)
			if err != nil {
				return err
			}
			w := &write{i: i, cur: cur, next: next}
			ws = append(ws, w)
			// In Mutate's order: the job, its run count taken back for the
			// staged firings, then those firings dropped.
			writes.Queue(changeSQL, changeArgs(tenant, id, next, spec, now)...)
			writes.Queue(uncountSQL, id, now)
			writes.Queue(runsSQL, id).QueryRow(func(r pgx.Row) error { return r.Scan(&w.staged) })
			outbox.QueueDeleteJob(writes, id, &w.dropped)
		}
		if len(ws) == 0 {
			return nil
		}
		if err := tx.SendBatch(ctx, writes).Close(); err != nil {
			return fmt.Errorf("store: change jobs: %w", err)
		}
		var ledger []ledgerpending.Row
		audits := &pgx.Batch{}
		for _, w := range ws {
			id := w.next.GetId()
			setRemainingRuns(w.next, w.staged)
			reason := "job changed to version " + fmt.Sprint(w.next.Version)
			if change.DropReason != nil {
				reason = change.DropReason(w.next)
			}
			rows, err := droppedRows(tenant, id, w.next.Version, reason, w.dropped)
			if err != nil {
				return err
			}
			ledger = append(ledger, rows...)
			detail := cloneDetail(change.Audit.Detail)
			detail["dropped_firings"] = int64(len(w.dropped))
			if w.cur.GetStatus() != w.next.GetStatus() {
				detail["status"] = map[string]string{"from": firing.JobStatusSQL(w.cur.GetStatus()), "to": firing.JobStatusSQL(w.next.GetStatus())}
			}
			audit := change.Audit
			audit.Detail = detail
			args, err := auditArgs(tenant, id, w.next.Version, now, audit)
			if err != nil {
				return err
			}
			audits.Queue(auditSQL, args...)
			out[w.i].Mutated = Mutated{Job: w.next, Changed: true, DroppedFirings: int64(len(w.dropped))}
		}
		if err := ledgerpending.Insert(ctx, tx, ledger); err != nil {
			return fmt.Errorf("store: record dropped firings: %w", err)
		}
		if err := tx.SendBatch(ctx, audits).Close(); err != nil {
			return fmt.Errorf("store: insert audit rows: %w", err)
		}
		for _, w := range ws {
			if err := notifyIfScheduled(ctx, tx, w.next); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// mutate is Mutate's change of one job inside tx.
func mutate(ctx context.Context, tx pgx.Tx, now time.Time, tenant, id string, change Change, fn MutateFunc) (Mutated, error) {
	var out Mutated
	err := func() error {
		cur, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = $1 AND id = $2 FOR UPDATE`, tenant, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("store: lock job: %w", err)
		}
		// Compared under the row lock: of two changes expecting the same
		// version, the second waits for the first to commit and then sees
		// the bumped version.
		if change.ExpectedVersion != 0 && change.ExpectedVersion != cur.GetVersion() {
			return &VersionMismatchError{Expected: change.ExpectedVersion, Current: cur.GetVersion()}
		}
		next, err := fn(now, proto.Clone(cur).(*sundialv1.Job))
		if err != nil {
			return err
		}
		if next == nil {
			out = Mutated{Job: cur}
			return nil
		}
		next.Id, next.Tenant, next.CreateTime = cur.Id, cur.Tenant, cur.CreateTime
		next.Version = cur.Version + 1
		next.UpdateTime = timestamppb.New(now)
		spec, err := encodeSpec(next)
		if err != nil {
			return err
		}
		if err := writeChange(ctx, tx, tenant, id, cur, next, spec, now); err != nil {
			return err
		}
		reason := "job changed to version " + fmt.Sprint(next.Version)
		if change.DropReason != nil {
			reason = change.DropReason(next)
		}
		staged, err := uncountDropped(ctx, tx, id, now)
		if err != nil {
			return err
		}
		setRemainingRuns(next, staged)
		dropped, err := dropUnpublished(ctx, tx, tenant, id, next.Version, reason)
		if err != nil {
			return err
		}
		detail := cloneDetail(change.Audit.Detail)
		detail["dropped_firings"] = dropped
		if change.Skipped != nil {
			n, err := recordSkipped(ctx, tx, tenant, id, now, cur, next, change.Skipped)
			if err != nil {
				return err
			}
			if n > 0 {
				detail["skipped_slots"] = n
			}
		}
		if cur.GetStatus() != next.GetStatus() {
			detail["status"] = map[string]string{"from": firing.JobStatusSQL(cur.GetStatus()), "to": firing.JobStatusSQL(next.GetStatus())}
		}
		audit := change.Audit
		audit.Detail = detail
		if err := insertAudit(ctx, tx, tenant, id, next.Version, now, audit); err != nil {
			return err
		}
		out = Mutated{Job: next, Changed: true, DroppedFirings: dropped}
		return notifyIfScheduled(ctx, tx, next)
	}()
	return out, err
}

// writeChange writes the job a change made of cur, at version
// next.Version. A paused job that becomes completed (a resume that found
// no slot left) ends through pkg/postgres/jobcompletion, the one place a job
// completes; such a change touches nothing but the status, the version,
// next_fire_at, updated_at and the stored definition.
func writeChange(ctx context.Context, tx pgx.Tx, tenant, id string, cur, next *sundialv1.Job, spec []byte, now time.Time) error {
	if completesPaused(cur, next) {
		if next.GetName() != cur.GetName() || next.GetPriority() != cur.GetPriority() || !maps.Equal(jobspec.StoredLabels(next), jobspec.StoredLabels(cur)) {
			return fmt.Errorf("store: job %s: a change that completes a paused job changes nothing else", id)
		}
		jobID, err := uuid.Parse(id)
		if err != nil {
			return fmt.Errorf("store: job id %q: %w", id, err)
		}
		ok, err := jobcompletion.CompleteOnResume(ctx, tx, jobcompletion.Resumed{ID: jobID, Version: cur.GetVersion(), Spec: spec, At: now})
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if !ok {
			// The row is locked since it was read: only a bug gets here.
			return fmt.Errorf("store: job %s is not paused at version %d under its lock", id, cur.GetVersion())
		}
		return nil
	}
	if _, err := tx.Exec(ctx, changeSQL, changeArgs(tenant, id, next, spec, now)...); err != nil {
		return fmt.Errorf("store: update job: %w", err)
	}
	return nil
}

// completesPaused is writeChange's special case: a paused job that a
// resume finds with no slot left.
func completesPaused(cur, next *sundialv1.Job) bool {
	return cur.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED && next.GetStatus() == sundialv1.JobStatus_JOB_STATUS_COMPLETED
}

const changeSQL = `
		UPDATE jobs SET name = $3, labels = $4, spec = $5, priority = $6, status = $7, version = $8,
		       next_fire_at = $9, updated_at = $10, deleted_at = COALESCE(deleted_at, $11)
		WHERE tenant = $1 AND id = $2`

func changeArgs(tenant, id string, next *sundialv1.Job, spec []byte, now time.Time) []any {
	var deletedAt *time.Time
	if next.GetStatus() == sundialv1.JobStatus_JOB_STATUS_DELETED {
		deletedAt = &now
	}
	return []any{tenant, id, next.GetName(), jobspec.StoredLabels(next), spec, int16(next.GetPriority()), firing.JobStatusSQL(next.GetStatus()),
		next.Version, nullableTime(next.GetNextFireTime()), now, deletedAt}
}

// dropUnpublished deletes the job's outbox rows (the relay deletes rows once
// Kafka acknowledged them, so whatever is left is unpublished; a row a relay
// is publishing right now is locked, and the delete waits for it) and
// records them in ledger_pending, so the job's history says why the slots
// never ran: the scheduled slots as one SKIPPED summary row per version
// they were staged at ("N slots due from T1 to T2 dropped", the shape the
// workers use for the published ones: firing.DroppedID), and a trigger, a
// backfill or catch-up, a re-drive or a retry — an execution someone may
// look up by its id — as a SKIPPED attempt of its own. to is the job's
// version after the change.
func dropUnpublished(ctx context.Context, tx pgx.Tx, tenant, jobID string, to int64, reason string) (int64, error) {
	dropped, err := outbox.DeleteJob(ctx, tx, jobID)
	if err != nil {
		return 0, fmt.Errorf("store: drop unpublished firings: %w", err)
	}
	skipped, err := droppedRows(tenant, jobID, to, reason, dropped)
	if err != nil {
		return 0, err
	}
	if err := ledgerpending.Insert(ctx, tx, skipped); err != nil {
		return 0, fmt.Errorf("store: record dropped firings: %w", err)
	}
	return int64(len(dropped)), nil
}

// droppedRows are the ledger_pending rows that record dropped (see
// dropUnpublished).
func droppedRows(tenant, jobID string, to int64, reason string, dropped []outbox.Dropped) ([]ledgerpending.Row, error) {
	job, err := uuid.Parse(jobID)
	if err != nil {
		return nil, fmt.Errorf("store: job id %q: %w", jobID, err)
	}
	type span struct {
		n           int
		first, last outbox.Dropped
	}
	var (
		skipped []ledgerpending.Row
		slots   = map[int64]*span{}
	)
	for _, d := range dropped {
		if d.Attempt <= 1 && !d.CatchUp && d.ExecutionID == firing.ExecutionID(job, d.ScheduledAt).String() {
			sp := slots[d.JobVersion]
			switch {
			case sp == nil:
				slots[d.JobVersion] = &span{n: 1, first: d, last: d}
				continue
			case d.FireAt.Before(sp.first.FireAt):
				sp.first = d
			case d.FireAt.After(sp.last.FireAt):
				sp.last = d
			}
			sp.n++
			continue
		}
		skipped = append(skipped, ledgerpending.Row{
			ExecutionID: d.ExecutionID, JobID: jobID, Tenant: tenant, Attempt: d.Attempt,
			Status:      sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
			ScheduledAt: d.ScheduledAt, FireAt: d.FireAt, CatchUp: d.CatchUp, JobVersion: d.JobVersion, Reason: reason,
		})
	}
	for from, sp := range slots {
		skipped = append(skipped, ledgerpending.Row{
			ExecutionID: firing.DroppedID(jobID, from, to, sp.first.FireAt.UnixNano()), JobID: jobID, Tenant: tenant, Attempt: 1,
			Status:      sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
			ScheduledAt: sp.first.ScheduledAt, FireAt: sp.first.FireAt, CatchUp: sp.first.CatchUp, JobVersion: from,
			Reason: firing.DroppedReason(sp.n, sp.first.FireAt, sp.last.FireAt, from, to, reason),
		})
	}
	return skipped, nil
}
