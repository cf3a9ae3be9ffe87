-- set_release.lua: release a member of a mutex set if the token holds it.
-- The member goes to the first waiter that would take it, or back to the
-- free ones as the most recently used (see set_let_go in lib/set.lua).
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member
-- ARGV[3]  "<starve_us> <publish> <channel>", read only when somebody
--          waits or the member is being removed (see wake_args):
--          starve_us, the member is left free rather than handed over
--          while the waiter first for it has waited less; publish, the
--          command to wake waiters with, PUBLISH or SPUBLISH on Redis
--          Cluster; channel, the set's channel
-- Returns  1 when released; 0 when the token did not hold it. Nothing
--          changes then, except that a lease of this token that expired is
--          cleared as the next acquire would clear it.
local tok, m = ARGV[1], ARGV[2]
if not set_owns(m, tok) then
  return 0
end
local clock = clock_us()
local queued = redis.call('EXISTS', KEYS[11]) == 1
-- The common case, nobody waiting and the member staying in the set: it
-- goes back to the free ones, with the lease's end as its last use.
if not queued and redis.call('SISMEMBER', KEYS[9], m) == 0 then
  local live, used = set_lease_end(m, clock)
  set_unhold(m, tok)
  redis.call('ZADD', KEYS[2], used, m)
  return live and 1 or 0
end
-- @helpers
local starve_us, publish, channel = wake_args(ARGV[3])
if set_let_go(m, tok, clock, publish, channel, starve_us, queued) then
  return 1
end
return 0
