-- rw_rrefresh.lua: extend a read share of an RWMutex if it is still live.
-- KEYS[1]  readers, KEYS[2] reader expiries, KEYS[3] reader details
--          (rw_rlock's KEYS[3] to KEYS[5]): only the keys a share keeps,
--          since while a Cluster slot moves, Redis refuses a script naming
--          a key that does not exist (TRYAGAIN)
-- ARGV[1]  token of the share
-- ARGV[2]  new TTL in ms
-- Returns  1 when extended; 0 when the token had no live share (nothing
--          changes, but that a share of it that ran out is dropped).
local now_ms = time_ms()
prune_waiters(KEYS[1], KEYS[2], KEYS[3], int(now_ms))
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s then
  return 0
elseif s ~= 'inf' and tonumber(s) <= now_ms then
  -- Ran out, but left for a later prune (more were due than one drops):
  -- gone all the same, as a share kept in the owner key would be.
  drop_waiters(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
  return 0
end
local deadline, left = deadline_of(ARGV[2], now_ms)
redis.call('ZADD', KEYS[2], 'XX', deadline, ARGV[1])
expire_by_last(KEYS[2], now_ms, deadline, left, KEYS[1], KEYS[2], KEYS[3])
return 1
