-- queue_release.lua: release an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) if the token holds it, and wake the first live
-- waiter, and only it.
-- KEYS[1]  the owner key
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata (KEYS[2] unused)
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel; the message is the woken waiter's token
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  prune_waiters(KEYS[3], KEYS[4], KEYS[5], time_ms())
  wake_first(KEYS[3], ARGV[2], ARGV[3])
end
return 1
