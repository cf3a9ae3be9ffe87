-- queue_acquire.lua: take an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) if it is free and the caller may have it: it is first
-- in line, or the line is empty, or (a Mutex) the first waiter has not yet
-- waited starve_us, so a newcomer may barge in as with sync.Mutex.
-- Otherwise (when asked) queue the caller, or renew its place. Waiting
-- order is arrival order at Redis; dead waiters are pruned.
-- KEYS[1]  the owner key (see lib/owner.lua), expiring with the lease
-- KEYS[2]  the last fence, the owner key and ':fence'
-- KEYS[3]  the queue: zset token -> arrival order (strictly rising),
--          ':queue'
-- KEYS[4]  liveness: zset token -> deadline (server ms), ':alive'
-- KEYS[5]  waiter metadata: hash token -> metadata, ':wmeta'
--          KEYS[2] to KEYS[5] are declared on a Cluster only; on a single
--          Redis the script names them from KEYS[1] (see queued.go)
-- ARGV[1]  token
-- ARGV[2]  lease TTL in ms; 0 = the lease never expires
-- ARGV[3]  "<join> <liveness> <starve_us>", read only off the common path
--          (each argument costs Redis more to read than a match on
--          one): join 1 to join the queue when not granted (Lock), 0 not
--          to (TryLock; a queued waiter's heartbeat is queue_beat.lua);
--          liveness, the waiter liveness timeout in ms; starve_us, how
--          long the first waiter may wait before newcomers must queue
--          behind it, 0 = at once (FairMutex)
-- ARGV[4]  metadata; absent: none
-- ARGV[5]  (Election only) publish command: PUBLISH, or SPUBLISH on Redis
--          Cluster; ARGV[6] the channel on which a lock taken is announced
--          by "leader", for those who follow its holder
-- Returns  the fence (> 0), bare, as a decimal string, when taken;
--          {fence} when this token holds it already (a try sent again
--          after a lost reply, or the lock handed to it: the lease's TTL
--          then starts anew, but a hand-off's longer expiry stays until
--          the caller's first renewal);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder's fence (as the decimal string read; 0 when
--           free but another waiter is first), server time in µs (a
--           hand-off to this token dated before it was void by now)}.
local tok, ttl, meta = ARGV[1], ARGV[2], ARGV[4] or ''

-- announce_taken is the reply of a try that took the lock with fence,
-- announced first when the caller asked. The lock is taken by then, so
-- a refused announcement (an ACL without PUBLISH) must not fail the
-- script: the caller would not know it holds the lock.
local function announce_taken(fence)
  if ARGV[6] then
    redis.pcall(ARGV[5], ARGV[6], 'leader')
  end
  return fence
end

local owner = KEYS[1]
local fence_key, queue = KEYS[2] or owner .. ':fence', KEYS[3] or owner .. ':queue'
-- The common case, nobody waiting: one SET NX takes a free lock.
local queued = redis.call('EXISTS', queue) == 1
local clock = clock_us()
local fence, holder, hfence = claim(owner, fence_key, tok, meta, ttl, clock, not queued)
if fence then
  return announce_taken(holder and {fence} or fence) -- a holder: it was tok
end
-- @helpers
local alive, wmeta = KEYS[4] or owner .. ':alive', KEYS[5] or owner .. ':wmeta'
local join, live, starve_us = string.match(ARGV[3], '^(%d) (%d+) (%d+)$')
if not join then
  error('dlock: try argument of an unknown form: ' .. ARGV[3])
end
local now = tonumber(clock)
if holder then
  -- Held by another: queue up when asked. The dead in the line are
  -- pruned when the lock is let go, before it is handed over.
  if join == '1' then
    join_queue(queue, alive, wmeta, tok, meta, now, tonumber(live))
  end
  return {0, redis.call('PTTL', owner), hfence, now}
end
-- @helpers
local now_ms = math.floor(now / 1000)
local head, order, deadline
if queued then
  head, order = first_waiter(queue)
end
head, order, deadline = live_first(queue, alive, wmeta, head, order, now_ms)
if may_take(head, order, tok, now, tonumber(starve_us)) then
  if head then
    -- Leave the line if in it (a waiter that barged, or was first).
    drop_waiters(queue, alive, wmeta, tok)
  end
  return announce_taken(take_owner(owner, fence_key, tok, meta, ttl, clock))
end
if join == '1' then
  join_queue(queue, alive, wmeta, tok, meta, now, tonumber(live))
end
-- Free, but another waiter is first: it takes the lock, or is pruned at
-- its liveness deadline. Past it already (more dead waiters lay ahead
-- than one prune takes), or none (more had lost theirs than live_first
-- drops): worth a try at once, which drops more.
return {0, math.max(0, tonumber(deadline or '0') - now_ms), 0, now}
