-- queue_release.lua: release an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) if the token holds it, handing it to the first live
-- waiter, if any (see hand_over in lib/waiters.lua).
-- KEYS     as queue_acquire.lua's: [1] the owner key, [2] the last fence,
--          [3] the queue, [4] liveness, [5] waiter metadata; [2] to [5]
--          declared on a Cluster only, else named from [1]
-- ARGV[1]  token of the lease
-- ARGV[2]  "<starve_us> <publish> <channel>", read only when somebody
--          waits (each argument costs Redis more to read than a match on
--          one): starve_us, how long the first waiter must have waited
--          for the lock to be handed over rather than freed (Mutex; 0 =
--          hand over at once); publish, the command to wake waiters with,
--          PUBLISH or SPUBLISH on Redis Cluster; channel, the release
--          channel (last: it may hold spaces)
-- ARGV[3]  (Election only) set to announce a lock left free or handed
--          over by "leader" on the channel, for those who follow its
--          holder (a hand-over's own message goes to its waiter's client
--          alone: see client_channel)
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
local owner = KEYS[1]
if not owns(owner, ARGV[1]) then
  return 0
end
local queue = KEYS[3] or owner .. ':queue'
local queued = redis.call('EXISTS', queue) == 1
if not queued and not ARGV[3] then
  redis.call('DEL', owner)
  return 1
end
-- @helpers
local fence_key, alive, wmeta = KEYS[2] or owner .. ':fence', KEYS[4] or owner .. ':alive', KEYS[5] or owner .. ':wmeta'
local starve_us, publish, channel = wake_args(ARGV[2])
-- A hand-over writes the owner key over the lease let go: no DEL first.
local handed = queued and hand_over(owner, fence_key, queue, alive, wmeta, publish, channel, starve_us, first_waiter(queue))
if not handed then
  redis.call('DEL', owner)
end
if ARGV[3] then
  redis.pcall(publish, channel, 'leader') -- released or handed over: never fail on it
end
return 1
