-- set_release.lua: release a member of a mutex set if the token holds it.
-- The member goes back to the free ones as the most recently used (or
-- leaves the set if it was removed while held), and one waiter per client
-- is woken on the set's channel and on the member's.
-- KEYS     the MutexSet layout described in lib/set.lua (10 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the set's channel (waiters for any member)
-- ARGV[5]  the member's channel (waiters for this member)
-- Returns  1 when released; 0 when the token did not hold it. Nothing
--          changes then, except that a lease of this token that expired is
--          cleared as the next acquire would clear it.
local tok, m = ARGV[1], ARGV[2]
if not set_owns(m, tok) then
  return 0
end
local now = now_us()
local e = set_expiry(m)
local live = e ~= nil and e > math.floor(now / 1000)
local used = now
if e and not live then
  used = e * 1000
end
if set_vacate(m, used) then
  redis.call(ARGV[3], ARGV[4], 'one')
end
redis.call(ARGV[3], ARGV[5], 'one')
if live then
  return 1
end
return 0
