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
// With a tracer, the transaction is a span (prefetch.batch) and every
// firing it stages gets a span of its own, the root of that firing's trace,
// whose W3C context goes into the envelope's traceparent (see pkg/process/tracing).
//
// The database clock decides: the window, the misfire cut-offs, publish_at
// and staged_time all come from the transaction's now().
//
// The same transaction records every slot it skips (misfire) as a SKIPPED
// ledger_pending row with its reason, so the reason commits with the
// advance of next_fire_at or not at all; the prefetcher's drainer moves
// those rows into the Cassandra ledger. It marks the envelope of the
// schedule's last slot last_slot, and completes (with an audit row) a job
// left with no slot and none staged. Catch-up firings are paced: each gets
// the next release instant of a cursor the caller carries from batch to
// batch, and is published a window before it.
//
// A job with a run-count limit (max_runs) is counted here too: the
// advance adds the slots it staged for the first time to jobs.runs_staged
// (a slot at or before runs_counted_through was counted when first staged
// and is not counted again), and the pass that reaches the limit stages no
// slot after it, marks the last one last_slot and clears next_fire_at; a
// job with no run left is completed. Catch-ups count; the api's backfills
// and triggers are not staged here and do not.
//
// A claimed job's slots are staged in a chunk: every on-time slot up to
// the job's chunk end past now()+Window (slots.ChunkEnd, at its range's
// phase), so a per-second job is claimed, and its jobs row updated, once
// per chunk rather than once per slot, and the ranges stage their chunks
// at different moments. A row is never
// published more than a window before it fires: those beyond the window
// wait in the outbox.
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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/sundialhq/sundial/pkg/domain/calendar"
	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	"github.com/sundialhq/sundial/pkg/domain/schedule"
	"github.com/sundialhq/sundial/pkg/postgres/calendarstore"
	"github.com/sundialhq/sundial/pkg/postgres/jobcompletion"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerpending"
	"github.com/sundialhq/sundial/pkg/postgres/outbox"
	"github.com/sundialhq/sundial/pkg/process/tracing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/prefetcher/internal/slots"
)

// ErrFenced means a leader with a newer epoch has written: this leader is
// deposed and its transaction wrote nothing.
var ErrFenced = errors.New("stage: fenced by a newer leader epoch")

// Options of a batch.
type Options struct {
	// Election names the row in leader_epochs (the range's lock path).
	Election string
	// Epoch of the caller's leadership term.
	Epoch int64
	// Leader identifies the caller (node id), recorded with the epoch.
	Leader string
	// Window: claim jobs with a slot due up to now()+Window, and publish
	// no firing earlier than Window before it fires.
	Window time.Duration
	// Chunk: a claimed job's on-time slots are staged up to its chunk end,
	// half a chunk to a chunk and a half past now()+Window at the job's
	// range's phase (slots.ChunkEnd, Partitions.phase), so a frequent job is claimed
	// (and its jobs row updated) once per Chunk instead of on every pass. Slots beyond
	// the window wait in the outbox (publish_at a window before the slot,
	// rounded down to the second), where pause, update and delete still
	// drop them. Zero stages up to the window only.
	Chunk time.Duration
	// Limit is the number of jobs claimed per transaction.
	Limit int
	// MisfireThreshold: slots older than now() minus this are misfires.
	MisfireThreshold time.Duration
	// MaxSlotsPerJob bounds one job's slots per transaction.
	MaxSlotsPerJob int
	// MaxSkipRecords is how many skipped slots of one job one pass records
	// in the ledger one by one (the most recent); older ones share one
	// summary row.
	MaxSkipRecords int
	// Step fills a window that is far behind in the order its slots come
	// due: when the earliest claimed job's next slot is more than
	// Chunk+Step before the window's end (thousands of jobs registered
	// together, a leader back after an outage), each claimed job is staged
	// only up to Step past that slot (at least now()+Step), and the next
	// batch claims the jobs now earliest. Staged job by job instead, the
	// last job's first slot would wait behind every other job's whole
	// window. Zero stages each job's whole window at once.
	Step time.Duration
	// CatchUpRate paces the release of catch-up firings: the i-th gets
	// fire_at = outbox.PacedFireAt(max(CatchUpCursor, now()), i,
	// CatchUpRate), a 1/CatchUpRate step in whole microseconds. Zero fires
	// them at their (past) slot, all at once.
	CatchUpRate float64
	// CatchUpCursor is the release instant of the next catch-up firing, as
	// returned in the previous batch's Result; zero means now() (or, with
	// KeepCursor, the cursor kept in the election's row).
	CatchUpCursor time.Time
	// Partitions, when set, limits the claim to jobs of these partitions:
	// the share of one range leader (all 256 with --ranges 1). Nil claims
	// across all partitions without the partition filter.
	Partitions *Partitions
	// KeepCursor keeps the catch-up release cursor in the election's
	// leader_epochs row (catch_up_cursor): a batch given no cursor starts
	// from the stored one, and every batch that paces stores where it left
	// off, in its own transaction. So a range's next leader continues the
	// release schedule instead of starting a second one at now().
	KeepCursor bool
}

// Partitions is an inclusive range of jobs.partition values.
type Partitions struct{ Lo, Hi int }

// phase is where the chunks of this range's jobs end on the chunk-long
// grid (slots.ChunkEnd): its first partition's share of the chunk, so the
// 16 ranges of 16 partitions each stage their jobs' next chunks about
// 1.9 s apart instead of all at the same instant (jobs registered together
// stay together otherwise: 5,000 per-second jobs staged 150,000 rows in
// a few seconds every 30 s, on the cores their herd fired on). One pass
// per range per chunk, as with a single phase: a phase per job would make
// every range stage a few jobs on every tick, and each of those passes
// is a durable commit (measured: a quarter more platform CPU per firing
// at 1,000 jittered firings/s). Nil (one prefetcher for all partitions):
// phase 0.
func (p *Partitions) phase(chunk time.Duration) time.Duration {
	if p == nil || chunk <= 0 {
		return 0
	}
	return chunk * time.Duration(p.Lo) / firing.Partitions
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
	// Missed slots the misfire policy skipped (inside the grace).
	Missed int
	// Expired slots older than the grace (a lower bound after a very long
	// outage; see slots.Plan).
	Expired int
	// Recorded ledger_pending rows written for skipped slots.
	Recorded int
	// Completed jobs: no slot left and none staged (the last ones were
	// skipped), so the prefetcher completed them itself.
	Completed int
	// CatchUpCursor is the release instant after the last paced catch-up
	// firing of this batch (pass it to the next batch); the input cursor
	// or now() when none was paced.
	CatchUpCursor time.Time
	// Stepped: the batch staged only up to Options.Step past its earliest
	// slot; the jobs it advanced are due again at once.
	Stepped bool
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
	pool   *pgxpool.Pool
	log    *slog.Logger
	tracer trace.Tracer // nil: tracing off
}

// Option adjusts a Store.
type Option func(*Store)

// WithTracer traces each transaction and gives every staged firing its
// trace context; without it (or with nil) nothing is traced.
func WithTracer(t trace.Tracer) Option { return func(s *Store) { s.tracer = t } }

// New returns a store over pool; the pool's search_path picks the schema.
func New(pool *pgxpool.Pool, log *slog.Logger, opts ...Option) *Store {
	s := &Store{pool: pool, log: log}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

const fenceSQL = `
INSERT INTO leader_epochs (election, epoch, leader, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (election) DO UPDATE
   SET epoch = excluded.epoch, leader = excluded.leader, updated_at = excluded.updated_at
 WHERE leader_epochs.epoch <= excluded.epoch
RETURNING now()`

// fenceCursorSQL is fenceSQL for an election that keeps its catch-up
// cursor in its row (Options.KeepCursor; migration 00013). The cursor is
// not touched by the fence, so RETURNING gives the stored one.
const fenceCursorSQL = `
INSERT INTO leader_epochs (election, epoch, leader, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (election) DO UPDATE
   SET epoch = excluded.epoch, leader = excluded.leader, updated_at = excluded.updated_at
 WHERE leader_epochs.epoch <= excluded.epoch
RETURNING now(), catch_up_cursor`

const storeCursorSQL = `UPDATE leader_epochs SET catch_up_cursor = $2 WHERE election = $1`

// claimSQL takes the most overdue active jobs first. SKIP LOCKED passes
// over jobs the api is changing right now; they are claimed next tick.
const claimSQL = `
SELECT id, tenant, spec, version, next_fire_at, created_at, runs_staged, runs_counted_through
  FROM jobs
 WHERE status = '` + firing.JobActiveSQL + `' AND next_fire_at <= $1
 ORDER BY next_fire_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED`

// claimRangeSQL is claimSQL for one range leader. It walks the same index
// (jobs_active_next_fire) in due order and filters on partition: the rows
// of other ranges are read, never locked, so leaders of different ranges
// never wait for each other. A (partition, next_fire_at) index would skip
// them, but it cannot return a range of partitions in due order: each
// batch would sort every due job of the range, which is what migration
// 00005 removed (see docs/architecture/prefetcher.md, Partitioned prefetch).
const claimRangeSQL = `
SELECT id, tenant, spec, version, next_fire_at, created_at, runs_staged, runs_counted_through
  FROM jobs
 WHERE status = '` + firing.JobActiveSQL + `' AND next_fire_at <= $1 AND partition BETWEEN $3 AND $4
 ORDER BY next_fire_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED`

// Actor is the audit trail's name for the prefetcher.
const Actor = "system:prefetcher"

// advanceSQL also counts the slots staged for the first time toward the
// job's run-count limit (migration 00017): u.runs of them, the latest at
// u.counted.
const advanceSQL = `
UPDATE jobs AS j
   SET next_fire_at = u.next, last_slot_at = COALESCE(u.last, j.last_slot_at),
       runs_staged = j.runs_staged + u.runs,
       runs_counted_through = COALESCE(u.counted, j.runs_counted_through)
  FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], $4::bigint[], $5::timestamptz[]) AS u(id, next, last, runs, counted)
 WHERE j.id = u.id`

type claimed struct {
	id      uuid.UUID
	tenant  string
	spec    []byte
	version int64
	next    time.Time
	created time.Time
	// runsStaged and countedThrough: the run count so far (see
	// advanceSQL).
	runsStaged     int64
	countedThrough pgtype.Timestamptz
}

// rows accumulates the outbox rows of a batch; they are written in one
// statement (outbox.Insert).
type rows []outbox.Row

// pacer hands out catch-up release instants: the paced release of
// outbox.PacedFireAt from the cursor on, never before now, carried from
// batch to batch by the cursor.
type pacer struct {
	start time.Time
	rate  float64
	n     int
}

func newPacer(now, cursor time.Time, rate float64) pacer {
	if cursor.Before(now) {
		cursor = now
	}
	return pacer{start: cursor, rate: rate}
}

// next is the release instant of the next catch-up firing, false when
// release is not paced.
func (p *pacer) next() (time.Time, bool) {
	if outbox.PaceInterval(p.rate) == 0 {
		return time.Time{}, false
	}
	t := outbox.PacedFireAt(p.start, p.n, p.rate)
	p.n++
	return t, true
}

// cursor is the release instant of the catch-up firing after those handed
// out.
func (p *pacer) cursor() time.Time { return outbox.PacedFireAt(p.start, p.n, p.rate) }

// StageBatch runs one transaction: fence, claim up to Limit due jobs,
// stage their slots, advance them, notify. A batch that claimed Limit jobs
// may have left due jobs behind: call again.
func (s *Store) StageBatch(ctx context.Context, o Options) (res Result, err error) {
	var st *tracing.Stager
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, SpanBatch, trace.WithAttributes(
			attribute.String("db.system", "postgresql"),
			attribute.String("sundial.election", o.Election),
			attribute.Int64("sundial.epoch", o.Epoch)))
		st = tracing.NewStager(ctx, s.tracer)
		defer func() {
			st.End(err)
			endBatchSpan(span, res, err)
		}()
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("stage: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var stored pgtype.Timestamptz
	if o.KeepCursor {
		err = tx.QueryRow(ctx, fenceCursorSQL, o.Election, o.Epoch, o.Leader).Scan(&res.Now, &stored)
	} else {
		err = tx.QueryRow(ctx, fenceSQL, o.Election, o.Epoch, o.Leader).Scan(&res.Now)
	}
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return res, ErrFenced
		}
		return res, fmt.Errorf("stage: fence: %w", err)
	}
	res.Now = res.Now.UTC()
	if o.KeepCursor && o.CatchUpCursor.IsZero() && stored.Valid {
		o.CatchUpCursor = stored.Time.UTC()
	}
	res.CatchUpCursor = o.CatchUpCursor
	windowEnd := res.Now.Add(o.Window)

	jobs, err := claim(ctx, tx, windowEnd, o.Limit, o.Partitions)
	if err != nil {
		return res, err
	}
	res.Claimed = len(jobs)
	if len(jobs) == 0 {
		return res, tx.Commit(ctx)
	}
	res.Lag = windowEnd.Sub(jobs[0].next)
	po := o
	if o.Step > 0 && res.Lag > o.Chunk+o.Step {
		end := jobs[0].next
		if end.Before(res.Now) {
			end = res.Now
		}
		end = end.Add(o.Step)
		// Never past where the whole window would have been staged (a
		// step longer than the window is no step).
		if full := windowEnd.Add(o.Chunk); end.Before(full) {
			po.Window, po.Chunk, res.Stepped = end.Sub(res.Now), 0, true
		}
	}

	var out rows
	var pending []ledgerpending.Row
	var done []jobcompletion.Job
	pace := newPacer(res.Now, o.CatchUpCursor, o.CatchUpRate)
	paceFrom := pace.cursor()
	ids := make([]uuid.UUID, 0, len(jobs))
	nexts := make([]pgtype.Timestamptz, 0, len(jobs))
	lasts := make([]pgtype.Timestamptz, 0, len(jobs))
	// The run count: the rows of each job (ids[i]) are out[firstRow[i]:],
	// up to the next job's.
	firstRow := make([]int, 0, len(jobs))
	counted := make([]pgtype.Timestamptz, 0, len(jobs))
	cals := calendars{tx: tx}
	for _, j := range jobs {
		plan, err := s.plan(ctx, j, res.Now, po, &cals)
		if err != nil {
			// A job we cannot evaluate would be claimed first on every
			// tick forever; clear its next_fire_at (the api recomputes it
			// on the next change) and say so loudly.
			s.log.Error("job cannot be scheduled; clearing its next_fire_at", "job_id", j.id, "err", err)
			res.Unschedulable++
			ids, nexts, lasts = append(ids, j.id), append(nexts, pgtype.Timestamptz{}), append(lasts, pgtype.Timestamptz{})
			firstRow, counted = append(firstRow, len(out)), append(counted, pgtype.Timestamptz{})
			continue
		}
		if plan.Expired > 0 {
			// Per job at debug: a recovery may touch every job. The loop
			// logs one line per batch.
			s.log.Debug("slots older than the misfire grace were not staged", "job_id", j.id,
				"from", j.next, "expired", plan.Expired, "at_least", plan.ExpiredAtLeast)
		}
		res.Missed += plan.Missed
		res.Expired += plan.Expired
		firstRow = append(firstRow, len(out))
		var through pgtype.Timestamptz
		for _, sl := range plan.Slots {
			if counts(j, sl.At) && (!through.Valid || sl.At.After(through.Time)) {
				through = ts(sl.At)
			}
		}
		counted = append(counted, through)
		for i, sl := range plan.Slots {
			last := plan.LastSlot() && i == len(plan.Slots)-1
			if err := out.add(j, sl, plan.job, last, &pace, res.Now, o.Window, st); err != nil {
				return res, err
			}
		}
		pending = appendSkips(pending, j, plan)
		ids = append(ids, j.id)
		nexts = append(nexts, ts(plan.Next))
		var last pgtype.Timestamptz
		if n := len(plan.Slots); n > 0 {
			last = ts(latest(plan.Slots))
		}
		lasts = append(lasts, last)
		if plan.Exhausted() {
			// The advance below clears next_fire_at first, in this
			// transaction, under the claim's lock.
			done = append(done, jobcompletion.Job{ID: j.id, Version: j.version, Detail: completionDetail(plan)})
		}
	}
	res.CatchUpCursor = pace.cursor()
	if o.KeepCursor && !res.CatchUpCursor.Equal(paceFrom) {
		// Something was paced: the schedule now runs to the cursor, and a
		// range's next leader must queue behind it.
		if _, err := tx.Exec(ctx, storeCursorSQL, o.Election, res.CatchUpCursor); err != nil {
			return res, fmt.Errorf("stage: store catch-up cursor: %w", err)
		}
	}

	var inserted []bool
	if len(out) > 0 {
		// ON CONFLICT makes restaging a slot (same execution id, attempt
		// 1) a no-op.
		inserted, err = outbox.Insert(ctx, tx, out)
		if err != nil {
			return res, fmt.Errorf("stage: insert outbox: %w", err)
		}
		for i, ok := range inserted {
			if ok {
				res.Staged++
				if out[i].CatchUp {
					res.CatchUp++
				}
			}
		}
		res.Duplicates = len(out) - res.Staged
	}
	runs := runCounts(jobs, firstRow, out, inserted)
	if _, err := tx.Exec(ctx, advanceSQL, ids, nexts, lasts, runs, counted); err != nil {
		return res, fmt.Errorf("stage: advance jobs: %w", err)
	}
	// The reasons go in with the advance: if it commits, so do they.
	if err := ledgerpending.Insert(ctx, tx, pending); err != nil {
		return res, fmt.Errorf("stage: record skipped slots: %w", err)
	}
	res.Recorded = len(pending)
	if len(done) > 0 {
		completed, err := jobcompletion.Complete(ctx, tx, Actor, done)
		if err != nil {
			return res, fmt.Errorf("stage: complete jobs: %w", err)
		}
		for _, ok := range completed {
			if ok {
				res.Completed++
			}
		}
	}
	if res.Staged > 0 {
		if err := outbox.Notify(ctx, tx, fmt.Sprint(res.Staged)); err != nil {
			return res, fmt.Errorf("stage: notify: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("stage: commit: %w", err)
	}
	return res, nil
}

// SpanBatch is the name of a staging transaction's span.
const SpanBatch = "prefetch.batch"

func endBatchSpan(span trace.Span, res Result, err error) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int("sundial.jobs_claimed", res.Claimed),
			attribute.Int("sundial.firings_staged", res.Staged),
			attribute.Int("sundial.firings_duplicate", res.Duplicates),
			attribute.Int("sundial.slots_missed", res.Missed),
			attribute.Int("sundial.slots_expired", res.Expired))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

func claim(ctx context.Context, tx pgx.Tx, windowEnd time.Time, limit int, parts *Partitions) ([]claimed, error) {
	var r pgx.Rows
	var err error
	if parts != nil {
		r, err = tx.Query(ctx, claimRangeSQL, windowEnd, limit, parts.Lo, parts.Hi)
	} else {
		r, err = tx.Query(ctx, claimSQL, windowEnd, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("stage: claim: %w", err)
	}
	jobs, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.id, &c.tenant, &c.spec, &c.version, &c.next, &c.created, &c.runsStaged, &c.countedThrough)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("stage: claim: %w", err)
	}
	return jobs, nil
}

type jobPlan struct {
	slots.Plan
	job    *sundialv1.Job
	policy slots.Policy
	// runLimit: the job's max_runs ended the plan (its last run is
	// staged, or it had none left).
	runLimit bool
}

// counts reports whether staging slot at counts toward j's run-count
// limit: slots up to the latest one counted already were counted when
// first staged.
func counts(j claimed, at time.Time) bool {
	return !j.countedThrough.Valid || at.After(j.countedThrough.Time)
}

// limitRuns ends a plan at the job's run-count limit: it stages at most
// remaining slots that count (and any slot counted before, staged again
// after its row was dropped), the last of them the job's last slot, so the
// worker completes the job once it settles; with nothing to stage, the
// job completes now. Skipped slots before the limit are still recorded.
func limitRuns(p jobPlan, j claimed, remaining int64) jobPlan {
	remaining = max(remaining, 0)
	n := int64(0)
	for i, sl := range p.Slots {
		if !counts(j, sl.At) {
			continue
		}
		if n == remaining {
			p.Slots, p.Next, p.runLimit = p.Slots[:i], time.Time{}, true
			return p
		}
		n++
	}
	if n == remaining {
		p.Next, p.runLimit = time.Time{}, true
	}
	return p
}

// runCounts is how many rows each job's pass added to its run count: its
// rows inserted (not already there) that count.
func runCounts(jobs []claimed, firstRow []int, out rows, inserted []bool) []int64 {
	runs := make([]int64, len(jobs))
	for k, j := range jobs {
		end := len(out)
		if k+1 < len(firstRow) {
			end = firstRow[k+1]
		}
		for i := firstRow[k]; i < end; i++ {
			if inserted[i] && counts(j, out[i].ScheduledAt) {
				runs[k]++
			}
		}
	}
	return runs
}

// calendars loads the business calendars a batch's jobs name, each once
// per transaction: so an edit applies to every instant staged after it
// commits.
type calendars struct {
	tx     pgx.Tx
	loaded map[[2]string]*schedule.Calendar
}

// get is the engine's form of the calendar, built once per batch however
// many jobs share it.
func (c *calendars) get(ctx context.Context, tenant, name string) (*schedule.Calendar, error) {
	key := [2]string{tenant, name}
	if cal, ok := c.loaded[key]; ok {
		return cal, nil
	}
	stored, err := calendarstore.Load(ctx, c.tx, tenant, name)
	if err != nil {
		return nil, err
	}
	cal, err := calendar.Engine(stored)
	if err != nil {
		return nil, err
	}
	if c.loaded == nil {
		c.loaded = map[[2]string]*schedule.Calendar{}
	}
	c.loaded[key] = cal
	return cal, nil
}

func (s *Store) plan(ctx context.Context, j claimed, now time.Time, o Options, cals *calendars) (jobPlan, error) {
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
	if name := job.GetSchedule().GetCalendar(); name != "" {
		// The job's own tenant's calendar: the api refused any other.
		cal, err := cals.get(ctx, j.tenant, name)
		if err != nil {
			return jobPlan{}, fmt.Errorf("calendar %q: %w", name, err)
		}
		if sched, err = calendar.ApplyEngine(sched, job.GetSchedule(), cal); err != nil {
			return jobPlan{}, err
		}
	}
	policy := slots.PolicyOf(job)
	p := slots.Compute(slots.Input{
		Schedule:         sched,
		NextFireAt:       j.next,
		Now:              now,
		Window:           o.Window,
		Chunk:            o.Chunk,
		Phase:            o.Partitions.phase(o.Chunk),
		MisfireThreshold: o.MisfireThreshold,
		Policy:           policy,
		MaxSlots:         o.MaxSlotsPerJob,
		MaxSkipRecords:   o.MaxSkipRecords,
	})
	jp := jobPlan{Plan: p, job: job, policy: policy}
	if limit := job.GetMaxRuns(); limit > 0 {
		jp = limitRuns(jp, j, limit-j.runsStaged)
	}
	return jp, nil
}

// add appends the outbox row of one slot. A slot inside the window is
// published at once. One a chunk stages beyond the window is published
// when the window reaches it (slot - window, rounded down to half past a
// second; see publishAt): within a second of when a pass without chunks
// would have staged and published it. A paced
// catch-up firing fires at its release instant instead of slot+jitter and
// is published a window before that. Either way a long schedule waits in
// Postgres, where pause, update and delete still drop it, rather than in
// Kafka and workers' memory.
func (r *rows) add(j claimed, sl slots.Slot, job *sundialv1.Job, last bool, pace *pacer, now time.Time, window time.Duration, st *tracing.Stager) error {
	exec := firing.ExecutionID(j.id, sl.At)
	fire := sl.At.Add(firing.Jitter(j.id, sl.At, job.GetMaxJitter().AsDuration()))
	publish := publishAt(sl.At, window, publishGrain)
	if sl.CatchUp {
		if t, ok := pace.next(); ok {
			fire = t
			// Paced: never before now, so the release rate holds.
			publish = outbox.PublishAt(t, window, now)
		}
	}
	env := firing.New(job, firing.Attempt{
		Origin: sundialv1.FiringOrigin_FIRING_ORIGIN_SCHEDULE, ExecutionID: exec.String(),
		Scheduled: sl.At, Fire: fire, Number: 1, FirstAttempt: 1, CatchUp: sl.CatchUp, LastSlot: last, Staged: now,
	})
	st.Stage(env)
	b, err := firing.Encode(env)
	if err != nil {
		return fmt.Errorf("stage: encode envelope of job %s: %w", j.id, err)
	}
	row, err := outbox.FromFiring(env, b)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	row.PublishAt = publish
	*r = append(*r, row)
	return nil
}

// publishGrain rounds the publish_at of rows staged beyond the window down
// to the grain, so they come due in groups (one relay claim per second)
// rather than one by one at their jittered instants (one claim each).
const publishGrain = time.Second

// publishAt is when a row for instant at may be published: window before
// it, rounded down to the previous half-past of grain (none when grain is
// zero), so never later than a window before the slot and less than a
// grain earlier. For a slot already inside the window that is in the past,
// so the row is due at once; and since the relay claims due rows in
// publish_at order, the rows a pass stages at once (a new job's whole
// window, thousands of jobs registered together) reach Kafka in the order
// of their slots, not job by job. A worker that holds only part of them
// (--max-held) then holds the earliest.
//
// Half past, not on the grain: schedules fire on whole seconds (every
// cron slot is one), so a herd's next window would otherwise come due —
// claimed from Postgres, produced to Kafka, fetched and decoded by its
// worker — at the very instant the herd fires, on the same cores. Half a
// grain off, that work falls between two herds.
func publishAt(at time.Time, window, grain time.Duration) time.Time {
	p := at.Add(-window)
	if grain > 0 {
		p = p.Add(-grain / 2).Truncate(grain).Add(grain / 2)
	}
	return p
}

// appendSkips adds the ledger rows of a plan's skipped slots: one per
// listed slot, plus one at the summary's first slot standing for the
// older ones.
func appendSkips(out []ledgerpending.Row, j claimed, p jobPlan) []ledgerpending.Row {
	row := func(at time.Time, reason string) ledgerpending.Row {
		return ledgerpending.Row{
			ExecutionID: firing.ExecutionID(j.id, at).String(), JobID: j.id.String(), Tenant: j.tenant,
			Attempt: 1, Status: sundialv1.ExecutionStatus_EXECUTION_STATUS_SKIPPED,
			ScheduledAt: at, FireAt: at, JobVersion: j.version, Reason: reason,
		}
	}
	if sum := p.Summary; sum != nil {
		out = append(out, row(sum.First, p.policy.SummaryReason(*sum)))
	}
	for _, sk := range p.Skipped {
		out = append(out, row(sk.At, p.policy.Reason(sk.Kind)))
	}
	return out
}

// completionDetail is the audit detail of a job the prefetcher completes.
func completionDetail(p jobPlan) map[string]any {
	d := map[string]any{"reason": "no slot left"}
	if p.runLimit {
		d["reason"] = "max_runs reached"
		d["max_runs"] = p.job.GetMaxRuns()
		return d
	}
	if n := len(p.Skipped); n > 0 {
		d["reason"] = "no slot left: the last slots were skipped (misfire)"
		d["last_slot"] = p.Skipped[n-1].At.UTC().Format(time.RFC3339Nano)
	} else if p.Summary != nil {
		d["reason"] = "no slot left: the last slots were skipped (misfire)"
		d["last_slot"] = p.Summary.Last.UTC().Format(time.RFC3339Nano)
	}
	return d
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
