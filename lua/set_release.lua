-- set_release.lua: release a member of a mutex set if the token holds it.
-- The member goes to the first waiter that would take it, or back to the
-- free ones as the most recently used (see set_let_go in lib/set.lua).
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys; on a
--          single Redis the main key alone, see loadLazyNaming)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member's field in KEYS[2] (see set_field)
-- ARGV[3]  "<starve_us> <publish> <channel>", read only when somebody
--          waits or the member is being removed (see wake_args):
--          starve_us, the member is left free rather than handed over
--          while the waiter first for it has waited less; publish, the
--          command to wake waiters with, PUBLISH or SPUBLISH on Redis
--          Cluster; channel, the set's channel
-- ARGV[4]  the member, when its field is not its name; absent when it is
-- Returns  1 when released; 0 when the token did not hold it, or its lease
--          had run out (then the member keeps that end as its last use).
local tok, pool = ARGV[1], KEYS[1]
local held = KEYS[2] or pool .. ':held'
-- First read of KEYS[2], before anything is written (see lib/set.lua),
-- and held_by (lib/owner.lua) written out: a helper defined costs every
-- run a closure.
local r = redis.call('HGET', held, ARGV[2])
if not r or string.find(r, tok, 1, true) ~= 1 or string.byte(r, #tok + 1) ~= 32 then
  return 0
end
local m = ARGV[4] or ARGV[2]
local t = redis.call('TIME')
local clock = t[1] .. string.sub('00000' .. t[2], -6) -- clock_us, written out
local queued = redis.call('EXISTS', KEYS[5] or pool .. ':queue') == 1
-- The common case, nobody waiting and the member staying in the set: it
-- goes back to the free ones from now, unless the lease ran out before
-- (LT: its end stays its last use; CH: whether it was live).
if not queued and string.byte(r, #tok + 2) ~= 114 then
  local live = redis.call('ZADD', pool, 'XX', 'LT', 'CH', clock, m)
  redis.call('HDEL', held, '\0' .. tok)
  return live
end
-- @helpers
name_keys()
local starve_us, publish, channel = wake_args(ARGV[3])
if set_let_go(m, tok, r, clock, publish, channel, starve_us, queued) then
  return 1
end
return 0
