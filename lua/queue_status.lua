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
table.insert(out, live_waiters(KEYS[3], KEYS[4], KEYS[5], now_ms))
return out
