-- sem_refresh.lua: extend a Semaphore lease if it is still live.
-- KEYS     as for sem_acquire (only KEYS[1] and KEYS[3] are used)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- Returns  1 when extended; 0 when the token held no live lease (nothing
--          changes).
local now_ms = time_ms()
local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not deadline or (deadline ~= 'inf' and tonumber(deadline) <= now_ms) or not lease_of(KEYS[1], ARGV[1]) then
  return 0
end
local later, left = deadline_of(ARGV[2], now_ms)
redis.call('ZADD', KEYS[3], 'XX', later, ARGV[1])
outlive(KEYS[1], KEYS[3], left, false)
return 1
