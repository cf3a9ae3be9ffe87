-- queue_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if a try of its own took the lock though its reply was lost
-- (the caller saw an error and will never unlock), release that too. If
-- the lock is then free, wake the waiter now first.
-- KEYS[1]  the owner key
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata (KEYS[2] unused)
-- ARGV[1]  token of the caller
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel
-- Returns  1 when the caller was queued or held the lock, else 0.
local tok = ARGV[1]
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] == tok
local removed = redis.call('ZREM', KEYS[3], tok)
redis.call('ZREM', KEYS[4], tok)
redis.call('HDEL', KEYS[5], tok)
local held = owns(KEYS[1], tok)
if held then
  redis.call('DEL', KEYS[1])
  removed = 1
end
if (first or held) and redis.call('EXISTS', KEYS[1]) == 0 then
  wake_first(KEYS[3], ARGV[2], ARGV[3])
end
return removed
