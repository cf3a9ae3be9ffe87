-- queue_leave.lua: take a waiter that gives up out of the queue at once.
-- If it was first and the lock is free, wake the waiter now first.
-- KEYS[1]  the owner hash
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata (KEYS[2] unused)
-- ARGV[1]  token of the waiter
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel
-- Returns  1 when the waiter was queued, else 0.
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] == ARGV[1]
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
if first and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head then
    redis.call(ARGV[2], ARGV[3], head)
  end
end
return removed
