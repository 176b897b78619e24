// Package lease decides, in one Redis round trip per firing, whether a worker
// may fire an execution now, and hands it the fence token to fire with.
//
// One Lua script (Acquire) checks, in order:
//
//  1. the execution's done marker: an execution that already succeeded, or
//     whose attempt already finished, is AlreadyDone;
//  2. the job's current version: a firing staged under an older version
//     than the one the api published is Stale;
//  3. the execution's lease: if another holder has it, the result is Held
//     with the time the lease has left; otherwise the lease is taken (SET
//     NX PX semantics, and the same holder may take it again, so a call
//     retried after a lost reply is harmless);
//
// and on success bumps the job's fence counter and returns it. The fence is
// monotonic per job even if Redis loses its data, because it is floored by
// Redis's clock in microseconds; see DESIGN.md beside this file for the
// argument and the key layout.
//
// Every key of one job carries the hash tag {j:<job id>}, so a script that
// touches several of them runs on one Redis Cluster slot.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// HeldFor is how long the other holder's lease has left, set when Held:
	// a caller that still owns the firing can look again after it.
	HeldFor time.Duration
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
}

// ErrLost is returned by Renew when the lease expired and nobody holds it:
// the caller may no longer assume exclusivity.
var ErrLost = errors.New("lease: lost (expired)")

// ErrFenced is returned by Renew when another holder has taken the lease:
// it fires with a larger fence, and the caller's result must be discarded.
var ErrFenced = errors.New("lease: fenced by another holder")

// Store runs the lease scripts against Redis.
type Store struct {
	rdb    redis.Scripter
	prefix string
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix puts every key under prefix, so several deployments (or tests)
// can share one Redis without seeing each other's keys.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// New returns a Store over rdb: a *redis.Client, *redis.ClusterClient or
// anything else that can run scripts.
func New(rdb redis.Scripter, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: DefaultPrefix}
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
	Running string // reserved for the overlap policy (a later issue)
}

// Keys returns the keys Store uses for jobID and executionID.
func (s *Store) Keys(jobID, executionID string) Keys {
	job := s.prefix + "{j:" + jobID + "}:"
	return Keys{
		Lease:   job + "lease:" + executionID,
		Done:    job + "done:" + executionID,
		Version: job + "ver",
		Fence:   job + "fence",
		Running: job + "run",
	}
}

// acquireScript: KEYS lease, done, ver, fence; ARGV holder, ttl ms, version,
// attempt. Replies {code, fence, extra}: code 0 acquired (extra unused),
// 1 done, 2 stale (extra = current version), 3 held (extra = PTTL ms).
//
// Numbers stay below 2^53 (microseconds since 1970 are about 2^51), so Lua's
// doubles hold them exactly; string.format('%d') writes them without an
// exponent.
var acquireScript = redis.NewScript(`
local d = redis.call('GET', KEYS[2])
if d then
  if d == 'done' then return {1, 0, 0} end
  local fin = tonumber(d)
  if fin and fin >= tonumber(ARGV[4]) then return {1, 0, 0} end
end
local v = tonumber(ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[3]) or '0')
if v < cur then return {2, 0, cur} end
if v > cur then redis.call('SET', KEYS[3], ARGV[3]) end
local h = redis.call('GET', KEYS[1])
if h and h ~= ARGV[1] then return {3, 0, redis.call('PTTL', KEYS[1])} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local f = tonumber(redis.call('GET', KEYS[4]) or '0') + 1
if now > f then f = now end
redis.call('SET', KEYS[4], string.format('%d', f))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {0, f, 0}
`)

// Acquire decides whether holder may fire ex now; see the package comment.
// holder must be unique per delivery of a firing (not merely per worker), so
// that two deliveries of one execution to the same worker exclude each other.
// ttl bounds how long a crashed holder blocks the execution.
func (s *Store) Acquire(ctx context.Context, ex Execution, holder string, ttl time.Duration) (Result, error) {
	if err := check(ex, holder, ttl); err != nil {
		return Result{}, err
	}
	k := s.Keys(ex.JobID, ex.ExecutionID)
	vals, err := acquireScript.Run(ctx, s.rdb, []string{k.Lease, k.Done, k.Version, k.Fence},
		holder, ttl.Milliseconds(), ex.Version, ex.Attempt).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("lease: acquire %s: %w", ex.ExecutionID, err)
	}
	if len(vals) != 3 {
		return Result{}, fmt.Errorf("lease: acquire %s: unexpected reply %v", ex.ExecutionID, vals)
	}
	switch vals[0] {
	case 0:
		return Result{Outcome: Acquired, Fence: vals[1]}, nil
	case 1:
		return Result{Outcome: AlreadyDone}, nil
	case 2:
		return Result{Outcome: Stale, CurrentVersion: vals[2]}, nil
	case 3:
		held := time.Duration(max(vals[2], 0)) * time.Millisecond
		return Result{Outcome: Held, HeldFor: held}, nil
	default:
		return Result{}, fmt.Errorf("lease: acquire %s: unknown code %d", ex.ExecutionID, vals[0])
	}
}

// renewScript: KEYS lease; ARGV holder, ttl ms. 1 renewed, 0 lost, -1 fenced.
var renewScript = redis.NewScript(`
local h = redis.call('GET', KEYS[1])
if not h then return 0 end
if h ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
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
	n, err := renewScript.Run(ctx, s.rdb, []string{k.Lease}, holder, ttl.Milliseconds()).Int64()
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

// releaseScript: KEYS lease; ARGV holder. 1 when released.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
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
	n, err := releaseScript.Run(ctx, s.rdb, []string{k.Lease}, holder).Int64()
	if err != nil {
		return false, fmt.Errorf("lease: release %s: %w", ex.ExecutionID, err)
	}
	return n == 1, nil
}

// finishScript: KEYS lease, done; ARGV holder, ttl ms, mark ("done" or an
// attempt number). Writes the done marker (an attempt number only ever
// raises it, and never overwrites "done"), then releases holder's lease.
var finishScript = redis.NewScript(`
if ARGV[3] == 'done' then
  redis.call('SET', KEYS[2], 'done', 'PX', ARGV[2])
else
  local d = redis.call('GET', KEYS[2])
  if d ~= 'done' and (not d or tonumber(d) == nil or tonumber(d) < tonumber(ARGV[3])) then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  end
end
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

// MarkDone records that ex succeeded: every later Acquire of the execution,
// whatever its attempt, is AlreadyDone for ttl (days: longer than any
// redelivery or retry can arrive). It also releases holder's lease; pass an
// empty holder to only mark.
func (s *Store) MarkDone(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	return s.finish(ctx, ex, holder, ttl, "done")
}

// MarkAttemptDone records that attempt ex.Attempt finished without success,
// so a redelivery of the same attempt is AlreadyDone while a later attempt
// (a retry) may still fire. It releases holder's lease too.
func (s *Store) MarkAttemptDone(ctx context.Context, ex Execution, holder string, ttl time.Duration) error {
	if ex.Attempt < 1 {
		return errors.New("lease: attempt must be at least 1")
	}
	return s.finish(ctx, ex, holder, ttl, strconv.Itoa(int(ex.Attempt)))
}

func (s *Store) finish(ctx context.Context, ex Execution, holder string, ttl time.Duration, mark string) error {
	if ex.JobID == "" || ex.ExecutionID == "" {
		return errors.New("lease: job and execution id are required")
	}
	if ttl <= 0 {
		return errors.New("lease: done marker ttl must be positive")
	}
	k := s.Keys(ex.JobID, ex.ExecutionID)
	if err := finishScript.Run(ctx, s.rdb, []string{k.Lease, k.Done}, holder, ttl.Milliseconds(), mark).Err(); err != nil {
		return fmt.Errorf("lease: mark %s %s: %w", ex.ExecutionID, mark, err)
	}
	return nil
}

// publishScript: KEYS ver; ARGV version. Raises only; returns the stored one.
var publishScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local v = tonumber(ARGV[1])
if v > cur then redis.call('SET', KEYS[1], ARGV[1]) return v end
return cur
`)

// PublishVersion makes version the job's current version, so workers skip
// firings staged under older ones. It only ever raises the stored version:
// a delayed publish of an older version cannot resurrect stale firings.
// The api calls it after every change to a job commits.
func (s *Store) PublishVersion(ctx context.Context, jobID string, version int64) error {
	if jobID == "" {
		return errors.New("lease: job id is required")
	}
	k := s.Keys(jobID, "")
	if err := publishScript.Run(ctx, s.rdb, []string{k.Version}, version).Err(); err != nil {
		return fmt.Errorf("lease: publish version of job %s: %w", jobID, err)
	}
	return nil
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
