-- rw_rrefresh.lua: extend a read share of an RWMutex if it is still live.
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details
--          (KEYS[1], KEYS[2], KEYS[6] unused)
-- ARGV[1]  token of the share
-- ARGV[2]  new TTL in ms
-- Returns  1 when extended; 0 when the token had no live share (nothing changes).
local now_ms = time_ms()
prune_waiters(KEYS[3], KEYS[4], KEYS[5], int(now_ms))
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  return 0
end
local deadline, left = deadline_of(ARGV[2], now_ms)
redis.call('ZADD', KEYS[4], 'XX', deadline, ARGV[1])
expire_by_last(KEYS[4], now_ms, deadline, left, KEYS[3], KEYS[4], KEYS[5])
return 1
