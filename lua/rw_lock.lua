-- rw_lock.lua: take the write side of an RWMutex if no writer and no live
-- reader holds it. Otherwise, when asked, register or renew the caller's
-- intention to write: while it lives, PreferWriters readers wait.
-- KEYS[1]  the writer: the owner key (see lib/owner.lua), expiring with the lease
-- KEYS[2]  the last fence
-- KEYS[3]  readers: zset token -> fence
-- KEYS[4]  reader expiries: zset token -> deadline (server ms; inf: never)
-- KEYS[5]  reader details: hash token -> "<since ms>:<metadata>"
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in ms; 0 = the lease never expires
-- ARGV[3]  metadata shown by Status
-- ARGV[4]  intention liveness in ms; 0 = register none (TryLock, PreferReaders)
-- Returns  {1, fence} when taken (also when this token already holds it:
--          a try may be sent again after a lost reply; the lease's TTL
--          then starts anew);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder: the writer's fence, else the oldest reader's}.
local tok, ttl, live = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local now = now_us()
local now_ms = math.floor(now / 1000)
-- Readers are pruned as waiters are: their expiries are the alive set.
local oldest, oldest_fence = first_waiter(KEYS[3])
oldest, oldest_fence = live_first(KEYS[3], KEYS[4], KEYS[5], oldest, oldest_fence, now_ms)
-- No reader: one SET NX takes the write side if no writer has it.
local fence, w = claim(KEYS[1], KEYS[2], tok, ARGV[3], ttl, now, not oldest)
if fence then
  if live > 0 then
    -- A waiting writer's intention ends with its wait.
    redis.call('ZREM', KEYS[6], tok)
  end
  return {1, fence}
end
if live > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now_ms)
  redis.call('ZADD', KEYS[6], now_ms + live, tok)
  redis.call('PEXPIRE', KEYS[6], 2 * live)
end
if w then
  return {0, redis.call('PTTL', KEYS[1]), w.fence}
end
-- Readers hold it: worth a try unasked when the first of them expires.
-- Past it already (more expired readers than one prune takes): at once.
local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')[2]
local wait = -1
if first ~= 'inf' then
  wait = math.max(0, tonumber(first) - now_ms)
end
return {0, wait, oldest_fence}
