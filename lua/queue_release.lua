-- queue_release.lua: release an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) if the token holds it, handing it to the first live
-- waiter, if any (see hand_over in lib/waiters.lua).
-- KEYS[1]  the owner key
-- KEYS[2]  the last fence
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata
-- ARGV[1]  token of the lease
-- ARGV[2]  "<starve_us> <publish> <channel>", read only when somebody
--          waits (each argument costs Redis more to read than a match on
--          one): starve_us, how long the first waiter must have waited
--          for the lock to be handed over rather than freed (Mutex; 0 =
--          hand over at once); publish, the command to wake waiters with,
--          PUBLISH or SPUBLISH on Redis Cluster; channel, the release
--          channel (last: it may hold spaces)
-- ARGV[3]  (Election only) set to announce a lock left free by "leader"
--          on the channel, for those who follow its holder (a hand-over
--          is announced by its own message)
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
local queued = redis.call('EXISTS', KEYS[3]) == 1
if not queued and not ARGV[3] then
  redis.call('DEL', KEYS[1])
  return 1
end
-- @helpers
local starve_us, publish, channel = wake_args(ARGV[2])
-- A hand-over writes the owner key over the lease let go: no DEL first.
if queued and hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], publish, channel, starve_us, first_waiter(KEYS[3])) then
  return 1
end
redis.call('DEL', KEYS[1])
if ARGV[3] then
  redis.pcall(publish, channel, 'leader') -- released: never fail on it
end
return 1
