-- owner_refresh.lua: extend the lease if the token still holds the lock.
-- KEYS[1]  the lock's owner key (Mutex, FairMutex; see lib/owner.lua)
-- ARGV[1]  token of the lease
-- ARGV[2]  new TTL in milliseconds
-- Returns  1 when extended; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
