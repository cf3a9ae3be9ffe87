-- sem_refresh.lua: extend a Semaphore lease if it is still live.
-- KEYS[1]  the semaphore's main key (see sem_acquire)
-- KEYS[2]  its leases (sem_acquire's KEYS[3]); only the keys a held lease
--          keeps are named: while a Cluster slot moves, Redis refuses a
--          script naming a key that does not exist (TRYAGAIN)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- Returns  1 when extended; 0 when the token held no live lease (nothing
--          changes).
local now_ms = time_ms()
local deadline = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not deadline or (deadline ~= 'inf' and tonumber(deadline) <= now_ms) or not lease_of(KEYS[1], ARGV[1]) then
  return 0
end
local later, left = deadline_of(ARGV[2], now_ms)
redis.call('ZADD', KEYS[2], 'XX', later, ARGV[1])
outlive(KEYS[1], KEYS[2], left, false)
return 1
