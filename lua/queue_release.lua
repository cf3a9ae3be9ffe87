-- queue_release.lua: release an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) if the token holds it, handing it to the first live
-- waiter, if any (see hand_over in lib/waiters.lua).
-- KEYS[1]  the owner key
-- KEYS[2]  the last fence
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel
-- ARGV[4]  starve_us: the lock is freed rather than handed over while the
--          first waiter has waited less (Mutex); 0 = hand over at once
-- ARGV[5]  (Election only) set to announce a lock left free by "leader"
--          on the channel, for those who follow its holder (a hand-over
--          is announced by its own message)
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end

-- freed is the reply of a release that leaves the lock free, announced
-- first when asked (a hand-over announces itself). The lock is released
-- by then: never fail on the announcement.
local function freed()
  redis.call('DEL', KEYS[1])
  if ARGV[5] then
    redis.pcall(ARGV[2], ARGV[3], 'leader')
  end
  return 1
end

if redis.call('EXISTS', KEYS[3]) == 0 then
  return freed()
end
-- @helpers
-- A hand-over writes the owner key over the lease let go: no DEL first.
if hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], tonumber(ARGV[4]), first_waiter(KEYS[3])) then
  return 1
end
return freed()
