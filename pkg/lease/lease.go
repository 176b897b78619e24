// Package lease decides, in one Redis round trip per firing, whether a worker
// may fire an execution now, and hands it the fence token to fire with.
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
//  4. the job's overlap policy (SKIP, BUFFER_ONE): when another execution
//     of the job is running, a new execution is Overlapping (skipped, and
//     marked done so its redeliveries are dropped too) or, under
//     BUFFER_ONE, the one execution allowed to wait behind it (Waiting);
//     a retry of an execution that already started always waits;
//
//  5. the delivery count of this attempt: an attempt taken more than
//     WithMaxDeliveries times (its workers crashed on it) is Poison — the
//     lease is taken, so the caller can dead-letter it exclusively;
//
// and on success bumps the job's fence counter and returns it, and marks
// the job running (overlap policies only). The fence is monotonic per job
// even if Redis loses its data, because it is floored by Redis's clock in
// microseconds; see DESIGN.md beside this file for the argument and the key
// layout.
//
// Every key of one job carries the hash tag {j:<job id>}, so a script that
// touches several of them runs on one Redis Cluster slot.
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
	// Running is the execution id of the running execution, set when
	// Overlapping or Waiting.
	Running string
	// Deliveries is how many times this attempt has been acquired,
	// including this time (Acquired, Poison; 0 when the same holder took it
	// again).
	Deliveries int64
	// Finished is what the marker behind an AlreadyDone says.
	Finished Finished
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
)

func (o Overlap) String() string {
	switch o {
	case OverlapSkip:
		return "SKIP"
	case OverlapBufferOne:
		return "BUFFER_ONE"
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
}

// continuing reports whether ex is a retry of an execution that started.
func (ex Execution) continuing() bool { return ex.Attempt > max(ex.FirstAttempt, 1) }

// ErrLost is returned by Renew when the lease expired and nobody holds it:
// the caller may no longer assume exclusivity.
var ErrLost = errors.New("lease: lost (expired)")

// ErrFenced is returned by Renew when another holder has taken the lease:
// it fires with a larger fence, and the caller's result must be discarded.
var ErrFenced = errors.New("lease: fenced by another holder")

// Store runs the lease scripts against Redis.
type Store struct {
	rdb           redis.Scripter
	prefix        string
	maxDeliveries int
	markerTTL     time.Duration
	liveness      bool
}

// DefaultMarkerTTL is how long delivery counters and the done markers of
// skipped executions live unless WithMarkerTTL says otherwise.
const DefaultMarkerTTL = 7 * 24 * time.Hour

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
// worker, not a job), so this needs a standalone Redis or a single-slot
// deployment; on Redis Cluster, leave it off.
func WithLiveness() Option { return func(s *Store) { s.liveness = true } }

// LivenessKey is the key Alive refreshes for worker.
func (s *Store) LivenessKey(worker string) string { return s.prefix + "live:" + worker }

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

// New returns a Store over rdb: a *redis.Client, *redis.ClusterClient or
// anything else that can run scripts.
func New(rdb redis.Scripter, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: DefaultPrefix, markerTTL: DefaultMarkerTTL}
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
	// Running is the overlap policy's marker: the execution id of the
	// job's running execution; expires with its lease (or after a retry's
	// backoff).
	Running string
	// Buffered is BUFFER_ONE's slot: the execution id waiting behind the
	// running one.
	Buffered string
	// Deliveries is a hash of attempt → times acquired, per execution.
	Deliveries string
}

// Keys returns the keys Store uses for jobID and executionID.
//
// The seven keys are cut from one string (one allocation instead of seven:
// Keys runs twice per firing, at its lease and at its settle).
func (s *Store) Keys(jobID, executionID string) Keys {
	tag := len(s.prefix) + len("{j:") + len(jobID) + len("}:")
	suffixes := [7]string{"lease:", "done:", "ver", "fence", "run", "buf", "dlv:"}
	perExecution := [7]bool{true, true, false, false, false, false, true}
	n := 7 * tag
	for i, sfx := range suffixes {
		n += len(sfx)
		if perExecution[i] {
			n += len(executionID)
		}
	}
	var b strings.Builder
	b.Grow(n)
	var ends [7]int
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
	return Keys{Lease: cut(0), Done: cut(1), Version: cut(2), Fence: cut(3), Running: cut(4), Buffered: cut(5), Deliveries: cut(6)}
}

// acquireScript decides a batch of executions in one round trip. For entry
// i (from 0), KEYS[7i+1..7i+7] are lease, done, ver, fence, run, buf, dlv
// and ARGV[3+7i+1..3+7i+7] are holder, ttl ms, version, attempt, execution
// id, overlap (0 allow, 1 skip, 2 buffer one), continuing (1: a retry of a
// started execution); ARGV[1] is max deliveries (0: no limit), ARGV[2]
// the marker ttl ms and ARGV[3] the liveness key prefix (empty: leases
// are not tied to their holders' liveness; see WithLiveness). A lease held
// by another holder whose worker's liveness key is gone is taken over as
// if it had expired. The reply has four values per entry, {code, fence,
// extra, running}: code 0 acquired (extra = deliveries), 1 done (extra = 1 succeeded, 2 skipped, 0 an attempt ended), 2 stale
// (extra = current version), 3 held (extra = PTTL ms), 4 overlapping
// (running = the running execution), 5 waiting (extra = the running
// marker's PTTL ms), 6 poison (extra = deliveries; the lease is taken).
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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
-- k and a index entry i's first key and argument less one; decide
-- returns the entry's four reply values.
local function decide(k, a)
  local d = redis.call('GET', KEYS[k+2])
  if d then
    if d == 'done' then return 1, 0, 1, '' end
    if d == 'skipped' then return 1, 0, 2, '' end
    local fin = tonumber(d)
    if fin and fin >= tonumber(ARGV[a+4]) then return 1, 0, 0, '' end
  end
  local v = tonumber(ARGV[a+3])
  local cur = tonumber(redis.call('GET', KEYS[k+3]) or '0')
  if v < cur then return 2, 0, cur, '' end
  if v > cur then redis.call('SET', KEYS[k+3], ARGV[a+3]) end
  local holder = ARGV[a+1]
  local h = redis.call('GET', KEYS[k+1])
  if h and h ~= holder then
    local w = nil
    if live ~= '' then w = string.match(h, '^(.+)/[^/]*$') end
    if not w or redis.call('EXISTS', live .. w) == 1 then return 3, 0, redis.call('PTTL', KEYS[k+1]), '' end
    h = nil
  end
  local mode = tonumber(ARGV[a+6])
  local ex = ARGV[a+5]
  if mode > 0 then
    local r = redis.call('GET', KEYS[k+5])
    if r and r ~= ex then
      local left = redis.call('PTTL', KEYS[k+5])
      if left < 0 then left = 0 end
      if ARGV[a+7] == '1' then return 5, 0, left, r end
      if mode == 2 then
        local b = redis.call('GET', KEYS[k+6])
        if (not b) or b == ex then
          redis.call('SET', KEYS[k+6], ex, 'PX', left + tonumber(ARGV[a+2]))
          return 5, 0, left, r
        end
      end
      redis.call('SET', KEYS[k+2], 'skipped', 'PX', marker)
      return 4, 0, 0, r
    end
  end
  local n = 0
  if not h then
    n = redis.call('HINCRBY', KEYS[k+7], ARGV[a+4], 1)
    -- The counter's hash lives marker ms from its attempt's first
    -- delivery; later deliveries only count.
    if n == 1 then redis.call('PEXPIRE', KEYS[k+7], marker) end
  end
  local f = tonumber(redis.call('GET', KEYS[k+4]) or '0') + 1
  if now > f then f = now end
  redis.call('SET', KEYS[k+4], string.format('%d', f))
  redis.call('SET', KEYS[k+1], holder, 'PX', ARGV[a+2])
  if mode > 0 then
    redis.call('SET', KEYS[k+5], ex, 'PX', ARGV[a+2])
    if redis.call('GET', KEYS[k+6]) == ex then redis.call('DEL', KEYS[k+6]) end
  end
  if maxd > 0 and n > maxd then return 6, f, n, '' end
  return 0, f, n, ''
end
local o = 0
for i = 0, #KEYS / 7 - 1 do
  local c, f, x, r = decide(7*i, 3+7*i)
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
// on Redis Cluster, call it with the entries of one slot at a time.
func (s *Store) AcquireMany(ctx context.Context, batch []Acquisition) ([]Result, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 7*len(batch))
	args := make([]any, 0, 3+7*len(batch))
	live := ""
	if s.liveness {
		live = s.prefix + "live:"
	}
	args = append(args, s.maxDeliveries, s.markerTTL.Milliseconds(), live)
	for _, a := range batch {
		ex := a.Execution
		if err := check(ex, a.Holder, a.TTL); err != nil {
			return nil, err
		}
		k := s.Keys(ex.JobID, ex.ExecutionID)
		continuing := "0"
		if ex.continuing() {
			continuing = "1"
		}
		keys = append(keys, k.Lease, k.Done, k.Version, k.Fence, k.Running, k.Buffered, k.Deliveries)
		args = append(args, a.Holder, a.TTL.Milliseconds(), ex.Version, ex.Attempt, ex.ExecutionID, int(ex.Overlap), continuing)
	}
	vals, err := acquireScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("lease: acquire %s (%d in the batch): %w", batch[0].Execution.ExecutionID, len(batch), err)
	}
	if len(vals) != 4*len(batch) {
		return nil, fmt.Errorf("lease: acquire %d executions: unexpected reply of %d values", len(batch), len(vals))
	}
	out := make([]Result, len(batch))
	for i := range batch {
		r, err := acquireResult(vals[4*i : 4*i+4])
		if err != nil {
			return nil, fmt.Errorf("lease: acquire %s: %w", batch[i].Execution.ExecutionID, err)
		}
		out[i] = r
	}
	return out, nil
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
		return Result{Outcome: Held, HeldFor: time.Duration(max(extra, 0)) * time.Millisecond}, nil
	case 4:
		return Result{Outcome: Overlapping, Running: running}, nil
	case 5:
		return Result{Outcome: Waiting, HeldFor: time.Duration(max(extra, 0)) * time.Millisecond, Running: running}, nil
	case 6:
		return Result{Outcome: Poison, Fence: fence, Deliveries: extra}, nil
	default:
		return Result{}, fmt.Errorf("unknown code %d", code)
	}
}

// renewScript: KEYS lease, run; ARGV holder, ttl ms, execution id. 1
// renewed, 0 lost, -1 fenced. The job's running marker, when it names the
// execution, lives as long as the lease.
var renewScript = redis.NewScript(`
local h = redis.call('GET', KEYS[1])
if not h then return 0 end
if h ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
`)

// Renew extends holder's lease on ex to ttl from now, only if holder still
// has it. It returns ErrLost when the lease expired and ErrFenced when
// another holder took it.
func (s *Store) Renew(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	if err := check(ex, holder, ttl); err != nil {
		return err
	}
	k := s.Keys(ex.JobID, ex.ExecutionID)
	n, err := renewScript.Run(ctx, s.rdb, []string{k.Lease, k.Running}, holder, ttl.Milliseconds(), ex.ExecutionID).Int64()
	if err != nil {
		return fmt.Errorf("lease: renew %s: %w", ex.ExecutionID, err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return ErrLost
	default:
		return ErrFenced
	}
}

// releaseScript: KEYS lease, run; ARGV holder, execution id. 1 when
// released; the running marker goes with the lease.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Release gives up holder's lease on ex, so another delivery can fire it
// without waiting for the lease to expire. It reports whether holder still
// had the lease.
func (s *Store) Release(ctx context.Context, ex Execution, holder string) (bool, error) {
	if ex.JobID == "" || ex.ExecutionID == "" {
		return false, errors.New("lease: job and execution id are required")
	}
	k := s.Keys(ex.JobID, ex.ExecutionID)
	n, err := releaseScript.Run(ctx, s.rdb, []string{k.Lease, k.Running}, holder, ex.ExecutionID).Int64()
	if err != nil {
		return false, fmt.Errorf("lease: release %s: %w", ex.ExecutionID, err)
	}
	return n == 1, nil
}

// finishScript finishes a batch of attempts in one round trip. For entry i
// (from 0), KEYS[3i+1..3i+3] are lease, done, run and ARGV[5i+1..5i+5] are
// holder, ttl ms, mark ("done" or an attempt number), execution id,
// keep-running ms. Each entry writes the done marker (an attempt number
// only ever raises it, and never overwrites "done"), then, if the job's
// running marker names the execution, keeps it for keep-running ms (a retry
// is pending) or deletes it, then releases holder's lease.
var finishScript = redis.NewScript(`
for i = 0, #KEYS / 3 - 1 do
  local lease, done, run = KEYS[3*i+1], KEYS[3*i+2], KEYS[3*i+3]
  local holder, ttl, mark, ex, keep = ARGV[5*i+1], ARGV[5*i+2], ARGV[5*i+3], ARGV[5*i+4], ARGV[5*i+5]
  if mark == 'done' then
    redis.call('SET', done, 'done', 'PX', ttl)
  else
    local d = redis.call('GET', done)
    if d ~= 'done' and d ~= 'skipped' and (not d or tonumber(d) == nil or tonumber(d) < tonumber(mark)) then
      redis.call('SET', done, mark, 'PX', ttl)
    end
  end
  if redis.call('GET', run) == ex then
    if tonumber(keep) > 0 then redis.call('PEXPIRE', run, keep) else redis.call('DEL', run) end
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
)

// Finish is one entry of FinishMany.
type Finish struct {
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
// entry fails the whole call before anything is sent. On Redis Cluster,
// call it with the entries of one slot at a time.
func (s *Store) FinishMany(ctx context.Context, batch []Finish) error {
	if len(batch) == 0 {
		return nil
	}
	keys := make([]string, 0, 3*len(batch))
	args := make([]any, 0, 5*len(batch))
	for _, f := range batch {
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
		k := s.Keys(ex.JobID, ex.ExecutionID)
		keys = append(keys, k.Lease, k.Done, k.Running)
		args = append(args, f.Holder, f.TTL.Milliseconds(), mark, ex.ExecutionID, keep.Milliseconds())
	}
	if err := finishScript.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
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
