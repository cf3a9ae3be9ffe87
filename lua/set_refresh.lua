-- set_refresh.lua: extend a member's lease if the token still holds it.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  the member
-- Returns  1 when extended; 0 when the token does not hold the member or
--          its lease expired (nothing changes).
local tok, m = ARGV[1], ARGV[3]
if not set_owns(m, tok) then
  return 0
end
local now = now_us()
local e = set_expiry(m)
if not e or e <= math.floor(now / 1000) then
  return 0
end
redis.call('ZADD', KEYS[3], 'XX', int(math.ceil(now / 1000) + tonumber(ARGV[2])), m)
set_follow(m)
return 1
