package limits

import (
	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/domain/gcra"
)

// admitScript admits one attempt. Times are Unix µs.
//
// KEYS: 1 the tenant's rate, 2 the host's rate, 3 the host's breaker (a
// hash: s state, f consecutive failures, o opened at, p the probe's
// member, pu the probe's deadline), 4 the host's slots (a sorted set of
// members scored by expiry).
//
// ARGV: 1 now, 2 the tenant's interval (0: no quota), 3 its burst, 4 the
// host's interval (0: no rate), 5 its burst, 6 the breaker's cool-down (0:
// no breaker), 7 the host's cap (0: none), 8 the attempt's member, 9 its
// slot's expiry, 10 the breaker hash's TTL in ms.
//
// The breaker's part is hostguard.Breaker.Admit, field for field (the Go
// breaker is the per-process fallback of these transitions).
//
// Answer {code, a, b, c}:
//
//	0 admitted: a 0 (breaker closed), 1 (closed, counting failures) or 2
//	  (this attempt is the probe); c the breaker's state before
//	1 the tenant's rate: wait a µs (its turn is reserved)
//	2 the host's rate: wait a µs (its turn is reserved; the tenant's taken)
//	3 no slot free (both turns taken)
//	4 breaker open: a failures, b when a probe may go, c the state
//
// A rate is package gcra's reserve (gcra.Lua, the same arithmetic as the
// per-process fallback's gcra.Limiter): a request that must wait keeps its
// reservation, and is not charged again.
var admitScript = redis.NewScript(gcra.Lua + `
local now = tonumber(ARGV[1])
local T = tonumber(ARGV[2])
if T > 0 then
  local w = reserve(KEYS[1], now, T, tonumber(ARGV[3]))
  if w > 0 then return {1, w, 0, 0} end
end
T = tonumber(ARGV[4])
if T > 0 then
  local w = reserve(KEYS[2], now, T, tonumber(ARGV[5]))
  if w > 0 then return {2, w, 0, 0} end
end
local cap = tonumber(ARGV[7])
local m = ARGV[8]
local has = false
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZSCORE', KEYS[4], m) then
    has = true
  elseif redis.call('ZCARD', KEYS[4]) >= cap then
    return {3, 0, 0, 0}
  end
end
local cool = tonumber(ARGV[6])
local bv, prev = 0, 0
if cool > 0 then
  local b = redis.call('HMGET', KEYS[3], 's', 'f', 'o', 'p', 'pu')
  local s = tonumber(b[1] or '0')
  local f = tonumber(b[2] or '0')
  prev = s
  if s == 1 then
    local at = tonumber(b[3] or '0') + cool
    if now < at then return {4, f, at, s} end
    redis.call('HSET', KEYS[3], 's', 2, 'p', m, 'pu', ARGV[9])
    redis.call('PEXPIRE', KEYS[3], ARGV[10])
    bv = 2
  elseif s == 2 then
    local pu = tonumber(b[5] or '0')
    if b[4] and b[4] ~= m and pu > now then return {4, f, pu, s} end
    redis.call('HSET', KEYS[3], 'p', m, 'pu', ARGV[9])
    redis.call('PEXPIRE', KEYS[3], ARGV[10])
    bv = 2
  elseif f > 0 then
    bv = 1
  end
end
if cap > 0 and not has then
  redis.call('ZADD', KEYS[4], ARGV[9], m)
  local want = math.floor((tonumber(ARGV[9]) - now) / 1000) + 1000
  if redis.call('PTTL', KEYS[4]) < want then redis.call('PEXPIRE', KEYS[4], want) end
end
return {0, bv, 0, prev}
`)

// reportScript ends an attempt: frees its slot and reports its health.
//
// KEYS: 1 the host's breaker, 2 its slots. ARGV: 1 now (µs), 2 the outcome
// (0 success, 1 failure, 2 neutral), 3 the attempt's member, 4 the
// failures that open the breaker, 5 the breaker hash's TTL in ms, 6 1:
// free the slot, 7 1: report to the breaker.
//
// Answer {state before, state after, consecutive failures}: the
// transitions of hostguard.Breaker.Report (outcomes as hostguard.Outcome).
// A failure while half-open, or the threshold's reached while closed,
// opens the breaker; a success closes it and forgets its failures; a
// neutral outcome only ends a probe.
var reportScript = redis.NewScript(`
if ARGV[6] == '1' then redis.call('ZREM', KEYS[2], ARGV[3]) end
if ARGV[7] ~= '1' then return {0, 0, 0} end
local b = redis.call('HMGET', KEYS[1], 's', 'f', 'p')
local s = tonumber(b[1] or '0')
local prev = s
local f = tonumber(b[2] or '0')
if b[3] == ARGV[3] then redis.call('HDEL', KEYS[1], 'p', 'pu') end
if ARGV[2] == '1' then
  f = redis.call('HINCRBY', KEYS[1], 'f', 1)
  if s == 2 or (s == 0 and f >= tonumber(ARGV[4])) then
    redis.call('HSET', KEYS[1], 's', 1, 'o', ARGV[1])
    redis.call('HDEL', KEYS[1], 'p', 'pu')
    s = 1
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
elseif ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
  s, f = 0, 0
end
return {prev, s, f}
`)
