-- sem_leave.lua: withdraw a Semaphore waiter that gives up: out of the
-- queue at once, and if it holds a lease though it never saw it (a try
-- whose reply was lost, or permits handed to it as its context ended),
-- release that too. When it was first in line or held permits, grant
-- the waiters now first what fits (see grant_waiters in lib/permits.lua):
-- those it held back go on.
-- KEYS     as for sem_acquire
-- ARGV[1]  token of the caller
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the release channel
-- Returns  1 when the caller was queued or held a lease, else 0.
local tok = ARGV[1]
local clock = clock_us()
local ms = string.sub(clock, 1, -4) -- the clock's ms
local used, l = permits_and_lease(KEYS[1], KEYS[3], tok, ms)
local removed, first = withdraw(KEYS[4], KEYS[5], KEYS[6], tok)
if l then
  drop_lease(KEYS[1], KEYS[3], tok, l.n, ms)
  used = used - l.n
end
if (l or first) and redis.call('EXISTS', KEYS[4]) == 1 then
  grant_waiters(KEYS, ARGV[2], ARGV[3], clock, used)
end
return (l or removed) and 1 or 0
