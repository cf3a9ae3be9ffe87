-- rw_unlock.lua: release the write side of an RWMutex if the token holds
-- it, and wake every waiting reader and one waiting writer per client.
-- KEYS[1]  the writer's owner key (KEYS[2..6] unused)
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the readers' release channel
-- ARGV[4]  the writers' release channel
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if not owns(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
-- Every waiting reader can go in together; of the writers only one can.
redis.call(ARGV[2], ARGV[3], 'all')
redis.call(ARGV[2], ARGV[4], 'one')
return 1
