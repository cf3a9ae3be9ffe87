-- redlock_status.lua: one node's view of a Redlock mutex, without
-- changing it.
-- KEYS[1]  the owner key (see lib/owner.lua)
-- KEYS[2]  this node's last fence
-- ARGV     none
-- Returns  {held (0|1), remaining TTL in ms (-1: never expires, -2: free),
--           fence, holder metadata, acquired at (server ms), the holder's
--           lease id ('' when free)}: the id tells which nodes' holders
--           are the same lease.
local v = redis.call('GET', KEYS[1])
local out = owner_status(KEYS[1], KEYS[2])
local h = owner_of(v)
table.insert(out, h and h.id or '')
return out
