-- rw_rheld.lua: tell whether a read share of an RWMutex is live, without
-- changing anything (an expired share may not have been pruned yet).
-- KEYS[1]  reader expiries: zset token -> deadline (server ms; inf: never)
--          (rw_rlock's KEYS[4]: only a key a share keeps)
-- ARGV[1]  token of the share
-- Returns  1 when live, else 0.
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if deadline and (deadline == 'inf' or tonumber(deadline) > time_ms()) then
  return 1
end
return 0
