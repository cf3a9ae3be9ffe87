-- rw_leave.lua: withdraw the intention of a writer that stops waiting. If
-- it was the last one and no writer holds the lock, wake the readers it
-- stopped: otherwise they would sleep until its deadline.
-- KEYS[1]  the writer hash
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
--          (KEYS[2..5] unused)
-- ARGV[1]  token of the writer
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the readers' release channel
-- Returns  1 when the writer had an intention, else 0.
if redis.call('ZREM', KEYS[6], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', math.floor(now_us() / 1000))
if redis.call('ZCARD', KEYS[6]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call(ARGV[2], ARGV[3], 'all')
end
return 1
