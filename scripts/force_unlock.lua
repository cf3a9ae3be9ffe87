-- force_unlock.lua: remove a lock's holders for an operator, whoever they
-- are, and wake every waiter. Fence keys are kept, so fences keep rising.
-- KEYS     the keys that record the lock's holders
-- ARGV[1]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[2…] the lock's release channels; each gets 'all'
-- Returns  the number of keys removed
local n = redis.call('DEL', unpack(KEYS))
for i = 2, #ARGV do
  redis.call(ARGV[1], ARGV[i], 'all')
end
return n
