-- set_release.lua: release a member of a mutex set if the token holds it.
-- The member goes to the first waiter that would take it, or back to the
-- free ones as the most recently used (see set_let_go in lib/set.lua).
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the set's channel
-- ARGV[5]  starve_us: the member is left free rather than handed over
--          while the waiter first for it has waited less
-- Returns  1 when released; 0 when the token did not hold it. Nothing
--          changes then, except that a lease of this token that expired is
--          cleared as the next acquire would clear it.
local tok, m = ARGV[1], ARGV[2]
if not set_owns(m, tok) then
  return 0
end
if set_let_go(m, tok, clock_us(), ARGV[3], ARGV[4], tonumber(ARGV[5])) then
  return 1
end
return 0
