-- queue_status.lua: describe an exclusive lock with a queue of waiters
-- (FairMutex, Mutex) without changing it.
-- KEYS     as queue_acquire.lua's: [1] the owner key, [2] the last fence,
--          [3] the queue, [4] liveness, [5] waiter metadata; [2] to [5]
--          declared on a Cluster only, else named from [1]
-- ARGV     none
-- Returns  {held (0|1), remaining TTL in ms (-1: never expires, -2: free),
--           fence, holder metadata, acquired at (server ms),
--           waiters: flat list of {metadata, arrived at (server ms)} in order}
-- Waiters past their liveness deadline are left out.
local now_ms = time_ms()
local owner = KEYS[1]
local out = owner_status(owner, KEYS[2] or owner .. ':fence')
table.insert(out, live_waiters(KEYS[3] or owner .. ':queue', KEYS[4] or owner .. ':alive', KEYS[5] or owner .. ':wmeta', now_ms))
return out
