-- rw_unlock.lua: release the write side of an RWMutex if the token holds
-- it, and move the lock on: to the first waiting writer, or to the
-- waiting readers (see next_writer in lib/writers.lua).
-- KEYS[1]  the writer's owner key
-- KEYS[2]  the last fence
-- KEYS[6]  intentions, KEYS[7] the writers' line, KEYS[8] its liveness,
--          KEYS[9] its metadata (KEYS[3..5] unused)
--          (on a single Redis only KEYS[1] is sent: see rw_lock.lua)
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the readers' release channel
-- ARGV[4]  the writers' release channel
-- ARGV[5]  starve_us: the lock is freed rather than handed over while the
--          first writer has waited less
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[7]) == 0 then
  wake_all_readers(ARGV[2], ARGV[3]) -- no writer waits
  return 1
end
-- @helpers
next_writer(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), true)
return 1
