-- sem_release.lua: release a Semaphore lease if the token holds a live
-- one, and grant the freed permits to the waiters they now let through,
-- in queue order (see grant_waiters in lib/permits.lua).
-- KEYS     as for sem_acquire: main hash, last fence, leases, queue,
--          liveness, waiter metadata
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel
-- Returns  1 when released; 0 when the token held no live lease (nothing
--          else changes but the expired leases dropped on the way).
local clock = clock_us()
local ms = string.sub(clock, 1, -4) -- the clock's ms
local used, l = permits_and_lease(KEYS[1], KEYS[3], ARGV[1], ms)
if not l then
  return 0
end
drop_lease(KEYS[1], KEYS[3], ARGV[1], l.n, ms)
if redis.call('EXISTS', KEYS[4]) == 1 then
  grant_waiters(KEYS, ARGV[2], ARGV[3], clock, used - l.n)
end
return 1
