-- rw_leave.lua: withdraw a writer that stops waiting, or whose try's reply
-- was lost: its intention, and the write side if a try of its own took it
-- (the caller saw an error and will never unlock). Wake whom that lets in:
-- on a release, every reader and one writer per client, as rw_unlock does;
-- when the last intention goes and no writer holds the lock, the readers
-- it stopped (otherwise they would sleep until its deadline).
-- KEYS[1]  the writer's owner key
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
--          (KEYS[2..5] unused)
-- ARGV[1]  token of the writer
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the readers' release channel
-- ARGV[4]  the writers' release channel
-- Returns  1 when the writer had an intention or held the write side,
--          else 0 (nothing changes).
local tok = ARGV[1]
local intended = redis.call('ZREM', KEYS[6], tok) == 1
if owns(KEYS[1], tok) then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[2], ARGV[3], 'all')
  redis.call(ARGV[2], ARGV[4], 'one')
  return 1
end
if not intended then
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', time_ms())
if redis.call('ZCARD', KEYS[6]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call(ARGV[2], ARGV[3], 'all')
end
return 1
