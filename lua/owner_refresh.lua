-- owner_refresh.lua: extend the lease if the token still holds the lock.
-- KEYS[1]  the lock's owner key (Mutex, FairMutex, Election; see
--          lib/owner.lua)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  (Election only) publish command: PUBLISH, or SPUBLISH on Redis
--          Cluster; ARGV[4] the channel on which a lease brought nearer
--          its end is announced by "leader": those who follow the holder
--          wake when it would run out, and must learn the new time
-- Returns  1 when extended; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
local ttl = tonumber(ARGV[2])
local sooner = false
if ARGV[4] then
  local left = redis.call('PTTL', KEYS[1]) -- -1: it never expired
  sooner = left == -1 or left > ttl
end
redis.call('PEXPIRE', KEYS[1], ttl)
if sooner then
  redis.pcall(ARGV[3], ARGV[4], 'leader') -- extended: never fail on it
end
return 1
