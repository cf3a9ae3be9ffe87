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
local tok = ARGV[1]
local clock = clock_us()
local ms = string.sub(clock, 1, -4) -- the clock's ms
local due = sem_due(KEYS[3], ms)
local v = redis.call('HMGET', KEYS[1], 'used', tok)
local queued = redis.call('EXISTS', KEYS[4]) == 1
-- The common case: no lease due (so tok's, if the leases key has it, is
-- live) and nobody waiting: the lease ends, and nobody is granted a thing.
if #due == 0 and not queued then
  local l = parse_lease(v[2])
  if l and redis.call('ZREM', KEYS[3], tok) == 1 then
    end_lease(KEYS[1], KEYS[3], tok, l.n, ms, tonumber(v[1] or '0'))
    return 1
  end
end
-- @helpers
local used, l = permits_and_lease(KEYS[1], KEYS[3], tok, ms, due, v)
if not l then
  return 0
end
drop_lease(KEYS[1], KEYS[3], tok, l.n, ms)
if queued then
  grant_waiters(KEYS, ARGV[2], ARGV[3], clock, used - l.n)
end
return 1
