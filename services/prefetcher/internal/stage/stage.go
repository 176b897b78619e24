// Package stage is the prefetcher's one Postgres transaction: it proves the
// caller still holds the newest leadership epoch, claims a batch of due
// jobs, writes one outbox row per slot the planner chose, advances each
// job's next_fire_at and wakes the relay — all or nothing.
//
// Fencing is done by the store, not by hope. The transaction's first
// statement raises-or-checks the election's row in leader_epochs:
//
//	INSERT ... ON CONFLICT (election) DO UPDATE ... WHERE leader_epochs.epoch <= excluded.epoch
//
// When a newer epoch has already written, the WHERE fails, no row comes
// back, and the transaction ends with ErrFenced having written nothing. The
// statement also takes the row's lock until commit, so the transactions of
// two leaders who both believe they lead never interleave: a deposed
// leader's transaction either commits entirely before the new leader's first
// one (which then sees its effects) or fails its check after it.
//
// The database clock decides: the window, the misfire cut-offs, publish_at
// and staged_time all come from the transaction's now().
package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/firing"
	"github.com/sundialhq/sundial/pkg/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/slots"
)

// ErrFenced means a leader with a newer epoch has written: this leader is
// deposed and its transaction wrote nothing.
var ErrFenced = errors.New("stage: fenced by a newer leader epoch")

// OutboxChannel is the NOTIFY channel the relay listens on.
const OutboxChannel = "sundial_outbox"

// Options of a batch.
type Options struct {
	// Election names the row in leader_epochs (the election path).
	Election string
	// Epoch of the caller's leadership term.
	Epoch int64
	// Leader identifies the caller (node id), recorded with the epoch.
	Leader string
	// Window: stage slots up to now()+Window.
	Window time.Duration
	// Limit is the number of jobs claimed per transaction.
	Limit int
	// MisfireThreshold: slots older than now() minus this are misfires.
	MisfireThreshold time.Duration
	// MaxSlotsPerJob bounds one job's slots per transaction.
	MaxSlotsPerJob int
}

// Result of one batch.
type Result struct {
	// Now is the database clock of the transaction.
	Now time.Time
	// Claimed jobs (locked and advanced).
	Claimed int
	// Staged outbox rows inserted, CatchUp of them catch-up firings.
	Staged, CatchUp int
	// Duplicates are slots whose row already existed (a previous leader
	// staged them and the relay has not published them yet).
	Duplicates int
	// Missed slots the misfire policy skipped.
	Missed int
	// Unschedulable jobs whose spec or schedule could not be evaluated;
	// their next_fire_at was cleared so they stop being claimed.
	Unschedulable int
	// Lag is how long the oldest claimed job had been due for staging
	// (now()+window - its next_fire_at). A lag above the window means
	// slots were staged after their instant.
	Lag time.Duration
}

// Store stages firings in Postgres.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// New returns a store over pool; the pool's search_path picks the schema.
func New(pool *pgxpool.Pool, log *slog.Logger) *Store { return &Store{pool: pool, log: log} }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

const fenceSQL = `
INSERT INTO leader_epochs (election, epoch, leader, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (election) DO UPDATE
   SET epoch = excluded.epoch, leader = excluded.leader, updated_at = excluded.updated_at
 WHERE leader_epochs.epoch <= excluded.epoch
RETURNING now()`

// claimSQL takes the most overdue active jobs first. SKIP LOCKED passes
// over jobs the api is changing right now; they are claimed next tick.
const claimSQL = `
SELECT id, tenant, spec, version, next_fire_at, created_at
  FROM jobs
 WHERE status = 'active' AND next_fire_at <= $1
 ORDER BY next_fire_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED`

// insertSQL writes a whole batch in one statement from parallel arrays.
// ON CONFLICT makes restaging a slot (same execution id, attempt 1) a no-op.
const insertSQL = `
INSERT INTO outbox (execution_id, attempt, job_id, job_version, priority,
                    scheduled_at, fire_at, publish_at, catch_up, envelope)
SELECT e, 1, j, v, p, s, f, now(), c, env
  FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::smallint[],
              $5::timestamptz[], $6::timestamptz[], $7::boolean[], $8::bytea[])
       AS t(e, j, v, p, s, f, c, env)
ON CONFLICT (execution_id, attempt) DO NOTHING
RETURNING catch_up`

const advanceSQL = `
UPDATE jobs AS j
   SET next_fire_at = u.next, last_slot_at = COALESCE(u.last, j.last_slot_at)
  FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[]) AS u(id, next, last)
 WHERE j.id = u.id`

type claimed struct {
	id      uuid.UUID
	tenant  string
	spec    []byte
	version int64
	next    time.Time
	created time.Time
}

// rows accumulates the outbox rows of a batch as parallel arrays.
type rows struct {
	exec, job  []uuid.UUID
	version    []int64
	priority   []int16
	sched, fir []time.Time
	catchUp    []bool
	envelope   [][]byte
}

// StageBatch runs one transaction: fence, claim up to Limit due jobs,
// stage their slots, advance them, notify. A batch that claimed Limit jobs
// may have left due jobs behind: call again.
func (s *Store) StageBatch(ctx context.Context, o Options) (Result, error) {
	var res Result
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("stage: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if err := tx.QueryRow(ctx, fenceSQL, o.Election, o.Epoch, o.Leader).Scan(&res.Now); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return res, ErrFenced
		}
		return res, fmt.Errorf("stage: fence: %w", err)
	}
	res.Now = res.Now.UTC()
	windowEnd := res.Now.Add(o.Window)

	jobs, err := claim(ctx, tx, windowEnd, o.Limit)
	if err != nil {
		return res, err
	}
	res.Claimed = len(jobs)
	if len(jobs) == 0 {
		return res, tx.Commit(ctx)
	}
	res.Lag = windowEnd.Sub(jobs[0].next)

	var out rows
	ids := make([]uuid.UUID, 0, len(jobs))
	nexts := make([]pgtype.Timestamptz, 0, len(jobs))
	lasts := make([]pgtype.Timestamptz, 0, len(jobs))
	staged := timestamppb.New(res.Now)
	for _, j := range jobs {
		plan, err := s.plan(j, res.Now, o)
		if err != nil {
			// A job we cannot evaluate would be claimed first on every
			// tick forever; clear its next_fire_at (the api recomputes it
			// on the next change) and say so loudly.
			s.log.Error("job cannot be scheduled; clearing its next_fire_at", "job_id", j.id, "err", err)
			res.Unschedulable++
			ids, nexts, lasts = append(ids, j.id), append(nexts, pgtype.Timestamptz{}), append(lasts, pgtype.Timestamptz{})
			continue
		}
		if plan.Expired {
			s.log.Info("slots older than the misfire grace were not staged", "job_id", j.id,
				"from", j.next, "resumed_at", plan.ExpiredUntil)
		}
		res.Missed += plan.Missed
		for _, sl := range plan.Slots {
			if err := out.add(j, sl, plan.job, staged); err != nil {
				return res, err
			}
		}
		ids = append(ids, j.id)
		nexts = append(nexts, ts(plan.Next))
		var last pgtype.Timestamptz
		if n := len(plan.Slots); n > 0 {
			last = ts(latest(plan.Slots))
		}
		lasts = append(lasts, last)
	}

	if len(out.exec) > 0 {
		r, err := tx.Query(ctx, insertSQL, out.exec, out.job, out.version, out.priority, out.sched, out.fir, out.catchUp, out.envelope)
		if err != nil {
			return res, fmt.Errorf("stage: insert outbox: %w", err)
		}
		inserted, err := pgx.CollectRows(r, pgx.RowTo[bool])
		if err != nil {
			return res, fmt.Errorf("stage: insert outbox: %w", err)
		}
		res.Staged = len(inserted)
		for _, c := range inserted {
			if c {
				res.CatchUp++
			}
		}
		res.Duplicates = len(out.exec) - res.Staged
	}
	if _, err := tx.Exec(ctx, advanceSQL, ids, nexts, lasts); err != nil {
		return res, fmt.Errorf("stage: advance jobs: %w", err)
	}
	if res.Staged > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, OutboxChannel, fmt.Sprint(res.Staged)); err != nil {
			return res, fmt.Errorf("stage: notify: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("stage: commit: %w", err)
	}
	return res, nil
}

func claim(ctx context.Context, tx pgx.Tx, windowEnd time.Time, limit int) ([]claimed, error) {
	r, err := tx.Query(ctx, claimSQL, windowEnd, limit)
	if err != nil {
		return nil, fmt.Errorf("stage: claim: %w", err)
	}
	jobs, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.id, &c.tenant, &c.spec, &c.version, &c.next, &c.created)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("stage: claim: %w", err)
	}
	return jobs, nil
}

type jobPlan struct {
	slots.Plan
	job *sundialv1.Job
}

func (s *Store) plan(j claimed, now time.Time, o Options) (jobPlan, error) {
	job := &sundialv1.Job{}
	if err := proto.Unmarshal(j.spec, job); err != nil {
		return jobPlan{}, fmt.Errorf("decode spec: %w", err)
	}
	// The columns are authoritative for identity, tenant and version.
	job.Id, job.Tenant, job.Version = j.id.String(), j.tenant, j.version
	sched, err := jobspec.Schedule(job, j.created)
	if err != nil {
		return jobPlan{}, err
	}
	p := slots.Compute(slots.Input{
		Schedule:         sched,
		NextFireAt:       j.next,
		Now:              now,
		Window:           o.Window,
		MisfireThreshold: o.MisfireThreshold,
		Policy:           slots.PolicyOf(job),
		MaxSlots:         o.MaxSlotsPerJob,
	})
	return jobPlan{Plan: p, job: job}, nil
}

func (r *rows) add(j claimed, sl slots.Slot, job *sundialv1.Job, staged *timestamppb.Timestamp) error {
	exec := firing.ExecutionID(j.id, sl.At)
	fire := sl.At.Add(slots.Jitter(j.id, sl.At, job.GetMaxJitter().AsDuration()))
	env := jobspec.Envelope(job, exec.String(), sl.At, fire, 1, sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE)
	env.CatchUp = sl.CatchUp
	env.StagedTime = staged
	b, err := firing.Encode(env)
	if err != nil {
		return fmt.Errorf("stage: encode envelope of job %s: %w", j.id, err)
	}
	r.exec = append(r.exec, exec)
	r.job = append(r.job, j.id)
	r.version = append(r.version, j.version)
	r.priority = append(r.priority, int16(firing.Normalize(env.GetPriority())))
	r.sched = append(r.sched, sl.At)
	r.fir = append(r.fir, fire)
	r.catchUp = append(r.catchUp, sl.CatchUp)
	r.envelope = append(r.envelope, b)
	return nil
}

func latest(ss []slots.Slot) time.Time {
	var t time.Time
	for _, s := range ss {
		if s.At.After(t) {
			t = s.At
		}
	}
	return t
}

func ts(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}
