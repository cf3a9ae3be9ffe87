-- sem_held.lua: tell whether a Semaphore lease is live, without changing
-- anything (an expired lease may not have been dropped yet).
-- KEYS     as for sem_acquire (only KEYS[1] and KEYS[3] are used)
-- ARGV[1]  token of the lease
-- Returns  1 when live, else 0.
local deadline = redis.call('ZSCORE', KEYS[3], ARGV[1])
if deadline and (deadline == 'inf' or tonumber(deadline) > time_ms()) and lease_of(KEYS[1], ARGV[1]) then
  return 1
end
return 0
