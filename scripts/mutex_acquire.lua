-- mutex_acquire.lua: take the mutex if it is free.
-- KEYS[1]  the mutex: hash {tok, fence, meta, since}, expiring with the lease
-- KEYS[2]  the mutex's last fence
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in milliseconds; 0 = the lease never expires
-- ARGV[3]  metadata shown by Status
-- Returns  {1, fence} when taken (also when this token already holds it:
--          go-redis may send a script again after a lost reply);
--          {0, holder's remaining TTL in ms (-1: never expires), holder's fence} when held.
local held = redis.call('HMGET', KEYS[1], 'tok', 'fence')
if held[1] == ARGV[1] then
  return {1, tonumber(held[2])}
elseif held[1] then
  return {0, redis.call('PTTL', KEYS[1]), tonumber(held[2])}
end
return {1, take_owner(KEYS[1], KEYS[2], ARGV[1], ARGV[3], tonumber(ARGV[2]), now_us())}
