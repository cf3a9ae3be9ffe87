-- rw_runlock.lua: release a read share of an RWMutex if the token has one;
-- when it was the last share, wake one waiting writer per client.
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details
--          (KEYS[1], KEYS[2], KEYS[6] unused)
-- ARGV[1]  token of the share
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the writers' release channel
-- Returns  1 when released; 0 when the token had no live share (expired or
--          removed; nothing else changes).
local tok = ARGV[1]
local now_ms = time_ms()
prune_waiters(KEYS[3], KEYS[4], KEYS[5], now_ms)
if redis.call('ZREM', KEYS[3], tok) == 0 then
  return 0
end
redis.call('ZREM', KEYS[4], tok)
redis.call('HDEL', KEYS[5], tok)
if redis.call('ZCARD', KEYS[3]) == 0 then
  -- Only waiting writers can be stopped by readers alone, and only one of
  -- them can win: readers waiting behind an intention stay stopped by it.
  redis.call(ARGV[2], ARGV[3], 'one')
else
  expire_by_last(KEYS[4], now_ms, KEYS[3], KEYS[4], KEYS[5])
end
return 1
