-- sem_held.lua: tell whether a Semaphore lease is live, without changing
-- anything (an expired lease may not have been dropped yet).
-- KEYS[1]  the semaphore's main key, KEYS[2] its leases (as for
--          sem_refresh: only the keys a held lease keeps)
-- ARGV[1]  token of the lease
-- Returns  1 when live, else 0.
local deadline = redis.call('ZSCORE', KEYS[2], ARGV[1])
if deadline and (deadline == 'inf' or tonumber(deadline) > time_ms()) and lease_of(KEYS[1], ARGV[1]) then
  return 1
end
return 0
