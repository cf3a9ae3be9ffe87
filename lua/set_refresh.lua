-- set_refresh.lua: extend a member's lease if the token still holds it.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  the member
-- Returns  1 when extended; 0 when the token does not hold the member or
--          its lease expired (nothing changes).
local tok, m = ARGV[1], ARGV[3]
local r = redis.call('HGET', KEYS[2], set_field(m))
if not held_by(r, tok) then
  return 0
end
local clock = clock_us()
if not set_live(redis.call('ZSCORE', KEYS[1], m), tonumber(clock)) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', set_score(string.sub(clock, 1, -4), ARGV[2]), m)
if set_removing(r, tok) then
  set_follow()
end
return 1
