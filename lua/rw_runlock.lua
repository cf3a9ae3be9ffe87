-- rw_runlock.lua: release a read share of an RWMutex if the token has one;
-- when it was the last share, hand the lock to the first waiting writer
-- (see next_writer in lib/writers.lua).
-- KEYS[1]  the writer's owner key
-- KEYS[2]  the last fence
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details
-- KEYS[6]  intentions, KEYS[7] the writers' line, KEYS[8] its liveness,
--          KEYS[9] its metadata
--          (on a single Redis only KEYS[1] is sent: see rw_lock.lua)
-- ARGV[1]  token of the share
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the writers' release channel
-- ARGV[4]  starve_us, as for rw_unlock
-- Returns  1 when released; 0 when the token had no live share (expired or
--          removed; nothing else changes).
local tok = ARGV[1]
local ms = string.sub(clock_us(), 1, -4) -- server ms, the clock's digits but the last three
prune_waiters(KEYS[3], KEYS[4], KEYS[5], ms)
if redis.call('ZREM', KEYS[3], tok) == 0 then
  return 0
end
redis.call('ZREM', KEYS[4], tok)
redis.call('HDEL', KEYS[5], tok)
if redis.call('ZCARD', KEYS[3]) > 0 then
  expire_by_last(KEYS[4], tonumber(ms), nil, nil, KEYS[3], KEYS[4], KEYS[5])
  return 1
end
-- The last share: only waiting writers can be stopped by readers alone
-- (readers waiting behind an intention stay stopped by it).
if redis.call('EXISTS', KEYS[7]) == 0 then
  return 1
end
-- @helpers
next_writer(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[2], '', ARGV[3], tonumber(ARGV[4]), false)
return 1
