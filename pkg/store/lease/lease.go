// Package lease decides, in one Redis round trip per batch of firings,
// whether a worker may fire each execution now, and hands it the fence
// token to fire with.
//
// One Lua script (Acquire) checks, in order:
//
//  1. the execution's done marker: an execution that already succeeded, or
//     whose attempt already finished, is AlreadyDone;
//
//  2. the job's current version: a firing staged under an older version
//     than the one the api published is Stale;
//
//  3. the execution's lease: if another holder has it, the result is Held
//     with the time the lease has left; otherwise the lease is taken (SET
//     NX PX semantics, and the same holder may take it again, so a call
//     retried after a lost reply is harmless);
//
//  4. the execution's cancel request (Cancel, or another execution's
//     CANCEL_OTHER / TERMINATE_OTHER): a cancelled execution is Cancelled
//     and marked done, so neither it nor its retries fire;
//
//  5. the job's overlap policy (every policy but ALLOW), with the job's
//     concurrency (Execution.MaxConcurrency, 1 by default): while that
//     many executions of the job are running, a new execution is
//     Overlapping (SKIP; skipped, and marked done so its redeliveries are
//     dropped too), queued (BUFFER_ONE: one may wait; BUFFER_ALL: up to
//     MaxBuffered wait, and they start in slot order; Waiting), asks the
//     oldest running one to cancel and waits for it to end (CANCEL_OTHER;
//     Waiting), or cancels it and runs at once (TERMINATE_OTHER); a retry
//     of an execution that already started always waits;
//
//  6. the delivery count of this attempt: an attempt taken by more than
//     WithMaxDeliveries deliveries (its workers crashed on it) is Poison —
//     the lease is taken, so the caller can dead-letter it exclusively. A
//     delivery counts once however often it takes its lease again, and is
//     uncounted when it gives the lease back unstarted (ReleaseMany);
//
// and on success bumps the job's fence counter and returns it, and marks
// the job running (overlap policies only). The fence is monotonic per job
// even if Redis loses its data, because it is floored by Redis's clock in
// microseconds; see DESIGN.md beside this file for the argument and the key
// layout.
//
// Every key of one job carries the hash tag {j:<job id>}, so a script that
// touches several of them runs on one Redis Cluster slot; the batch calls
// send one script call per slot of their batch (pipelined) on a cluster
// client, and one call on a single Redis.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key unless WithPrefix says otherwise; it matches
// the services' --redis-key-prefix default.
const DefaultPrefix = "sundial:"

// Outcome is what Acquire decided.
type Outcome int

const (
	// Acquired: the caller holds the lease and must fire with Result.Fence.
	Acquired Outcome = iota
	// AlreadyDone: the execution succeeded, or this attempt of it already
	// finished; firing again would be a duplicate.
	AlreadyDone
	// Stale: the firing's job version is older than the published one.
	Stale
	// Held: another holder is firing the execution right now.
	Held
	// Overlapping: another execution of the job is running and the job's
	// overlap policy skips this one. The execution is marked done (for the
	// marker TTL), so every redelivery of it is AlreadyDone.
	Overlapping
	// Waiting: another execution of the job is running and this one may
	// run after it (the BUFFER_ONE slot, or a retry of an execution that
	// already started). Look again after Result.HeldFor.
	Waiting
	// Poison: the lease is taken (Fence is set), but this attempt has been
	// taken more than the maximum number of times without finishing; the
	// caller dead-letters it instead of firing.
	Poison
	// Cancelled: the execution was cancelled before this attempt started
	// (Result.CancelledBy says by whom). It is marked done: the caller
	// records it and fires nothing.
	Cancelled
)

func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case AlreadyDone:
		return "already_done"
	case Stale:
		return "stale"
	case Held:
		return "held"
	case Overlapping:
		return "overlapping"
	case Waiting:
		return "waiting"
	case Poison:
		return "poison"
	case Cancelled:
		return "cancelled"
	default:
		return "outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// Result is Acquire's answer.
type Result struct {
	Outcome Outcome
	// Fence is the job's fence token, set when Outcome is Acquired. It is
	// larger than every fence handed out for the job before.
	Fence int64
	// CurrentVersion is the job's published version, set when Stale.
	CurrentVersion int64
	// HeldFor is how long the other holder's lease (Held) or the running
	// execution's marker (Waiting) has left: a caller that still owns the
	// firing can look again after it.
	HeldFor time.Duration
	// HolderAliveFor (Held, with WithLiveness) is how long the holder's
	// worker's liveness key has left unless refreshed: a caller that
	// looks again after min(HeldFor, HolderAliveFor) takes the lease at
	// once if that worker died meanwhile, instead of after the lease's
	// TTL. A live worker refreshes it, and the look finds Held again.
	// 0 when the lease is not tied to a liveness key.
	HolderAliveFor time.Duration
	// Running is the execution id of the running execution, set when
	// Overlapping or Waiting.
	Running string
	// Deliveries is how many deliveries of this attempt are counted,
	// including this one (Acquired, Poison; 0 when the same holder took it
	// again: a delivery is counted once, however often it takes its lease
	// again, and uncounted when it gives the lease back unstarted).
	Deliveries int64
	// Finished is what the marker behind an AlreadyDone says.
	Finished Finished
	// CancelledBy names who cancelled the execution (Cancelled).
	CancelledBy string
}

// Finished is what a done marker records about an execution.
type Finished int

const (
	// FinishedAttempt: this attempt (or a later one) ended without
	// success; a retry may follow.
	FinishedAttempt Finished = iota
	// FinishedSucceeded: the execution succeeded.
	FinishedSucceeded
	// FinishedSkipped: the execution was skipped by its job's overlap
	// policy.
	FinishedSkipped
	// FinishedCancelled: the execution was cancelled.
	FinishedCancelled
)

// Overlap is a job's overlap policy as the lease script enforces it.
type Overlap int

const (
	// OverlapAllow: executions of a job may run at the same time; no
	// running marker is kept.
	OverlapAllow Overlap = iota
	// OverlapSkip: a new execution is skipped while another one runs.
	OverlapSkip
	// OverlapBufferOne: one new execution may wait behind the running
	// one; further ones are skipped.
	OverlapBufferOne
	// OverlapBufferAll: up to MaxBuffered new executions wait, and start
	// one after another in slot order; further ones are skipped.
	OverlapBufferAll
	// OverlapCancelOther: a new execution asks the running one to cancel
	// and waits for it to end (at most its lease TTL: a running execution
	// asked to cancel no longer extends its place), then runs.
	OverlapCancelOther
	// OverlapTerminateOther: a new execution cancels the running one and
	// runs at once; the cancelled attempt is abandoned by its worker.
	OverlapTerminateOther
)

// MaxBuffered is how many executions of one job wait under BUFFER_ALL.
const MaxBuffered = 100

// CancelledByCancelOther and CancelledByTerminateOther start the
// CancelledBy of an execution an overlap policy cancelled; " for " and the
// new execution's id follow.
const (
	CancelledByCancelOther    = "overlap:cancel_other"
	CancelledByTerminateOther = "overlap:terminate_other"
)

func (o Overlap) String() string {
	switch o {
	case OverlapSkip:
		return "SKIP"
	case OverlapBufferOne:
		return "BUFFER_ONE"
	case OverlapBufferAll:
		return "BUFFER_ALL"
	case OverlapCancelOther:
		return "CANCEL_OTHER"
	case OverlapTerminateOther:
		return "TERMINATE_OTHER"
	default:
		return "ALLOW"
	}
}

// Execution names one attempt of one execution.
type Execution struct {
	JobID       string
	ExecutionID string
	// Attempt counts from 1; a finished attempt rejects its redeliveries
	// but not the next attempt of the same execution.
	Attempt int32
	// Version is the job version the firing was staged under.
	Version int64
	// Overlap is the job's overlap policy (OverlapAllow when unset).
	Overlap Overlap
	// FirstAttempt is the first attempt of the current round (1, or where
	// a re-drive started); an attempt above it is a retry of an execution
	// that already started, which the overlap policy never skips. 0 means 1.
	FirstAttempt int32
	// MaxConcurrency is how many executions of the job may run at once
	// under its overlap policy; 0 means 1.
	MaxConcurrency int32
	// Order places the execution in the job's queue (BUFFER_ONE,
	// BUFFER_ALL): its slot, Unix ms; the lowest starts first.
	Order int64
}

// continuing reports whether ex is a retry of an execution that started.
func (ex Execution) continuing() bool { return ex.Attempt > max(ex.FirstAttempt, 1) }

// ErrLost is returned by Renew when the lease expired and nobody holds it:
// the caller may no longer assume exclusivity.
var ErrLost = errors.New("lease: lost (expired)")

// ErrFenced is returned by Renew when another holder has taken the lease:
// it fires with a larger fence, and the caller's result must be discarded.
var ErrFenced = errors.New("lease: fenced by another holder")

// ErrCancelled is what a *CancelledError is (errors.Is).
var ErrCancelled = errors.New("lease: execution cancelled")

// CancelledError is returned by Renew when the execution was cancelled:
// the lease was renewed (the caller still holds it, to finish under it), but
// the attempt is to be abandoned.
type CancelledError struct{ By string }

func (e *CancelledError) Error() string { return "lease: execution cancelled by " + e.By }

// Is makes errors.Is(err, ErrCancelled) true.
func (e *CancelledError) Is(target error) bool { return target == ErrCancelled }

// Store runs the lease scripts against Redis.
type Store struct {
	rdb           Client
	cluster       bool // rdb is a Redis Cluster client: batches are split by hash slot
	prefix        string
	maxDeliveries int
	markerTTL     time.Duration
	liveness      bool
}

// DefaultMarkerTTL is how long delivery counters and done markers live
// unless WithMarkerTTL says otherwise: the redelivery horizon (a firing is
// redelivered while its record is fetched and not yet committed: the
// staging window and a backlog), with a wide margin, not a week. Every
// firing leaves a marker and a counter (about 400 bytes): at 1,000
// firings/s an hour of them is about 1.4 GB of Redis, a week 240 GB. A
// copy older than that — an offset reset, a backfill of a slot that ran —
// is answered by the ledger instead (the worker's prepare stage).
const DefaultMarkerTTL = time.Hour

// CancelTTL is how long a cancel request lives, whatever the markers'
// TTL: it waits for an execution's next attempt, which a retry may
// schedule up to a day away (jobspec.MaxRetryDelay), and requests are
// one per user action, not one per firing.
const CancelTTL = 7 * 24 * time.Hour

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts every key under prefix, so several deployments (or tests)
// can share one Redis without seeing each other's keys.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithMaxDeliveries makes an attempt acquired more than n times Poison: its
// workers keep dying on it (a payload that crashes the worker, a target that
// hangs the process), and firing it again would only take down the next one.
// 0, the default, never declares poison.
func WithMaxDeliveries(n int) Option { return func(s *Store) { s.maxDeliveries = max(n, 0) } }

// WithMarkerTTL sets how long delivery counters and the done markers of
// skipped (Overlapping) executions live; use the worker's done TTL, so a
// skipped slot's redeliveries are dropped as long as a finished one's.
func WithMarkerTTL(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.markerTTL = d
		}
	}
}

// WithLiveness ties each lease to its holder's liveness: a lease whose
// holder's worker no longer refreshes its liveness key (Alive) is free, so a
// dead worker's leases taken ahead do not hold its firings back until they
// expire. The lease holder must be "<worker id>/<anything>", the worker id
// the one its worker passes to Alive. The fence still only grows: the new
// holder gets a larger one, and the dead holder's late renewal is fenced.
//
// The liveness key is not among a script's declared keys (it belongs to a
// worker, not a job). On one Redis the lease script reads it; on a Redis
// Cluster every liveness key shares one hash tag ({live}, one slot) and
// the Store reads them beside the script (takeOverDead).
func WithLiveness() Option { return func(s *Store) { s.liveness = true } }

// LivenessKey is the key Alive refreshes for worker: on a cluster under
// the {live} hash tag, so that Living reads them all in one call.
func (s *Store) LivenessKey(worker string) string {
	if s.cluster {
		return s.prefix + "{live}:" + worker
	}
	return s.prefix + "live:" + worker
}

// Alive refreshes worker's liveness key for ttl: while it exists, the
// worker's leases are its own (see WithLiveness). A worker calls it several
// times per ttl; a worker that cannot (dead, or cut off from Redis for
// longer than ttl) loses every lease another delivery asks for.
func (s *Store) Alive(ctx context.Context, worker string, ttl time.Duration) error {
	if worker == "" || strings.Contains(worker, "/") || ttl <= 0 {
		return fmt.Errorf("lease: alive: worker %q must be non-empty without '/' and ttl %s positive", worker, ttl)
	}
	if err := aliveScript.Run(ctx, s.rdb, []string{s.LivenessKey(worker)}, ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("lease: alive %s: %w", worker, err)
	}
	return nil
}

// aliveScript: KEYS liveness key; ARGV ttl ms. A script, so Alive needs no
// more of the client than the lease calls do.
var aliveScript = redis.NewScript(`redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) return 1`)

// LivenessMarkerKey is a key without a TTL that Living sets when it finds
// it missing: its absence says Redis lost its keys (a restart without
// persistence), so every liveness key is missing for a moment though its
// worker lives.
func (s *Store) LivenessMarkerKey() string { return s.LivenessKey("") + "marker" }

// Living reports, in one round trip, whether each worker's liveness key
// exists, and kept: whether Redis kept its keys since the previous call
// (the marker was there; when it was not, Living set it, and a missing
// liveness key says nothing yet about its worker).
func (s *Store) Living(ctx context.Context, workers []string) (alive []bool, kept bool, err error) {
	left, kept, err := s.LivingFor(ctx, workers)
	if err != nil {
		return nil, false, err
	}
	alive = make([]bool, len(workers))
	for i, d := range left {
		alive[i] = d > 0
	}
	return alive, kept, nil
}

// LivingFor is Living with how long each liveness key has left (0: gone).
func (s *Store) LivingFor(ctx context.Context, workers []string) (left []time.Duration, kept bool, err error) {
	keys := make([]string, 0, len(workers)+1)
	keys = append(keys, s.LivenessMarkerKey())
	for _, w := range workers {
		keys = append(keys, s.LivenessKey(w))
	}
	res, err := livingScript.Run(ctx, s.rdb, keys).Int64Slice()
	if err != nil {
		return nil, false, fmt.Errorf("lease: living: %w", err)
	}
	if len(res) != len(keys) {
		return nil, false, fmt.Errorf("lease: living: %d answers for %d keys", len(res), len(keys))
	}
	left = make([]time.Duration, len(workers))
	for i := range workers {
		left[i] = time.Duration(max(res[i+1], 0)) * time.Millisecond
	}
	return left, res[0] == 1, nil
}

// livingScript: KEYS[1] the marker, KEYS[2..] liveness keys. Returns the
// marker's presence before the call (setting it when missing), then per
// liveness key the ms it has left, 0 when it is gone (Alive always sets a
// TTL; a key without one counts as a day).
var livingScript = redis.NewScript(`
local out = {redis.call('EXISTS', KEYS[1])}
if out[1] == 0 then redis.call('SET', KEYS[1], '1') end
for i = 2, #KEYS do
  local p = redis.call('PTTL', KEYS[i])
  if p == -1 then p = 86400000 elseif p < 0 then p = 0 end
  out[i] = p
end
return out`)

// New returns a Store over rdb: a *redis.Client (one Redis, or Sentinel's
// failover client), a *redis.ClusterClient, or a redis.UniversalClient
// that is either. On a cluster client the batch calls (AcquireMany,
// ReleaseMany, FinishMany) send one script call per hash slot of the
// batch, pipelined; elsewhere a batch is one call. See DESIGN.md, "Redis
// Cluster".
func New(rdb Client, opts ...Option) *Store {
	_, cluster := rdb.(*redis.ClusterClient)
	s := &Store{rdb: rdb, cluster: cluster, prefix: DefaultPrefix, markerTTL: DefaultMarkerTTL}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Keys are the Redis keys of one job and one of its executions.
type Keys struct {
	Lease   string // string: the holder; expires with the lease
	Done    string // string: "done", or the highest finished attempt
	Version string // string: the job's published version; no expiry
	Fence   string // string: the job's last fence token; no expiry
	// Running is the overlap policy's set of the job's running
	// executions: a sorted set of execution id → when its place ends
	// (Redis clock, Unix ms), with the lease (or after a retry's backoff).
	Running string
	// Buffered is the queue of executions waiting behind the running ones
	// (BUFFER_ONE, BUFFER_ALL): a sorted set of execution id → slot (Unix
	// ms).
	Buffered string
	// BufferSeen is a hash of queued execution id → when it is dropped
	// from the queue unless it asks again (Unix ms): a queued firing that
	// stops asking (its job changed, its worker died) does not block the
	// queue.
	BufferSeen string
	// Deliveries is a hash of attempt → times acquired, per execution.
	Deliveries string
	// Cancel is the execution's cancel request: who asked.
	Cancel string
}

// Keys returns the keys Store uses for jobID and executionID.
//
// The nine keys are cut from one string (one allocation instead of nine:
// Keys runs twice per firing, at its lease and at its settle). The running
// set and the queue are "runs" and "bufq", not the "run" and "buf" strings
// of releases before BUFFER_ALL and max_concurrency, so a rolling upgrade
// never finds a key of the other type.
func (s *Store) Keys(jobID, executionID string) Keys {
	tag := len(s.prefix) + len("{j:") + len(jobID) + len("}:")
	suffixes := [9]string{"lease:", "done:", "ver", "fence", "runs", "bufq", "bufseen", "dlv:", "cancel:"}
	perExecution := [9]bool{true, true, false, false, false, false, false, true, true}
	n := 9 * tag
	for i, sfx := range suffixes {
		n += len(sfx)
		if perExecution[i] {
			n += len(executionID)
		}
	}
	var b strings.Builder
	b.Grow(n)
	var ends [9]int
	for i, sfx := range suffixes {
		b.WriteString(s.prefix)
		b.WriteString("{j:")
		b.WriteString(jobID)
		b.WriteString("}:")
		b.WriteString(sfx)
		if perExecution[i] {
			b.WriteString(executionID)
		}
		ends[i] = b.Len()
	}
	all := b.String()
	cut := func(i int) string {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return all[start:ends[i]]
	}
	return Keys{Lease: cut(0), Done: cut(1), Version: cut(2), Fence: cut(3), Running: cut(4), Buffered: cut(5), BufferSeen: cut(6), Deliveries: cut(7), Cancel: cut(8)}
}

// acquireScript decides a batch of executions in one round trip. For entry
// i (from 0), KEYS[9i+1..9i+9] are lease, done, ver, fence, runs, bufq,
// bufseen, dlv, cancel and ARGV[4+9i+1..4+9i+9] are holder, ttl ms,
// version, attempt, execution id, overlap (0 allow, 1 skip, 2 buffer one,
// 3 buffer all, 4 cancel other, 5 terminate other), continuing (1: a retry
// of a started execution), max concurrency, queue order; ARGV[1] is max
// deliveries (0: no limit), ARGV[2] the marker ttl ms, ARGV[3] the
// liveness key prefix (empty: leases are not tied to their holders'
// liveness; see WithLiveness), ARGV[4] the BUFFER_ALL queue's bound and
// ARGV[5] the holders the caller found dead, newline-separated (on a
// cluster, where the script cannot read the liveness keys: see
// takeOverDead). A lease held by another holder whose worker's liveness
// key is gone, or that ARGV[5] names, is taken over as if it had expired
// (the holder is "<worker>/<n>"). Held replies name the holder.
//
// The running set (runs) holds execution id → the end of its place (Redis
// clock, ms): places that ended are dropped before the set is counted, so
// a dead worker's executions leave it with their leases. The queue (bufq,
// execution id → slot ms) is kept only while its firings keep asking
// (bufseen: execution id → when it is dropped unless it asks again), so a
// queued firing that never comes back (its job changed, its copy finished
// elsewhere) does not block the ones behind it for longer than that. Keys
// of another execution of the job (the one CANCEL_OTHER or TERMINATE_OTHER
// cancels) are named from this execution's, with the other id; they share
// the job's hash tag, so the script stays on one Cluster slot.
//
// Entries are decided in order, so two entries of one job see each other's
// effects (the second gets the larger fence, or is Overlapping behind the
// first) exactly as two calls one after the other would.
//
// Numbers stay below 2^53 (microseconds since 1970 are about 2^51), so Lua's
// doubles hold them exactly; string.format('%d') writes them without an
// exponent.
var acquireScript = redis.NewScript(`
local maxd = tonumber(ARGV[1])
local marker = ARGV[2]
local live = ARGV[3]
local maxq = tonumber(ARGV[4])
local dead = {}
for d in string.gmatch(ARGV[5], '[^\n]+') do dead[d] = true end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowms = math.floor(now / 1000)
local out = {}
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local function unqueue(q, seen, ex)
  redis.call('ZREM', q, ex)
  redis.call('HDEL', seen, ex)
end
-- other names another execution's key from this execution's.
local function other(key, ex, id) return string.sub(key, 1, #key - #ex) .. id end
-- k and a index entry i's first key and argument less one; decide
-- returns the entry's four reply values.
local function decide(k, a)
  local ex = ARGV[a+5]
  local mode = tonumber(ARGV[a+6])
  local runs, q, seen = KEYS[k+5], KEYS[k+6], KEYS[k+7]
  -- One read of the entry's five plain keys (done, ver, lease, cancel,
  -- fence): the entry writes none of them before it has used its value.
  local m = redis.call('MGET', KEYS[k+2], KEYS[k+3], KEYS[k+1], KEYS[k+9], KEYS[k+4])
  local d = m[1]
  if d then
    if mode == 2 or mode == 3 then unqueue(q, seen, ex) end
    if d == 'done' then return 1, 0, 1, '' end
    if d == 'skipped' then return 1, 0, 2, '' end
    if d == 'cancelled' then return 1, 0, 3, '' end
    local fin = tonumber(d)
    if fin and fin >= tonumber(ARGV[a+4]) then return 1, 0, 0, '' end
  end
  local v = tonumber(ARGV[a+3])
  local cur = tonumber(m[2] or '0')
  if v < cur then
    if mode == 2 or mode == 3 then unqueue(q, seen, ex) end
    return 2, 0, cur, ''
  end
  if v > cur then redis.call('SET', KEYS[k+3], ARGV[a+3]) end
  local holder = ARGV[a+1]
  local h = m[3]
  if h and h ~= holder then
    if dead[h] then
      h = nil
    else
      local w = nil
      if live ~= '' then w = string.match(h, '^(.+)/[^/]*$') end
      if not w then return 3, -1, redis.call('PTTL', KEYS[k+1]), h end
      -- The holder's worker's liveness key left: a caller that looks
      -- again when it ends finds the lease free if that worker died.
      local lp = redis.call('PTTL', live .. w)
      if lp >= 0 then return 3, lp, redis.call('PTTL', KEYS[k+1]), h end
      h = nil
    end
  end
  local ttl = tonumber(ARGV[a+2])
  local c = m[4]
  if c then
    redis.call('SET', KEYS[k+2], 'cancelled', 'PX', marker)
    if mode > 0 then
      redis.call('ZREM', runs, ex)
      unqueue(q, seen, ex)
    end
    return 7, 0, 0, c
  end
  if mode > 0 then
    redis.call('ZREMRANGEBYSCORE', runs, '-inf', nowms)
    if not redis.call('ZSCORE', runs, ex) then
      local cap = math.max(tonumber(ARGV[a+8]), 1)
      local n = redis.call('ZCARD', runs)
      local first, left = '', 0
      if n > 0 then
        local f1 = redis.call('ZRANGE', runs, 0, 0, 'WITHSCORES')
        first, left = f1[1], math.max(tonumber(f1[2]) - nowms, 0)
      end
      if ARGV[a+7] == '1' then
        -- A retry of a started execution is never skipped or queued
        -- behind new slots: it waits for room only.
        if n >= cap then return 5, 0, left, first end
      elseif mode == 2 or mode == 3 then
        local lim = 1
        if mode == 3 then lim = maxq end
        for _, m in ipairs(redis.call('ZRANGE', q, 0, -1)) do
          if tonumber(redis.call('HGET', seen, m) or '0') < nowms then unqueue(q, seen, m) end
        end
        local head = redis.call('ZRANGE', q, 0, 0)[1]
        if n >= cap or (head and head ~= ex) then
          if not redis.call('ZSCORE', q, ex) and redis.call('ZCARD', q) >= lim then
            redis.call('SET', KEYS[k+2], 'skipped', 'PX', marker)
            return 4, 0, 0, first
          end
          local held, behind = left, first
          if n < cap then held, behind = 0, head end
          redis.call('ZADD', q, 'NX', ARGV[a+9], ex)
          local until_ = held + 2 * ttl
          redis.call('HSET', seen, ex, nowms + until_)
          keep(q, until_)
          keep(seen, until_)
          return 5, 0, held, behind
        end
      elseif n >= cap then
        if mode == 1 then
          redis.call('SET', KEYS[k+2], 'skipped', 'PX', marker)
          return 4, 0, 0, first
        end
        local victim = nil
        if mode == 4 then
          -- One running execution asked to cancel is enough: wait for it.
          -- One asked to cancel that holds no lease (between attempts)
          -- has nothing left to end: its place goes.
          local all = redis.call('ZRANGE', runs, 0, -1, 'WITHSCORES')
          local ending, eleft = nil, 0
          for i = 1, #all, 2 do
            if redis.call('EXISTS', other(KEYS[k+9], ex, all[i])) == 1 then
              if redis.call('EXISTS', other(KEYS[k+1], ex, all[i])) == 0 then
                redis.call('ZREM', runs, all[i])
                n = n - 1
              elseif not ending then
                ending, eleft = all[i], math.max(tonumber(all[i+1]) - nowms, 0)
              end
            end
          end
          if n >= cap then
            if ending then return 5, 0, math.min(eleft, 1000), ending end
            local f1 = redis.call('ZRANGE', runs, 0, 0, 'WITHSCORES')
            victim, left = f1[1], math.max(tonumber(f1[2]) - nowms, 0)
            redis.call('SET', other(KEYS[k+9], ex, victim), 'overlap:cancel_other for ' .. ex, 'NX', 'PX', marker)
            if redis.call('EXISTS', other(KEYS[k+1], ex, victim)) == 1 then
              -- Its attempt is in flight: its worker learns at its next
              -- renewal, which no longer extends its place.
              return 5, 0, math.min(left, 1000), victim
            end
            -- Between attempts (a retry's backoff): nothing to wait for.
            redis.call('ZREM', runs, victim)
          end
        else
          victim = first
          redis.call('SET', other(KEYS[k+9], ex, victim), 'overlap:terminate_other for ' .. ex, 'NX', 'PX', marker)
          redis.call('ZREM', runs, victim)
        end
      end
    end
  end
  local n = 0
  local member = ARGV[a+4] .. '/' .. holder
  if not h and redis.call('HSETNX', KEYS[k+8], member, '1') == 1 then
    -- A delivery is counted once, with its holder, however often it
    -- takes its lease again (one that ran out while it waited); it is
    -- uncounted if it gives the lease back unstarted (ReleaseMany).
    n = redis.call('HINCRBY', KEYS[k+8], ARGV[a+4], 1)
    -- The counter's hash lives marker ms from its newest attempt's
    -- first delivery; later deliveries only count. (A count of 1 is the
    -- attempt's first: ReleaseMany removes a count it takes to 0, so no
    -- hash is ever left without its expiry.)
    if n == 1 then redis.call('PEXPIRE', KEYS[k+8], marker) end
  end
  local f = tonumber(m[5] or '0') + 1
  if now > f then f = now end
  redis.call('SET', KEYS[k+4], string.format('%d', f))
  redis.call('SET', KEYS[k+1], holder, 'PX', ttl)
  if mode > 0 then
    redis.call('ZADD', runs, nowms + ttl, ex)
    keep(runs, ttl)
    if mode == 2 or mode == 3 then unqueue(q, seen, ex) end
  end
  if maxd > 0 and n > maxd then return 6, f, n, '' end
  return 0, f, n, ''
end
local o = 0
for i = 0, #KEYS / 9 - 1 do
  local c, f, x, r = decide(9*i, 5+9*i)
  out[o+1], out[o+2], out[o+3], out[o+4] = c, f, x, r
  o = o + 4
end
return out
`)

// Acquire decides whether holder may fire ex now; see the package comment.
// holder must be unique per delivery of a firing (not merely per worker), so
// that two deliveries of one execution to the same worker exclude each other.
// ttl bounds how long a crashed holder blocks the execution (and, under an
// overlap policy, the job).
func (s *Store) Acquire(ctx context.Context, ex Execution, holder string, ttl time.Duration) (Result, error) {
	res, err := s.AcquireMany(ctx, []Acquisition{{Execution: ex, Holder: holder, TTL: ttl}})
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Acquisition is one entry of AcquireMany: Acquire's three arguments.
type Acquisition struct {
	Execution Execution
	Holder    string
	TTL       time.Duration
}

// AcquireMany decides a batch of acquisitions in one Redis round trip, as
// if Acquire were called for each in order (results in the same order). It
// is how the worker takes the leases of the firings due in the next moment
// ahead of their instant: one call for hundreds of firings instead of one
// each. An invalid entry fails the whole call before anything is sent.
//
// Every key of one entry shares its job's hash tag, but a batch spans jobs:
// on Redis Cluster it is one script call per hash slot, pipelined (see
// slotBatch), each deciding its entries in order.
func (s *Store) AcquireMany(ctx context.Context, batch []Acquisition) ([]Result, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	live := ""
	if s.liveness && !s.cluster {
		live = s.LivenessKey("")
	}
	out, holders, err := s.acquire(ctx, batch, live, "")
	if err != nil || !s.liveness || !s.cluster {
		return out, err
	}
	return s.takeOverDead(ctx, batch, out, holders)
}

// takeOverDead is liveness on a Redis Cluster. The lease script cannot
// read a worker's liveness key there (it lives in another slot than the
// job's keys), so the first call returns Held naming the holder; this
// reads the holders' liveness keys (one slot, one call: LivenessKey) and
// asks again for the leases whose holder's worker is gone, naming that
// holder, which the script takes over only if it still holds the lease.
// A live holder's Held gets its HolderAliveFor, as on one node. When the
// liveness keys cannot be read, or Redis lost them (Living's marker),
// nothing is taken over: those leases end with their TTL.
//
// The look at the liveness key and the takeover are two calls, where one
// node decides in one: a worker whose key lapsed and that refreshes it in
// between loses its lease all the same — a worker that late was already
// taken for dead (see DESIGN.md, "Liveness"), and its renewal is fenced.
//
// holders[i] is the holder of entry i's lease when it is Held (the script
// names it; a Result does not carry it, as the worker keeps one per held
// firing).
func (s *Store) takeOverDead(ctx context.Context, batch []Acquisition, out []Result, holders []string) ([]Result, error) {
	if holders == nil {
		return out, nil
	}
	var held []int
	var workers []string
	seen := map[string]bool{}
	for i, r := range out {
		w, ok := holderWorker(holders[i])
		if r.Outcome != Held || !ok {
			continue
		}
		held = append(held, i)
		if !seen[w] {
			seen[w] = true
			workers = append(workers, w)
		}
	}
	if len(held) == 0 {
		return out, nil
	}
	left, kept, err := s.LivingFor(ctx, workers)
	if err != nil || !kept {
		return out, nil
	}
	aliveFor := make(map[string]time.Duration, len(workers))
	for i, w := range workers {
		aliveFor[w] = left[i]
	}
	var again []Acquisition
	var at []int
	var dead []string
	for _, i := range held {
		w, _ := holderWorker(holders[i])
		if d := aliveFor[w]; d > 0 {
			out[i].HolderAliveFor = d
			continue
		}
		again = append(again, batch[i])
		at = append(at, i)
		dead = append(dead, holders[i])
	}
	if len(again) == 0 {
		return out, nil
	}
	res, _, err := s.acquire(ctx, again, "", strings.Join(dead, "\n"))
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = res[j]
	}
	return out, nil
}

// holderWorker is the worker of a holder "<worker>/<n>".
func holderWorker(holder string) (string, bool) {
	i := strings.LastIndexByte(holder, '/')
	if i <= 0 {
		return "", false
	}
	return holder[:i], true
}

// acquire is one AcquireMany round (see acquireScript for live and dead),
// with each Held entry's holder (nil when none is Held).
func (s *Store) acquire(ctx context.Context, batch []Acquisition, live, dead string) ([]Result, []string, error) {
	b := s.newBatch(s.maxDeliveries, s.markerTTL.Milliseconds(), live, MaxBuffered, dead)
	for i, a := range batch {
		ex := a.Execution
		if err := check(ex, a.Holder, a.TTL); err != nil {
			return nil, nil, err
		}
		k := s.Keys(ex.JobID, ex.ExecutionID)
		continuing := "0"
		if ex.continuing() {
			continuing = "1"
		}
		b.add(i, []string{k.Lease, k.Done, k.Version, k.Fence, k.Running, k.Buffered, k.BufferSeen, k.Deliveries, k.Cancel},
			a.Holder, a.TTL.Milliseconds(), ex.Version, ex.Attempt, ex.ExecutionID, int(ex.Overlap), continuing, ex.MaxConcurrency, ex.Order)
	}
	vals, err := b.run(ctx, s.rdb, acquireScript, len(batch), 4)
	if err != nil {
		return nil, nil, fmt.Errorf("lease: acquire %s (%d in the batch): %w", batch[0].Execution.ExecutionID, len(batch), err)
	}
	out := make([]Result, len(batch))
	var holders []string // only once an entry is Held: rare on the firing path
	for i := range batch {
		r, err := acquireResult(vals[i])
		if err != nil {
			return nil, nil, fmt.Errorf("lease: acquire %s: %w", batch[i].Execution.ExecutionID, err)
		}
		out[i] = r
		if r.Outcome == Held {
			if holders == nil {
				holders = make([]string, len(batch))
			}
			holders[i], _ = vals[i][3].(string)
		}
	}
	return out, holders, nil
}

func acquireResult(vals []any) (Result, error) {
	code, _ := vals[0].(int64)
	fence, _ := vals[1].(int64)
	extra, _ := vals[2].(int64)
	running, _ := vals[3].(string)
	switch code {
	case 0:
		return Result{Outcome: Acquired, Fence: fence, Deliveries: extra}, nil
	case 1:
		return Result{Outcome: AlreadyDone, Finished: Finished(extra)}, nil
	case 2:
		return Result{Outcome: Stale, CurrentVersion: extra}, nil
	case 3:
		r := Result{Outcome: Held, HeldFor: time.Duration(max(extra, 0)) * time.Millisecond}
		if fence >= 0 {
			r.HolderAliveFor = time.Duration(fence) * time.Millisecond
		}
		return r, nil
	case 4:
		return Result{Outcome: Overlapping, Running: running}, nil
	case 5:
		return Result{Outcome: Waiting, HeldFor: time.Duration(max(extra, 0)) * time.Millisecond, Running: running}, nil
	case 6:
		return Result{Outcome: Poison, Fence: fence, Deliveries: extra}, nil
	case 7:
		return Result{Outcome: Cancelled, CancelledBy: running}, nil
	default:
		return Result{}, fmt.Errorf("unknown code %d", code)
	}
}

// renewScript extends a batch of leases in one round trip. For entry i
// (from 0), KEYS[3i+1..3i+3] are lease, runs, cancel and ARGV[3i+1..3i+3]
// are holder, ttl ms, execution id. Each entry's reply is two values: 1
// and "" (renewed), 0 and "" (the lease ran out), -1 and "" (another
// holder has it), or 2 and who cancelled (renewed, but cancelled). The
// execution's place in the job's running set, if it has one, lasts as
// long as the lease — unless the execution was asked to cancel: then its
// place is left to end, so a CANCEL_OTHER waiting for it waits at most
// one TTL even if its worker never stops the attempt.
var renewScript = redis.NewScript(`
local out = {}
local nowms
for i = 0, #KEYS / 3 - 1 do
  local lease, runs, cancel = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local holder, ttl, ex = ARGV[3*i+1], tonumber(ARGV[3*i+2]), ARGV[3*i+3]
  local h = redis.call('GET', lease)
  local code, by = 1, ''
  if not h then
    code = 0
  elseif h ~= holder then
    code = -1
  else
    redis.call('PEXPIRE', lease, ttl)
    local c = redis.call('GET', cancel)
    if c then
      code, by = 2, c
    elseif redis.call('ZSCORE', runs, ex) then
      if not nowms then
        local t = redis.call('TIME')
        nowms = math.floor(tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)
      end
      redis.call('ZADD', runs, nowms + ttl, ex)
      if redis.call('PTTL', runs) < ttl then redis.call('PEXPIRE', runs, ttl) end
    end
  end
  out[2*i+1] = code
  out[2*i+2] = by
end
return out
`)

// Renew extends holder's lease on ex to ttl from now, only if holder still
// has it. It returns ErrLost when the lease expired, ErrFenced when another
// holder took it, and a *CancelledError (ErrCancelled) when the lease was
// renewed but the execution has been cancelled: the caller abandons the
// attempt and finishes it under the lease.
func (s *Store) Renew(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	errs, err := s.RenewMany(ctx, []Renewal{{Execution: ex, Holder: holder, TTL: ttl}})
	if err != nil {
		return err
	}
	return errs[0]
}

// Renewal is one entry of RenewMany.
type Renewal struct {
	Execution Execution
	Holder    string
	TTL       time.Duration
}

// RenewMany renews a batch of leases in one round trip (one per slot on a
// cluster) and returns each entry's answer as Renew would: nil, ErrLost,
// ErrFenced or a *CancelledError. A worker renews the attempts that
// outlast a third of their lease together, so a backlog of slow settles
// costs a call per tick, not one per firing. err is the call's own
// failure (Redis unreachable, a bad entry): then no answer is known.
func (s *Store) RenewMany(ctx context.Context, batch []Renewal) ([]error, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	b := s.newBatch()
	for i, r := range batch {
		if err := check(r.Execution, r.Holder, r.TTL); err != nil {
			return nil, err
		}
		k := s.Keys(r.Execution.JobID, r.Execution.ExecutionID)
		b.add(i, []string{k.Lease, k.Running, k.Cancel}, r.Holder, r.TTL.Milliseconds(), r.Execution.ExecutionID)
	}
	vals, err := b.run(ctx, s.rdb, renewScript, len(batch), 2)
	if err != nil {
		return nil, fmt.Errorf("lease: renew %s (%d in the batch): %w", batch[0].Execution.ExecutionID, len(batch), err)
	}
	out := make([]error, len(batch))
	for i, v := range vals {
		n, _ := v[0].(int64)
		switch n {
		case 1:
		case 0:
			out[i] = ErrLost
		case 2:
			by, _ := v[1].(string)
			out[i] = &CancelledError{By: by}
		default:
			out[i] = ErrFenced
		}
	}
	return out, nil
}

// releaseScript gives back a batch of leases in one round trip. For entry
// i (from 0), KEYS[3i+1..3i+3] are lease, runs, dlv and ARGV[4i+1..4i+4]
// are holder, execution id, attempt, unstarted ("1": the delivery never
// sent its request). Each entry deletes the lease if holder still has it
// (the execution's place in the running set goes with it) and, when
// unstarted, uncounts the delivery if it was counted (its holder's member
// of dlv), whether or not the lease had run out meanwhile. The reply has
// one value per entry: 1 when the lease was deleted.
var releaseScript = redis.NewScript(`
local out = {}
for i = 0, #KEYS / 3 - 1 do
  local lease, runs, dlv = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local holder, ex, attempt, unstarted = ARGV[4*i+1], ARGV[4*i+2], ARGV[4*i+3], ARGV[4*i+4]
  out[i+1] = 0
  if redis.call('GET', lease) == holder then
    redis.call('ZREM', runs, ex)
    redis.call('DEL', lease)
    out[i+1] = 1
  end
  if unstarted == '1' and redis.call('HDEL', dlv, attempt .. '/' .. holder) == 1 then
    if redis.call('HINCRBY', dlv, attempt, -1) <= 0 then redis.call('HDEL', dlv, attempt) end
  end
end
return out
`)

// Release gives up holder's lease on ex, so another delivery can fire it
// without waiting for the lease to expire. It reports whether holder still
// had the lease. The delivery stays counted (it may have started); see
// ReleaseMany for one that did not.
func (s *Store) Release(ctx context.Context, ex Execution, holder string) (bool, error) {
	res, err := s.ReleaseMany(ctx, []Release{{Execution: ex, Holder: holder}})
	if err != nil {
		return false, err
	}
	return res[0], nil
}

// untouchedScript answers, for entry i (from 0) with KEYS[4i+1..4i+4] the
// execution's done marker, lease, cancel request and delivery counter,
// 1 when none of them exists, else 0. It writes nothing.
var untouchedScript = redis.NewScript(`
local out = {}
for i = 0, #KEYS / 4 - 1 do
  if redis.call('EXISTS', KEYS[4*i+1], KEYS[4*i+2], KEYS[4*i+3], KEYS[4*i+4]) == 0 then
    out[i+1] = 1
  else
    out[i+1] = 0
  end
end
return out
`)

// UntouchedMany reports, per execution, whether Redis holds nothing of it:
// no done marker, no lease, no cancel request and no delivery counted —
// no delivery of it ever took a lease (that the markers' life still
// remembers) or was asked to cancel. One read per execution, one round
// trip per batch; it writes nothing. The worker asks it before it skips
// a firing its job's misfire policy does not fire: only an untouched one
// is skipped without a lease; one some delivery touched (a copy of one
// that finished, whose record may still need writing from its marker;
// one another delivery holds; one cancelled) goes the leased way, whose
// answer says which. On Redis Cluster it is one script call per hash
// slot, pipelined.
func (s *Store) UntouchedMany(ctx context.Context, batch []Execution) ([]bool, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	b := s.newBatch()
	for i, ex := range batch {
		if ex.JobID == "" || ex.ExecutionID == "" {
			return nil, errors.New("lease: untouched: job and execution id are required")
		}
		k := s.Keys(ex.JobID, ex.ExecutionID)
		b.add(i, []string{k.Done, k.Lease, k.Cancel, k.Deliveries})
	}
	vals, err := b.run(ctx, s.rdb, untouchedScript, len(batch), 1)
	if err != nil {
		return nil, fmt.Errorf("lease: untouched %s (%d in the batch): %w", batch[0].ExecutionID, len(batch), err)
	}
	out := make([]bool, len(batch))
	for i, v := range vals {
		n, _ := v[0].(int64)
		out[i] = n == 1
	}
	return out, nil
}

// Release is one entry of ReleaseMany.
type Release struct {
	Execution Execution
	Holder    string
	// Unstarted says the delivery never sent its request (its partition
	// moved, the worker is stopping, the firing goes back to be prepared
	// later): it is uncounted, so giving a lease back is not a delivery
	// toward WithMaxDeliveries. Only a holder that knows it did not start
	// may say so; a crash never does, so a worker that dies on an attempt
	// still counts.
	Unstarted bool
}

// ReleaseMany gives back a batch of leases in one round trip, as Release
// would one by one, and uncounts the deliveries marked Unstarted. It
// reports, per entry, whether the holder still had the lease. An invalid
// entry fails the whole call before anything is sent. On Redis Cluster it
// is one script call per hash slot, pipelined.
func (s *Store) ReleaseMany(ctx context.Context, batch []Release) ([]bool, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	b := s.newBatch()
	for i, r := range batch {
		ex := r.Execution
		if ex.JobID == "" || ex.ExecutionID == "" {
			return nil, errors.New("lease: release: job and execution id are required")
		}
		if r.Holder == "" {
			return nil, errors.New("lease: release: holder is required")
		}
		unstarted := "0"
		if r.Unstarted {
			unstarted = "1"
		}
		k := s.Keys(ex.JobID, ex.ExecutionID)
		b.add(i, []string{k.Lease, k.Running, k.Deliveries}, r.Holder, ex.ExecutionID, max(ex.Attempt, 1), unstarted)
	}
	vals, err := b.run(ctx, s.rdb, releaseScript, len(batch), 1)
	if err != nil {
		return nil, fmt.Errorf("lease: release %s (%d in the batch): %w", batch[0].Execution.ExecutionID, len(batch), err)
	}
	out := make([]bool, len(batch))
	for i, v := range vals {
		n, _ := v[0].(int64)
		out[i] = n == 1
	}
	return out, nil
}

// finishScript finishes a batch of attempts in one round trip. For entry i
// (from 0), KEYS[3i+1..3i+3] are lease, done, runs and ARGV[6i+1..6i+6] are
// holder, ttl ms, mark ("done", "cancelled" or an attempt number),
// execution id, keep-running ms, joins ("0": the execution's overlap is
// ALLOW, under which Acquire never gives it a place in the running set).
// Each entry writes the done marker (an attempt number only ever raises
// it, and never overwrites "done", "skipped" or "cancelled"; "cancelled"
// never overwrites "done"), then, if the execution has a place in the
// job's running set, keeps it for keep-running ms (a retry is pending) or
// removes it, then releases holder's lease.
var finishScript = redis.NewScript(`
local t = redis.call('TIME')
local nowms = math.floor(tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)
for i = 0, #KEYS / 3 - 1 do
  local lease, done, runs = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local holder, ttl, mark, ex, keep, joins = ARGV[6*i+1], ARGV[6*i+2], ARGV[6*i+3], ARGV[6*i+4], ARGV[6*i+5], ARGV[6*i+6]
  if mark == 'done' then
    redis.call('SET', done, 'done', 'PX', ttl)
  else
    local d = redis.call('GET', done)
    if mark == 'cancelled' then
      if d ~= 'done' then redis.call('SET', done, 'cancelled', 'PX', ttl) end
    elseif d ~= 'done' and d ~= 'skipped' and d ~= 'cancelled' and (not d or tonumber(d) == nil or tonumber(d) < tonumber(mark)) then
      redis.call('SET', done, mark, 'PX', ttl)
    end
  end
  if joins ~= '0' and redis.call('ZSCORE', runs, ex) then
    local k = tonumber(keep)
    if k > 0 then
      redis.call('ZADD', runs, nowms + k, ex)
      if redis.call('PTTL', runs) < k then redis.call('PEXPIRE', runs, k) end
    else
      redis.call('ZREM', runs, ex)
    end
  end
  if holder ~= '' and redis.call('GET', lease) == holder then redis.call('DEL', lease) end
end
return 1
`)

// MarkDone records that ex succeeded: every later Acquire of the execution,
// whatever its attempt, is AlreadyDone for ttl (days: longer than any
// redelivery or retry can arrive). It also clears the job's running marker
// and releases holder's lease; pass an empty holder to only mark.
func (s *Store) MarkDone(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	return s.FinishMany(ctx, []Finish{{Execution: ex, Holder: holder, TTL: ttl, Mark: FinishDone}})
}

// MarkAttemptDone records that attempt ex.Attempt finished without success
// and nothing follows it in this round (the execution is dead): a
// redelivery of the same attempt is AlreadyDone, while a later attempt (a
// re-drive) may still fire. It clears the job's running marker and releases
// holder's lease.
func (s *Store) MarkAttemptDone(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	return s.FinishMany(ctx, []Finish{{Execution: ex, Holder: holder, TTL: ttl, Mark: FinishAttempt}})
}

// MarkRetryPending is MarkAttemptDone for an attempt whose retry is staged:
// the job's running marker, if it names the execution, is kept for
// keepRunning (the backoff plus a margin), so under SKIP and BUFFER_ONE the
// execution still counts as running until its retry takes the marker again.
func (s *Store) MarkRetryPending(ctx context.Context, ex Execution, holder string, ttl, keepRunning time.Duration) error {
	return s.FinishMany(ctx, []Finish{{Execution: ex, Holder: holder, TTL: ttl, Mark: FinishRetryPending, KeepRunning: keepRunning}})
}

// FinishMark says which marker a Finish writes.
type FinishMark int

const (
	// FinishDone is MarkDone's: the execution succeeded.
	FinishDone FinishMark = iota
	// FinishAttempt is MarkAttemptDone's: this attempt ended, nothing
	// follows it.
	FinishAttempt
	// FinishRetryPending is MarkRetryPending's: this attempt ended and its
	// retry is staged; the running marker is kept for KeepRunning.
	FinishRetryPending
	// FinishCancelled: the execution was cancelled; no attempt of it
	// fires again.
	FinishCancelled
)

// Finish is one entry of FinishMany.
type Finish struct {
	// Execution is the one its attempt acquired, with the same Overlap:
	// an ALLOW execution never has a place in the job's running set, so
	// finishing it does not look there.
	Execution Execution
	// Holder's lease is released; empty only marks.
	Holder string
	// TTL is the done marker's.
	TTL  time.Duration
	Mark FinishMark
	// KeepRunning is how long the running marker is kept
	// (FinishRetryPending only).
	KeepRunning time.Duration
}

// FinishMany writes the markers of a batch of finished attempts and
// releases their leases in one Redis round trip, as MarkDone,
// MarkAttemptDone and MarkRetryPending would one by one. The worker settles
// the attempts that ended in the same moment with one call. An invalid
// entry fails the whole call before anything is sent. On Redis Cluster it
// is one script call per hash slot, pipelined.
func (s *Store) FinishMany(ctx context.Context, batch []Finish) error {
	if len(batch) == 0 {
		return nil
	}
	b := s.newBatch()
	for i, f := range batch {
		ex := f.Execution
		if ex.JobID == "" || ex.ExecutionID == "" {
			return errors.New("lease: job and execution id are required")
		}
		if f.TTL <= 0 {
			return errors.New("lease: done marker ttl must be positive")
		}
		mark, keep := "done", time.Duration(0)
		switch f.Mark {
		case FinishDone:
		case FinishCancelled:
			mark = "cancelled"
		case FinishAttempt, FinishRetryPending:
			if ex.Attempt < 1 {
				return errors.New("lease: attempt must be at least 1")
			}
			mark = strconv.Itoa(int(ex.Attempt))
			if f.Mark == FinishRetryPending {
				keep = max(f.KeepRunning, time.Millisecond)
			}
		default:
			return fmt.Errorf("lease: unknown finish mark %d", f.Mark)
		}
		joins := "1"
		if ex.Overlap == OverlapAllow {
			joins = "0"
		}
		k := s.Keys(ex.JobID, ex.ExecutionID)
		b.add(i, []string{k.Lease, k.Done, k.Running}, f.Holder, f.TTL.Milliseconds(), mark, ex.ExecutionID, keep.Milliseconds(), joins)
	}
	if _, err := b.run(ctx, s.rdb, finishScript, len(batch), 0); err != nil {
		return fmt.Errorf("lease: mark %s (%d in the batch): %w", batch[0].Execution.ExecutionID, len(batch), err)
	}
	return nil
}

// publishScript: KEYS ver; ARGV version, channel, message. Raises only;
// returns the stored one. A raise is also announced on the channel, so
// workers holding firings already leased ahead of their instant learn of
// the change without a round trip per firing.
var publishScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local v = tonumber(ARGV[1])
if v > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return v
end
return cur
`)

// PublishVersion makes version the job's current version, so workers skip
// firings staged under older ones. It only ever raises the stored version:
// a delayed publish of an older version cannot resurrect stale firings.
// A raise is announced on VersionsChannel (see Version). The api calls it
// after every change to a job commits.
func (s *Store) PublishVersion(ctx context.Context, jobID string, version int64) error {
	if jobID == "" {
		return errors.New("lease: job id is required")
	}
	k := s.Keys(jobID, "")
	msg := jobID + " " + strconv.FormatInt(version, 10)
	if err := publishScript.Run(ctx, s.rdb, []string{k.Version}, version, s.VersionsChannel(), msg).Err(); err != nil {
		return fmt.Errorf("lease: publish version of job %s: %w", jobID, err)
	}
	return nil
}

// VersionsChannel is the pub/sub channel PublishVersion announces raised
// versions on: one message per change, "<job id> <version>".
func (s *Store) VersionsChannel() string { return s.prefix + "versions" }

// Version reads a VersionsChannel message.
func Version(msg string) (jobID string, version int64, ok bool) {
	id, v, found := strings.Cut(msg, " ")
	if !found || id == "" {
		return "", 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id, n, true
}

func check(ex Execution, holder string, ttl time.Duration) error {
	switch {
	case ex.JobID == "" || ex.ExecutionID == "":
		return errors.New("lease: job and execution id are required")
	case holder == "":
		return errors.New("lease: holder is required")
	case ttl < time.Millisecond:
		return fmt.Errorf("lease: ttl %s is below a millisecond", ttl)
	case ex.Attempt < 1:
		return errors.New("lease: attempt must be at least 1")
	}
	return nil
}

// CancelState is what Cancel found.
type CancelState int

const (
	// CancelRunning: an attempt holds the lease; its worker abandons it at
	// its next renewal (within a third of the lease TTL or so).
	CancelRunning CancelState = iota
	// CancelPending: no attempt is in flight (not yet fired, or between
	// attempts); the next one is Cancelled instead of firing.
	CancelPending
	// CancelFinished: the execution already succeeded, was skipped or was
	// cancelled; nothing was asked.
	CancelFinished
)

// cancelScript: KEYS done, lease, cancel, runs; ARGV who, ttl ms, execution
// id. Replies {state, who}: the first request's who stays (a second cancel
// does not rename the first). An execution between attempts leaves the
// job's running set at once: nothing of it runs to wait for.
var cancelScript = redis.NewScript(`
local d = redis.call('GET', KEYS[1])
if d == 'done' or d == 'skipped' or d == 'cancelled' then return {2, d} end
redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2])
local who = redis.call('GET', KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, who} end
redis.call('ZREM', KEYS[4], ARGV[3])
return {1, who}
`)

// Cancel asks that an execution be cancelled, by whom (a principal, or an
// overlap policy): a running attempt is abandoned by its worker at its
// next renewal (Renew returns a *CancelledError), and an attempt not yet
// started is Cancelled by Acquire. The request lasts CancelTTL (or the
// marker TTL, if longer). It
// reports what it found and who the ledger will name (the first to ask).
func (s *Store) Cancel(ctx context.Context, jobID, executionID, by string) (CancelState, string, error) {
	if jobID == "" || executionID == "" || by == "" {
		return 0, "", errors.New("lease: cancel: job id, execution id and who are required")
	}
	k := s.Keys(jobID, executionID)
	vals, err := cancelScript.Run(ctx, s.rdb, []string{k.Done, k.Lease, k.Cancel, k.Running}, by, max(s.markerTTL, CancelTTL).Milliseconds(), executionID).Slice()
	if err != nil {
		return 0, "", fmt.Errorf("lease: cancel %s: %w", executionID, err)
	}
	if len(vals) != 2 {
		return 0, "", fmt.Errorf("lease: cancel %s: unexpected reply of %d values", executionID, len(vals))
	}
	n, _ := vals[0].(int64)
	who, _ := vals[1].(string)
	return CancelState(n), who, nil
}
