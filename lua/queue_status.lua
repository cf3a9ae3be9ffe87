-- queue_status.lua: describe an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) without changing it.
-- KEYS[1]  the owner key
-- KEYS[2]  the last fence
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata
-- ARGV     none
-- Returns  {held (0|1), remaining TTL in ms (-1: never expires, -2: free),
--           fence, holder metadata, acquired at (server ms),
--           waiters: flat list of {metadata, arrived at (server ms)} in order}
-- Waiters past their liveness deadline are left out.
local now_ms = time_ms()
local out = owner_status(KEYS[1], KEYS[2])
local q = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
local waiters = {}
for i = 1, #q, 2 do
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], q[i]) or '0')
  if deadline > now_ms then
    table.insert(waiters, redis.call('HGET', KEYS[5], q[i]) or '')
    table.insert(waiters, math.floor(tonumber(q[i + 1]) / 1000))
  end
end
table.insert(out, waiters)
return out
