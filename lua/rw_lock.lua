-- rw_lock.lua: take the write side of an RWMutex if no writer and no live
-- reader holds it and the caller may have it: it is first in the writers'
-- line, or the line is empty, or the first writer has not yet waited
-- starve_us (a newcomer may barge in, as with Mutex). Otherwise, when
-- asked, put the caller in the writers' line, or renew its place, and
-- with it the caller's intention: while it lives, PreferWriters readers
-- wait.
-- KEYS[1]  the writer: the owner key (see lib/owner.lua), expiring with the
--          lease; or a lone reader's share (see rw_rlock.lua)
-- KEYS[2]  the last fence
-- KEYS[3]  readers: zset token -> fence
-- KEYS[4]  reader expiries: zset token -> deadline (server ms; inf: never)
-- KEYS[5]  reader details: hash token -> "<since ms>:<metadata>"
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
-- KEYS[7]  the writers' line: zset token -> arrival order (strictly rising)
-- KEYS[8]  its liveness: zset token -> deadline (server ms)
-- KEYS[9]  its metadata: hash token -> metadata
--          On a single Redis only KEYS[1] is sent, and the script names
--          the others, KEYS[1] and ':fence', ':readers', ':rexp',
--          ':rmeta', ':intent', ':queue', ':alive', ':wmeta', before it
--          starts (loadNaming in scripts.go)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in ms; 0 = the lease never expires
-- ARGV[3]  metadata shown by Status
-- ARGV[4]  1 to join the line when not granted (Lock), 0 not to (TryLock),
--          2 for a waiter's heartbeat: renew its place and intention,
--          take nothing (see try_now)
-- ARGV[5]  waiter liveness timeout in ms
-- ARGV[6]  1 to hold an intention while in the line (PreferWriters), 0 not to
-- ARGV[7]  starve_us: how long the first writer may wait before newcomers
--          must queue behind it
-- Returns  the fence (> 0), bare, as a decimal string, when taken;
--          {fence} when this token holds it already (a try sent again
--          after a lost reply, or the lock handed to it: the lease's TTL
--          then starts anew, but a hand-off's longer expiry stays until
--          the caller's first renewal);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder: the writer's fence (as the decimal string
--           read), else the oldest reader's, else 0 (another writer is
--           first), server time in µs (a hand-off to this token dated
--           before it was void by now)};
--          a heartbeat never takes the lock: it replies try_now instead.
local tok, ttl, join = ARGV[1], ARGV[2], ARGV[4]
local beat = join == '2'
local clock = clock_us()
-- Any readers (live or not) or writers waiting?
local busy = redis.call('EXISTS', KEYS[3], KEYS[7]) > 0
local fence, w, wfence, mine
if beat then
  w, wfence = peek_owner(KEYS[1])
  mine = w == tok
else
  -- Nobody reading or waiting: one SET NX takes the write side if free.
  fence, w, wfence = claim(KEYS[1], KEYS[2], tok, ARGV[3], ttl, clock, not busy)
end
if mine then
  return try_now(clock) -- handed to the waiter
elseif fence then
  return w and {fence} or fence -- a holder: it was tok
end
-- @helpers
local now = tonumber(clock)
local now_ms = math.floor(now / 1000)

-- join_line puts the caller in the writers' line when asked, or renews
-- its place (a heartbeat), with its intention while it holds one (see
-- ARGV[6]); false when a heartbeat finds it dropped from the line.
local function join_line()
  if join == '0' then
    return true
  end
  local live = tonumber(ARGV[5])
  if not join_queue(KEYS[7], KEYS[8], KEYS[9], tok, ARGV[3], now, live, beat) then
    return false
  end
  if ARGV[6] == '1' then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', int(now_ms))
    redis.call('ZADD', KEYS[6], int(now_ms + live), tok)
    redis.call('PEXPIRE', KEYS[6], int(2 * live))
  end
  return true
end

if w then
  -- A writer, or a lone reader, holds it: queue up. The dead in either
  -- line are pruned once it lets go.
  if not join_line() then
    return try_now(now) -- a heartbeat of a writer dropped from the line
  end
  return {0, redis.call('PTTL', KEYS[1]), wfence, now}
end
-- @helpers
-- Readers are pruned as waiters are: their expiries are the alive set.
local oldest, oldest_fence = first_waiter(KEYS[3])
oldest, oldest_fence = live_first(KEYS[3], KEYS[4], KEYS[5], oldest, oldest_fence, now_ms)
local head, order = first_waiter(KEYS[7])
local deadline
head, order, deadline = live_first(KEYS[7], KEYS[8], KEYS[9], head, order, now_ms)
local free = not oldest and may_take(head, order, tok, now, tonumber(ARGV[7]))
if free and beat then
  return try_now(now)
elseif free then
  if head then
    drop_waiters(KEYS[7], KEYS[8], KEYS[9], tok)
    redis.call('ZREM', KEYS[6], tok)
  end
  return take_owner(KEYS[1], KEYS[2], tok, ARGV[3], ttl, clock)
end
if not join_line() then
  return try_now(now) -- a heartbeat of a writer dropped from the line
end
if oldest then
  -- Readers hold it: worth a try unasked when the first of them expires
  -- (past it already, more expired readers than one prune takes, or
  -- more readers without an expiry than live_first drops: at once),
  -- though the last one's release hands the lock on.
  local first = redis.call('ZRANGE', KEYS[4], '0', '0', 'WITHSCORES')[2]
  local wait = -1
  if not first then
    wait = 0
  elseif first ~= 'inf' then
    wait = math.max(0, tonumber(first) - now_ms)
  end
  return {0, wait, oldest_fence, now}
end
-- Free, but another writer is first: it takes the lock, or is pruned at
-- its liveness deadline (see queue_acquire.lua).
return {0, math.max(0, tonumber(deadline or '0') - now_ms), 0, now}
